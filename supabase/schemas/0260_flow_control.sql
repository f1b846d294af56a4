-- Flow control's release machinery (docs/flow-control.md). Workers read each message once and
-- claim by exact identity, so a limit cannot be applied by skipping messages: it is applied before
-- a message exists. A task of a step with a concurrency limit (0255_limits.sql) is created
-- 'waiting', without a message, and is released (made 'queued', its message sent) when its
-- (scope, key) has capacity: at most the scope's limit of its tasks are queued or started at once.
--
-- Exactness. A (scope, key)'s capacity is only ever decided under its transaction lock
-- (pgflow._release_waiting): the lock is taken, the tasks holding capacity are counted (a fresh
-- snapshot, taken after the lock, so it sees every transaction that released or freed under the
-- lock before), and at most limit - held waiting tasks are released. Every change that frees
-- capacity (a held task that completes, fails for good, is cancelled or deleted) or creates a
-- waiting task runs that same function before its transaction commits, under the same lock: so of
-- two transactions touching one key, the second counts after the first committed, and no freed
-- unit is missed. Released-or-started tasks of a key therefore never exceed the limit, and a task
-- starts only once released, so started ones never do either. A retry keeps its unit (its task
-- goes from started back to queued, with its message): it still holds the message in flight.
--
-- Deadlock freedom. The changes are noted per row by triggers (pgflow._note_limit_key) and the
-- locks are all taken at commit, by one deferred trigger (pgflow._release_noted), in the order
-- of their lock keys; tick and set_concurrency_limit take them in that order too. A transaction
-- holding a key lock waits for nothing but key locks of a higher order (the released rows are
-- taken with SKIP LOCKED, sends and announces never wait), so no cycle can form.

-- The class of the limit locks: the bytes 'pgfL', in the two-key form of advisory locks (see
-- pgflow._listen_lock_class, 'pgfw', for the other class).
create or replace function pgflow._limit_lock_class()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 1885824588
$$;

-- The second key of a (scope, key)'s lock. Two pairs that share a hash share a lock: that costs
-- them some waiting, never exactness.
create or replace function pgflow._limit_lock_key(p_scope text, p_key text)
returns integer
language sql
immutable
set search_path = ''
as $$
  select pg_catalog.hashtext(p_scope || chr(31) || p_key)
$$;

-- Releases waiting tasks a release picked (and locked): each is made queued and its message sent
-- to its queue snapshot, with what is left of its step's start delay, its message id stored on the
-- task; queues that got visible messages are announced. Returns how many were released.
create or replace function pgflow._release_tasks(p_runs uuid[], p_steps text[], p_idx integer[])
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
  ids bigint[];
begin
  if p_runs is null then
    return 0;
  end if;
  update pgflow.step_tasks t set status = 'queued', not_before = null
  from unnest(p_runs, p_steps, p_idx) as u(run_id, step_slug, task_index)
  where t.run_id = u.run_id and t.step_slug = u.step_slug and t.task_index = u.task_index;
  for grp in
    select u.queue_name, u.delay, array_agg(u.run_id order by u.ord) as runs,
           array_agg(u.step_slug order by u.ord) as steps, array_agg(u.task_index order by u.ord) as idxs,
           -- The body is informational only: the claim reads ids, never bodies.
           array_agg(jsonb_build_object('flow_slug', u.flow_slug, 'run_id', u.run_id,
                                        'step_slug', u.step_slug, 'task_index', u.task_index)
                     order by u.ord) as msgs
    from (
      select t.run_id, t.flow_slug, t.step_slug, t.task_index, t.queue_name, r.ord,
             -- The step's start delay counts from when the task was created, waiting included.
             greatest(0, ceil(extract(epoch from t.queued_at - clock_timestamp()) + s.opt_start_delay))::integer as delay
      from unnest(p_runs, p_steps, p_idx) with ordinality as r(run_id, step_slug, task_index, ord)
      join pgflow.step_tasks t on t.run_id = r.run_id and t.step_slug = r.step_slug and t.task_index = r.task_index
      join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    ) u
    group by u.queue_name, u.delay
  loop
    -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
    select array_agg(id order by id) into ids
    from pgmq.send_batch(grp.queue_name, grp.msgs, grp.delay) as id;
    update pgflow.step_tasks t set message_id = u.id
    from unnest(grp.runs, grp.steps, grp.idxs, ids) as u(run_id, step_slug, task_index, id)
    where t.run_id = u.run_id and t.step_slug = u.step_slug and t.task_index = u.task_index;
    if grp.delay = 0 then
      perform pgflow._announce('pgflow_queue:' || grp.queue_name, '');
    end if;
  end loop;
  return cardinality(p_runs);
