-- Rate limits (docs/flow-control.md, Rate limits): at most max_starts tasks of one (scope, key)
-- start in any window of length per, across every worker. The limit is on start times, so it is
-- decided where a task starts: the claim (pgflow._start_tasks calls pgflow._rate_gate for the
-- rate-limited tasks it just claimed). A task whose key's window is full is not started: it goes
-- back to 'waiting' with not_before, the time a start will fit, and its message is archived (a
-- claim never skips or hides a message for later). pgflow.release_rate_waiting, called by every
-- worker's ticker and by pgflow.tick, sends it a new message once its time has come.
--
-- Exactness. A sliding log, not a token bucket: a bucket of N refilling at N per interval lets
-- 2N start within one interval (a full bucket, then its refill), and the promise is N in ANY
-- window. Each key keeps the times of its last max_starts starts (pgflow.rate_limit_windows). The
-- gate takes the key's transaction lock, reads the clock after it, and starts a task only if
-- fewer than max_starts recorded starts lie within per before that time; it records the start and
-- holds the lock until commit. Of two claims of one key the second reads the clock after the
-- first committed its starts, so the times are recorded in order and every start is checked
-- against every earlier one. A claim rolled back (a worker killed) records nothing and starts
-- nothing. A retry, a recovered stalled task or a deferred one is claimed again, and counted
-- again: each claim is a start.
--
-- Locks. A claim takes rate locks (in lock-key order) before its commit takes any concurrency
-- lock (0260_flow_control.sql, deferred to commit); pgflow.tick and release_rate_waiting take the
-- rate locks they need first too, and only with pg_try_advisory_xact_lock. So rate locks always
-- precede concurrency locks, each class in lock-key order: no cycle can form.

-- The start times of each (scope, key)'s last max_starts starts, oldest first. One row per key,
-- written under the key's rate lock only; a row whose starts all left the window is deleted by
-- pgflow.tick.
create table if not exists pgflow.rate_limit_windows (
  scope text not null,
  key text not null,
  starts timestamptz[] not null,
  constraint rate_limit_windows_pkey primary key (scope, key)
);

-- The class of the rate locks: the bytes 'pgfR' (see pgflow._limit_lock_class, 'pgfL').
create or replace function pgflow._rate_lock_class()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 1885824594
$$;

-- Sets the rate limit of a scope (creating it). The operator's way to change it between deploys;
-- the next compile of a flow that names the scope sets it to that flow's value again.
create or replace function pgflow.set_rate_limit(scope text, max_starts integer, per interval)
returns void
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  problems text[];
begin
  if scope is null or scope !~ '^[A-Za-z0-9_.:/-]{1,200}$' then
    raise exception 'set_rate_limit: invalid scope %', coalesce(quote_literal(scope), 'NULL')
      using errcode = '22023', hint = 'a scope is a step''s "<alias or flow>/<step>"';
  end if;
  problems := pgflow._rate_limit_problems('set_rate_limit',
    jsonb_build_object('limit', max_starts, 'per', extract(epoch from per) * 1000));
  if cardinality(problems) > 0 then
    raise exception '%', array_to_string(problems, '; ') using errcode = '22023';
  end if;
  insert into pgflow.rate_limits as l (scope, max_starts, per)
  values (set_rate_limit.scope, set_rate_limit.max_starts, set_rate_limit.per)
  on conflict on constraint rate_limits_pkey do update
  set max_starts = excluded.max_starts, per = excluded.per, updated_at = now()
  where (l.max_starts, l.per) is distinct from (excluded.max_starts, excluded.per);
end;
$$;

-- Sets a step's rate limit (rate_limit NULL: none): at most rate_limit of its tasks per key start
-- in any window of length per. The SQL form of the DSL's rateLimit, validated the same way. The
-- scope is the step's own '<alias or flow>/<step>' (the versions behind one alias share it); the
-- limit is upserted for it. Tasks already created keep the scope and key they were created with.
-- Returns the step.
create or replace function pgflow.set_step_rate_limit(
  flow_slug text,
  step_slug text,
  rate_limit integer,
  per interval,
  rate_key text default null,
  rate_key_from text default 'run'
)
returns pgflow.steps
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  step pgflow.steps;
  problems text[];
  scope text;