end;
$$;

-- Releases the waiting tasks of one (scope, key) that its capacity allows: by priority (higher
-- first), then age (pgflow._release_tasks). A waiting
-- task locked by another transaction (a cancel) is skipped, and so is one a rate limit holds back
-- (0262_rate_limits.sql): its not_before has not come, or its rate key's window has no room now
-- (a hint read without the rate lock: the claim decides exactly, this only spares sending a
-- message the claim would send back). Returns how many were released.
create or replace function pgflow._release_waiting(p_scope text, p_key text)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  cap integer;
  held integer;
  rel_runs uuid[];
  rel_steps text[];
  rel_idx integer[];
begin
  perform pg_catalog.pg_advisory_xact_lock(pgflow._limit_lock_class(), pgflow._limit_lock_key(p_scope, p_key));
  -- After the lock: each statement of a read-committed transaction reads a fresh snapshot.
  select l.max_running into cap from pgflow.concurrency_limits l where l.scope = p_scope;
  select count(*) into held from pgflow.step_tasks t
  where t.limit_scope = p_scope and t.limit_key = p_key and t.status in ('queued', 'started');
  -- A scope without a limit row (it was never set, or deleted by hand) limits nothing.
  if coalesce(cap, 2147483647) - held <= 0 then
    return 0;
  end if;
  select array_agg(p.run_id), array_agg(p.step_slug), array_agg(p.task_index)
  into rel_runs, rel_steps, rel_idx
  from (
    select t.run_id, t.step_slug, t.task_index from pgflow.step_tasks t
    where t.limit_scope = p_scope and t.limit_key = p_key and t.status = 'waiting'
      and (t.rate_scope is null
           or ((t.not_before is null or t.not_before <= clock_timestamp())
               and pgflow._rate_room(t.rate_scope, t.rate_key) > 0))
    order by t.priority desc, t.queued_at, t.run_id, t.step_slug, t.task_index
    limit coalesce(cap, 2147483647) - held
    for update skip locked
  ) p;
  return pgflow._release_tasks(rel_runs, rel_steps, rel_idx);
end;
$$;

-- Notes, for this transaction, a (scope, key) whose capacity a task row changed: a waiting task
-- created, or a held task that completed, failed, was cancelled or deleted. Kept in a
-- transaction-local setting, so a rolled-back subtransaction forgets its notes with its changes.
create or replace function pgflow._note_limit_key()
returns trigger
language plpgsql
set search_path = ''
as $$
declare
  noted text[] := coalesce(nullif(pg_catalog.current_setting('pgflow.limit_keys', true), '')::text[], '{}');
  k text;
begin
  if tg_op = 'INSERT' then
    k := new.limit_scope || chr(31) || new.limit_key;
  else
    k := old.limit_scope || chr(31) || old.limit_key;
  end if;
  if not (k = any (noted)) then
    perform pg_catalog.set_config('pgflow.limit_keys', (noted || k)::text, true);
  end if;
  return null;
end;
$$;

-- At commit (a deferred trigger, once per noted row; the first does the work): releases what the
-- noted keys' capacity allows, taking their locks in lock-key order (the deadlock argument at the
-- top of this file). security definer: a deferred trigger fires at commit, after the security
-- definer function that changed the row (start_flow, cancel_run called by service_role) has
-- returned, so it would otherwise run as the caller, who may not execute the release.
create or replace function pgflow._release_noted()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  noted text[] := nullif(pg_catalog.current_setting('pgflow.limit_keys', true), '')::text[];
  k record;
begin
  if noted is null then
    return null;
  end if;
  perform pg_catalog.set_config('pgflow.limit_keys', '', true);
  for k in
    select split_part(n, chr(31), 1) as scope, substr(n, strpos(n, chr(31)) + 1) as key
    from unnest(noted) n
    order by pgflow._limit_lock_key(split_part(n, chr(31), 1), substr(n, strpos(n, chr(31)) + 1)), n
  loop
    perform pgflow._release_waiting(k.scope, k.key);
  end loop;
  return null;
end;
$$;

-- The triggers: only a limited task's row fires them (the WHEN is checked without a call), so an
-- unlimited flow pays nothing. One pair per event: an INSERT trigger may not name OLD.
create or replace trigger step_tasks_note_waiting after insert on pgflow.step_tasks
  for each row when (new.limit_scope is not null and new.status = 'waiting')
  execute function pgflow._note_limit_key();