begin
  step := pgflow._step_for_update(set_step_rate_limit.flow_slug, set_step_rate_limit.step_slug);
  if rate_limit is not null then
    problems := pgflow._rate_limit_problems(format('step %s.%s', step.flow_slug, step.step_slug),
      jsonb_build_object('limit', rate_limit, 'per', extract(epoch from per) * 1000,
                         'key', rate_key, 'keyFrom', rate_key_from));
    if cardinality(problems) > 0 then
      raise exception '%', array_to_string(problems, '; ') using errcode = '22023';
    end if;
    scope := pgflow._default_limit_scope(step.flow_slug, step.step_slug);
  end if;
  update pgflow.steps s
  set rate_scope = scope,
      rate_key = case when scope is not null then set_step_rate_limit.rate_key::jsonpath end,
      rate_key_from = case when scope is not null and set_step_rate_limit.rate_key is not null
                           then coalesce(set_step_rate_limit.rate_key_from, 'run') end
  where s.flow_slug = step.flow_slug and s.step_slug = step.step_slug
  returning * into step;
  if scope is not null then
    perform pgflow.set_rate_limit(scope, rate_limit, per);
  end if;
  return step;
end;
$$;

-- The recorded starts of a (scope, key) within per before p_at, oldest first.
create or replace function pgflow._rate_recent(p_scope text, p_key text, p_per interval, p_at timestamptz)
returns timestamptz[]
language sql
stable
set search_path = ''
as $$
  select coalesce(array_agg(x order by x), '{}')
  from pgflow.rate_limit_windows w cross join unnest(w.starts) x
  where w.scope = p_scope and w.key = p_key and x > p_at - p_per
$$;

-- How many more tasks of a (scope, key) a release may send now: the limit, less the starts in
-- the window, less the tasks released and not yet started. A hint read without the lock, so a
-- release does not send messages the claim would only send back; exactness is the claim's.
create or replace function pgflow._rate_room(p_scope text, p_key text)
returns integer
language sql
stable
set search_path = ''
as $$
  select coalesce(l.max_starts - cardinality(pgflow._rate_recent(p_scope, p_key, l.per, clock_timestamp()))
                  - (select count(*) from pgflow.step_tasks t
                     where t.rate_scope = p_scope and t.rate_key = p_key and t.status = 'queued')::integer,
                  2147483647)
  from (select 1) one
  left join pgflow.rate_limits l on l.scope = p_scope
$$;

-- The rate check of a claim: p_msg_ids are messages of p_queue whose rate-limited tasks the
-- caller has just claimed (status 'started'). Per (scope, key), in lock-key order and under its
-- rate lock, the tasks that fit the window start now (by priority, then message id), their start
-- times recorded and stamped on the tasks; the others go back to 'waiting' with not_before, when
-- their turn will come if nothing else takes it, their attempt not counted and their message
-- archived. Returns the messages of the tasks sent back. Called by _start_tasks only.
create or replace function pgflow._rate_gate(p_queue text, p_msg_ids bigint[])
returns bigint[]
language plpgsql
volatile
set search_path = ''
as $$
declare
  k record;
  lim pgflow.rate_limits;
  now_at timestamptz;
  recent timestamptz[];
  room integer;
  accepted integer;
  back bigint[];
  sent_back bigint[] := '{}';
begin
  for k in
    select distinct t.rate_scope, t.rate_key, pgflow._limit_lock_key(t.rate_scope, t.rate_key) as lock_key
    from unnest(p_msg_ids) i(mid)
    cross join lateral (
      select t2.rate_scope, t2.rate_key from pgflow.step_tasks t2
      where t2.queue_name = p_queue and t2.message_id = i.mid
      limit 1
    ) t
    where t.rate_scope is not null
    order by 3, 1, 2
  loop
    perform pg_catalog.pg_advisory_xact_lock(pgflow._rate_lock_class(), k.lock_key);
    select * into lim from pgflow.rate_limits l where l.scope = k.rate_scope;
    -- A scope without a limit row (deleted by hand) limits nothing.
    continue when not found;
    -- After the lock: every start recorded before it is committed and read here.
    now_at := clock_timestamp();
    recent := pgflow._rate_recent(k.rate_scope, k.rate_key, lim.per, now_at);
    room := greatest(lim.max_starts - cardinality(recent), 0);
    with mine as (
      select t.run_id, t.step_slug, t.task_index, t.message_id,
             row_number() over (order by t.priority desc, t.message_id) as rn
      from unnest(p_msg_ids) i(mid)
      cross join lateral (
        select t2.run_id, t2.step_slug, t2.task_index, t2.message_id, t2.priority, t2.rate_scope, t2.rate_key
        from pgflow.step_tasks t2
        where t2.queue_name = p_queue and t2.message_id = i.mid
        limit 1
      ) t
      where t.rate_scope = k.rate_scope and t.rate_key = k.rate_key
    ),
    started as (
      update pgflow.step_tasks t set started_at = now_at
      from mine m
      where m.rn <= room
        and t.run_id = m.run_id and t.step_slug = m.step_slug and t.task_index = m.task_index
      returning 1
    ),
    waiting as (
      -- The j-th task over the limit fits when the j-th start of the window (counting the ones
      -- made now) leaves it, one interval later per full round of the window.
      update pgflow.step_tasks t
      set status = 'waiting', message_id = null, attempts_count = t.attempts_count - 1, started_at = null,
          not_before = w.s[((m.rn - room - 1) % lim.max_starts) + 1]
                       + lim.per * (((m.rn - room - 1) / lim.max_starts) + 1)
      from mine m
      cross join (
        select (recent || array_fill(now_at, array[least(room, (select count(*)::integer from mine))]))
                 [greatest(1, cardinality(recent) + least(room, (select count(*)::integer from mine))
                              - lim.max_starts + 1):] as s
      ) w
      where m.rn > room
        and t.run_id = m.run_id and t.step_slug = m.step_slug and t.task_index = m.task_index
      returning m.message_id
    )
    select (select count(*)::integer from started), (select array_agg(message_id) from waiting)
    into accepted, back;
    if accepted > 0 then
      insert into pgflow.rate_limit_windows as w (scope, key, starts)
      values (k.rate_scope, k.rate_key, (recent || array_fill(now_at, array[accepted]))
                [greatest(1, cardinality(recent) + accepted - lim.max_starts + 1):])
      on conflict on constraint rate_limit_windows_pkey do update set starts = excluded.starts;
    end if;
    if back is not null then
      perform pgmq.archive(p_queue, back);
      sent_back := sent_back || back;
    end if;
  end loop;
  return sent_back;
end;
$$;

-- The periodic release of rate limits: sends a new message to each waiting task whose not_before
-- has come, at most as many per (scope, key) as its window has room for now (pgflow._rate_room),
-- by priority, then age. A key whose rate lock another transaction holds is left to the next pass
-- (that transaction is a claim or a release of the same key). Tasks that also have a concurrency
-- limit are released by that limit's own release (pgflow._release_waiting), which knows its
-- capacity (unless with_concurrency is false: pgflow.tick, which releases every concurrency key in
-- one ordered pass of its own after this one). Every worker calls it with its schedule ticker (each
-- second by default), in a transaction of its own: its locks are taken in one ordered pass, and a
-- second pass in the same transaction could take a lower lock after a higher one. Returns how
-- many tasks it released.
create or replace function pgflow.release_rate_waiting(with_concurrency boolean default true)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  k record;
  room integer;
  rel_runs uuid[];
  rel_steps text[];
  rel_idx integer[];
  released integer := 0;
begin
  for k in
    select d.rate_scope, d.rate_key, d.limit_scope, d.limit_key
    from (select distinct t.rate_scope, t.rate_key, t.limit_scope, t.limit_key from pgflow.step_tasks t
          where t.status = 'waiting' and t.not_before <= clock_timestamp()
            and (release_rate_waiting.with_concurrency or t.limit_scope is null)) d
    -- Rate locks first, then the concurrency keys' releases in their own lock order.
    order by d.limit_scope is not null,
             case when d.limit_scope is null then pgflow._limit_lock_key(d.rate_scope, d.rate_key)
                  else pgflow._limit_lock_key(d.limit_scope, d.limit_key) end,
             d.rate_scope, d.rate_key, d.limit_scope, d.limit_key
  loop
    if k.limit_scope is not null then
      released := released + pgflow._release_waiting(k.limit_scope, k.limit_key);
      continue;
    end if;
    continue when not pg_catalog.pg_try_advisory_xact_lock(pgflow._rate_lock_class(),
                                                           pgflow._limit_lock_key(k.rate_scope, k.rate_key));
    room := pgflow._rate_room(k.rate_scope, k.rate_key);
    continue when room <= 0;
    select array_agg(p.run_id), array_agg(p.step_slug), array_agg(p.task_index)
    into rel_runs, rel_steps, rel_idx
    from (
      select t.run_id, t.step_slug, t.task_index from pgflow.step_tasks t
      where t.status = 'waiting' and t.not_before <= clock_timestamp() and t.limit_scope is null
        and t.rate_scope = k.rate_scope and t.rate_key = k.rate_key
      order by t.priority desc, t.queued_at, t.run_id, t.step_slug, t.task_index
      limit room
      for update skip locked
    ) p;
    released := released + pgflow._release_tasks(rel_runs, rel_steps, rel_idx);
  end loop;
  return released;