create or replace trigger step_tasks_note_freed after update of status on pgflow.step_tasks
  for each row when (old.limit_scope is not null and old.status in ('queued', 'started')
                     and new.status not in ('queued', 'started'))
  execute function pgflow._note_limit_key();
create or replace trigger step_tasks_note_deleted after delete on pgflow.step_tasks
  for each row when (old.limit_scope is not null and old.status in ('queued', 'started'))
  execute function pgflow._note_limit_key();
-- (CREATE OR REPLACE does not apply to constraint triggers: each is created once.)
do $$
begin
  create constraint trigger step_tasks_release_waiting after insert on pgflow.step_tasks
  deferrable initially deferred
  for each row when (new.limit_scope is not null and new.status = 'waiting')
  execute function pgflow._release_noted();
  create constraint trigger step_tasks_release_freed after update of status on pgflow.step_tasks
  deferrable initially deferred
  for each row when (old.limit_scope is not null and old.status in ('queued', 'started')
                     and new.status not in ('queued', 'started'))
  execute function pgflow._release_noted();
  create constraint trigger step_tasks_release_deleted after delete on pgflow.step_tasks
  deferrable initially deferred
  for each row when (old.limit_scope is not null and old.status in ('queued', 'started'))
  execute function pgflow._release_noted();
exception when duplicate_object then
  null;
end
$$;

-- The periodic release: releases, for every (scope, key) with waiting tasks, what its capacity
-- allows now, in lock order. Every release that matters already happens in the transaction that
-- freed the capacity; this pass is the safety net for capacity freed outside pgflow's functions
-- (a task row changed by hand), and it releases what rate limits allow now
-- (pgflow.release_rate_waiting). It also fires schedules' due ticks. Workers call it with stalled recovery; pg_cron may call it too. Returns how
-- many tasks it released.
create or replace function pgflow.tick()
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  k record;
  released integer := 0;
begin
  -- Rate limits first: their locks come before every concurrency lock (0262_rate_limits.sql). The
  -- tasks that have a concurrency limit too are released by the loop below, in its one pass.
  released := pgflow.release_rate_waiting(false);
  for k in
    select w.limit_scope, w.limit_key
    from (select distinct t.limit_scope, t.limit_key from pgflow.step_tasks t
          where t.status = 'waiting' and t.limit_scope is not null) w
    order by pgflow._limit_lock_key(w.limit_scope, w.limit_key), w.limit_scope || chr(31) || w.limit_key
  loop
    released := released + pgflow._release_waiting(k.limit_scope, k.limit_key);
  end loop;
  -- Tasks waiting for their turn on a queue that left window mode while they were being parked
  -- (0258_fair_window.sql): the queue goes back to window mode with a window's worth released.
  for k in
    select distinct t.queue_name from pgflow.step_tasks t
    where t.status = 'waiting' and t.limit_scope is null and t.rate_scope is null
      and not exists (select 1 from pgflow.fair_windows w where w.queue_name = t.queue_name)
  loop
    insert into pgflow.fair_windows (queue_name) values (k.queue_name) on conflict do nothing;
    released := released + pgflow._release_turns(k.queue_name, pgflow._fair_window());
  end loop;
  -- Windows whose every start has left them hold nothing a claim would read.
  delete from pgflow.rate_limit_windows w
  where not exists (select 1 from pgflow.rate_limits l
                    where l.scope = w.scope and w.starts[cardinality(w.starts)] > clock_timestamp() - l.per);
  -- Schedules' due ticks too (0270_schedules.sql), so whatever calls tick fires them; safe beside
  -- every other ticker (one run per tick).
  perform pgflow.fire_due_schedules();
  return released;
end;
$$;

-- Why tasks of one (scope, key) wait, in words: "concurrency slack-api key C042: 3 of 3 in flight".
-- One wording for waiting_tasks and get_run, so status, the dashboard, runs show and the client
-- say the same thing.
create or replace function pgflow.waiting_reason(
  limit_scope text,
  limit_key text,
  in_flight bigint,
  max_running integer
)
returns text
language sql
immutable
set search_path = ''
as $$
  select format('concurrency %s%s: %s of %s in flight', waiting_reason.limit_scope,
                case when waiting_reason.limit_key <> '' then ' key ' || waiting_reason.limit_key else '' end,
                waiting_reason.in_flight, coalesce(waiting_reason.max_running::text, 'unlimited'))
$$;

-- pgflow.waiting_tasks, which lists waiting tasks and why they wait, is in 0262_rate_limits.sql:
-- it reads rate limits' windows too.