end;
$$;

-- Why tasks of one (scope, key) wait for a rate limit, in words:
-- "rate limit notify/deliverSlack key C-1: 1 per 1 s, next at 2026-12-06 03:04:05.120 UTC".
create or replace function pgflow.rate_waiting_reason(
  rate_scope text,
  rate_key text,
  max_starts integer,
  per interval,
  next_at timestamptz
)
returns text
language sql
immutable
set search_path = ''
as $$
  select format('rate limit %s%s: %s per %s, next at %s', rate_waiting_reason.rate_scope,
                case when rate_waiting_reason.rate_key <> '' then ' key ' || rate_waiting_reason.rate_key else '' end,
                coalesce(rate_waiting_reason.max_starts::text, 'unlimited'),
                case when extract(epoch from rate_waiting_reason.per) = trunc(extract(epoch from rate_waiting_reason.per))
                     then trunc(extract(epoch from rate_waiting_reason.per))::text || ' s'
                     else round(extract(epoch from rate_waiting_reason.per) * 1000)::text || ' ms' end,
                to_char(rate_waiting_reason.next_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC')
$$;

-- Why the waiting tasks of one group wait, for waiting_tasks and get_run: for a concurrency limit
-- (p_rate false) the key's tasks in flight and its limit; for a rate limit (the tasks have a
-- not_before) the key's starts in its window now and its limit per window. With the reason in
-- words (waiting_reason, rate_waiting_reason).
create or replace function pgflow._waiting_why(p_rate boolean, p_scope text, p_key text, p_next_at timestamptz)
returns table (in_flight bigint, max_running integer, reason text)
language sql
stable
set search_path = ''
as $$
  select h.n, l.max_running, pgflow.waiting_reason(p_scope, p_key, h.n, l.max_running)
  from (select count(*) as n from pgflow.step_tasks t
        where t.limit_scope = p_scope and t.limit_key = p_key and t.status in ('queued', 'started')) h
  left join pgflow.concurrency_limits l on l.scope = p_scope
  where not p_rate and p_scope is not null
  union all
  -- No limit at all: the task waits for its queue's turn (0258_fair_window.sql).
  select null::bigint, null::integer, 'fair share: waiting for its turn on a busy shared queue'
  where not p_rate and p_scope is null
  union all
  select cardinality(pgflow._rate_recent(p_scope, p_key, l.per, clock_timestamp()))::bigint, l.max_starts,
         pgflow.rate_waiting_reason(p_scope, p_key, l.max_starts, l.per, p_next_at)
  from (select 1) one
  left join pgflow.rate_limits l on l.scope = p_scope
  where p_rate
$$;

-- Tasks waiting for capacity, per queue and (scope, key): how many, since when, and why, e.g.
-- "concurrency slack-api key C042: 3 of 3 in flight" or "rate limit notify/send key C042: 1 per
-- 1 s, next at ...". A task with a not_before waits for its rate limit (limit_scope and limit_key
-- are then its rate scope and key; in_flight its key's starts in the window, max_running the
-- starts allowed per window), any other for its concurrency limit (in_flight counts the key's
-- tasks that hold capacity, queued or started, on any queue). The one place status, the
-- dashboard and the client read waiting work from.
create or replace function pgflow.waiting_tasks(queue_name text default null)
returns table (
  queue_name text,
  limit_scope text,
  limit_key text,
  waiting bigint,
  oldest_queued_at timestamptz,
  in_flight bigint,
  max_running integer,
  reason text
)
language sql
stable
set search_path = ''
as $$
  select w.queue_name, w.scope, w.key, w.waiting, w.oldest, y.in_flight, y.max_running, y.reason
  from (select t.queue_name, t.not_before is not null as rate,
               case when t.not_before is not null then t.rate_scope else t.limit_scope end as scope,
               case when t.not_before is not null then t.rate_key else t.limit_key end as key,
               count(*) as waiting, min(t.queued_at) as oldest, min(t.not_before) as next_at
        from pgflow.step_tasks t
        where t.status = 'waiting'
          and (waiting_tasks.queue_name is null or t.queue_name = waiting_tasks.queue_name)
        group by 1, 2, 3, 4) w
  cross join lateral pgflow._waiting_why(w.rate, w.scope, w.key, w.next_at) y
  order by w.queue_name, w.oldest, w.scope, w.key
$$;
