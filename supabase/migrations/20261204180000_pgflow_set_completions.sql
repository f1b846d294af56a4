-- pgflow_set_completions: completions as a few set-based statements per batch, reported with the
-- next read in one call; hot-path plans that stay keyed after a burst.
--
-- - pgflow._complete_tasks replaces pgflow._complete_task: a batch of completions is six
--   statements whatever its size (lock the runs, complete the tasks, count them off their steps,
--   release dependents, count steps off their runs, archive once per queue) instead of five
--   statements and a nested call per task. complete_task and complete_tasks call it; their
--   arguments, checks and results are unchanged.
-- - pgflow.read_and_claim, pgflow._start_tasks and pgflow._complete_tasks price seq scans out
--   (set enable_seqscan = off): a worker's session keeps plans made while the tables were small
--   (a young database, or small tables autovacuum had just analysed), which scanned runs or step
--   states in full for every batch after a burst.
-- - pgflow.complete_and_claim (new): a batch's completions and the next read in one transaction,
--   exactly complete_tasks then read_and_claim without waiting; a busy worker makes one round trip
--   and one durable commit per batch instead of two.
-- - step_tasks loses step_tasks_worker_fkey and step_tasks_last_worker_idx: last_worker_id is
--   history, and every claim paid a lookup of the worker's row and an index entry for it (every
--   completion an index entry too). A pruned worker's id now stays on the tasks it ran instead of
--   becoming NULL. The questions asked by worker are about started tasks, which
--   step_tasks_started_idx finds.
-- - read_and_claim looks the worker's claim settings up once (pgflow._registered_claim), before
--   it reads; _start_tasks takes them, looks each step's timeout up once per batch, and skips the
--   statements for claimed messages needing set_vt and unclaimed ones when there are none.
-- - read_and_claim's re-stamp of a long read checks a task's status on the row it found.
-- - read_and_claim, _start_tasks and _complete_tasks use generic plans from the first call
--   (plan_cache_mode): with small batches their statements were planned again on every call.
--
-- No data changes. Dropping the foreign key and the index takes step_tasks' ACCESS EXCLUSIVE lock
-- for a moment (lock_timeout 5 s: claims and completions wait, nothing is rewritten). Workers of
-- the previous version call the same functions with the same arguments.
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if exists (select 1 from pgflow.migrations m where m.name = '20261204180000_pgflow_set_completions') then
    raise exception 'pgflow migration 20261204180000_pgflow_set_completions is already applied to this database; nothing was changed'
      using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
  end if;
end
$$;

set local lock_timeout = '5s';

-- ---- constraint pgflow.step_tasks.step_tasks_worker_fkey: no longer in the schema files
alter table pgflow.step_tasks drop constraint step_tasks_worker_fkey;

-- ---- function pgflow._complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer, p_archive boolean): no longer in the schema files
drop function pgflow._complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer, p_archive boolean);

-- ---- function pgflow._start_tasks(queue_name text, msg_ids bigint[], worker_id uuid, supported jsonb, p_read_visibility integer, p_unclaimed_visibility integer): no longer in the schema files
drop function pgflow._start_tasks(queue_name text, msg_ids bigint[], worker_id uuid, supported jsonb, p_read_visibility integer, p_unclaimed_visibility integer);

-- ---- index pgflow.step_tasks_last_worker_idx: no longer in the schema files
drop index pgflow.step_tasks_last_worker_idx;

-- ---- schemas/0400_start_tasks.sql: pgflow._registered_claim(p_worker_id uuid, p_queue_name text)
-- A registered worker's claim settings, one primary-key lookup whatever the size of its set: the
-- visibility its claims read with (claim_visibility, NULL when its steps' timeouts differ) and its
-- support set, keyed as _support_keys builds it. A worker id with no row (never registered, or its
-- row deleted since) fails with SQLSTATE PFW01, pgflow's own code for an unregistered worker
-- (class PF is used by neither Postgres nor the SQL standard), so a caller tells it from every
-- other error by its code alone; a worker registered for another queue fails too, since its set
-- says nothing about this one.
create or replace function pgflow._registered_claim(p_worker_id uuid, p_queue_name text)
returns table (claim_visibility integer, support_keys jsonb)
language plpgsql
stable
set search_path = ''
as $$
declare
  reg_queue text;
begin
  select w.queue_name, w.claim_visibility, coalesce(w.supported_keys, pgflow._support_keys(w.supported))
  into reg_queue, claim_visibility, support_keys
  from pgflow.workers w where w.worker_id = p_worker_id;
  if not found then
    raise exception 'start_tasks: worker % is not registered, so it has no recorded support set', p_worker_id
      using errcode = 'PFW01', hint = 'register it with pgflow.register_worker, or pass the supported pairs';
  end if;
  if reg_queue is distinct from p_queue_name then
    raise exception 'start_tasks: worker % is registered for queue %, not %', p_worker_id,
      quote_literal(reg_queue), quote_literal(p_queue_name)
      using errcode = '22023', hint = 'claim on the queue the worker registered, or pass the supported pairs';
  end if;
  return next;
end;
$$;

-- ---- schemas/0400_start_tasks.sql: pgflow._start_tasks(queue_name text, msg_ids bigint[], worker_id uuid, supported jsonb, p_read_visibility integer, p_unclaimed_visibility integer, p_support_keys jsonb)
-- supported => NULL claims against the set the worker registered (pgflow.workers.supported, keyed
-- once by register_worker; see _registered_claim): a worker with 1,000 pairs then sends none of
-- them with each batch. p_support_keys, when given, is that set already looked up by the caller
-- (read_and_claim). With explicit pairs a worker with no row still claims (its poll falls back to
-- them): the tasks it claims then record no last_worker_id, which can only name a registered
-- worker.
--
-- Each statement a claim runs costs a plan lookup and an executor start whatever the batch's size,
-- so the common claim (every message claimed, every step with the timeout the read used) runs two:
-- the claim and its result. A step's timeout is looked up once per step in the batch, not once per
-- task.
--
-- enable_seqscan = off: see read_and_claim (0410_read_and_claim.sql); start_tasks gets it here.
create or replace function pgflow._start_tasks(
  queue_name text,
  msg_ids bigint[],
  worker_id uuid,
  supported jsonb,
  p_read_visibility integer,
  p_unclaimed_visibility integer,
  p_support_keys jsonb default null
)
returns table (
  message_id bigint,
  disposition text,
  flow_slug text,
  run_id uuid,
  step_slug text,
  task_index integer,
  input jsonb,
  attempt integer,
  -- The message's visibility when this call changed it (set_vt), else NULL.
  vt timestamptz
)
language plpgsql
volatile
set search_path = ''
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
  q text := _start_tasks.queue_name;
  -- The support set keyed as pgflow._support_keys builds it.
  sup_keys jsonb := _start_tasks.p_support_keys;
  c_msg bigint[];
  c_flow text[];
  c_run uuid[];
  c_step text[];
  c_idx integer[];
  c_att integer[];
  -- Claimed messages whose step's timeout + 2 s is not the visibility the read gave them.
  v_msg bigint[];
  v_off integer[];
  n_ids integer;
  changed integer;
  u_msg bigint[];
  s_ids bigint[] := '{}';
  s_vts timestamptz[] := '{}';
  malformed boolean;
  -- The worker id stamped on claimed tasks: NULL for a worker with no row (see above).
  stamp uuid := _start_tasks.worker_id;
begin
  if q is null then
    raise exception 'start_tasks: queue_name must not be NULL' using errcode = '22004';
  end if;
  if supported is null then
    if sup_keys is null then
      select r.support_keys into sup_keys from pgflow._registered_claim(_start_tasks.worker_id, q) r;
    end if;
  -- One pass over the pairs both checks and unpacks them: this cost grows with the set and is
  -- paid per batch, which is why workers claim against their registered set instead.
  elsif jsonb_typeof(supported) = 'array' then
    select coalesce(jsonb_object_agg(
             case when jsonb_typeof(e) = 'array' then coalesce(e ->> 0, '') || chr(31) || coalesce(e ->> 1, '') else '' end,
             true), '{}'::jsonb),
           bool_or(case when jsonb_typeof(e) <> 'array' then true
                        when jsonb_array_length(e) <> 2 then true
                        else jsonb_typeof(e -> 0) <> 'string' or jsonb_typeof(e -> 1) <> 'string' end)
    into sup_keys, malformed
    from jsonb_array_elements(supported) e;
    perform 1 from pgflow.workers w where w.worker_id = _start_tasks.worker_id;
    if not found then
      stamp := null;
    end if;
  end if;
  if supported is not null and (jsonb_typeof(supported) <> 'array' or malformed) then
    raise exception 'start_tasks: supported must be a JSON array of [flow_slug, step_slug] pairs, got %',
      left(coalesce(supported::text, 'NULL'), 200) using errcode = '22023';
  end if;

  with claimed as (
    update pgflow.step_tasks t
    set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
        last_worker_id = stamp
    -- The plan must be driven by the ids, whatever the statistics say. A join on (queue, message
    -- id), `message_id = any (msg_ids)`, or runs and step_states joined by status each let a plan
    -- cached on stale statistics (a new queue, a fresh database, a burst: the planner expected
    -- no queued or started rows) scan every task, run or step state of the queue for every batch:
    -- a 3,000-run burst on a fresh database claimed 10 tasks in 80 ms. So each id is looked up on
    -- its own, its run and step state after it, each in a LATERAL ... LIMIT 1 (a lateral
    -- reference orders the join, the LIMIT keeps it from being flattened), and the task is updated
    -- by the row version found (a TID scan; a concurrent change is rechecked against the
    -- conditions below, as with any UPDATE).
    from (select k.tid, k.run_id, k.step_slug, k.task_index
          from (select distinct m from unnest(msg_ids) m where m is not null) i(mid)
          cross join lateral (
            select t2.ctid as tid, t2.run_id, t2.step_slug, t2.task_index from pgflow.step_tasks t2
            where t2.queue_name = q and t2.message_id = i.mid
            limit 1
          ) k
          cross join lateral (
            select 1 from pgflow.runs r where r.run_id = k.run_id and r.status = 'started' limit 1
          ) r
          cross join lateral (
            select 1 from pgflow.step_states ss
            where ss.run_id = k.run_id and ss.step_slug = k.step_slug and ss.status = 'started'
            limit 1
          ) ss) i
    where t.ctid = i.tid
      and t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and t.status = 'queued'
      and sup_keys ? (t.flow_slug || chr(31) || t.step_slug)
    returning t.message_id, t.run_id, t.flow_slug, t.step_slug, t.task_index, t.attempts_count
  ),
  -- Each step's effective timeout + 2 s, once per step of the batch.
  timeouts as (
    select p.flow_slug, p.step_slug, o.off
    from (select distinct c.flow_slug, c.step_slug from claimed c) p
    cross join lateral (
      select coalesce(s.opt_timeout, f.opt_timeout) + 2 as off
      from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug
      where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug
      limit 1
    ) o
  )
  select array_agg(c.message_id), array_agg(c.flow_slug), array_agg(c.run_id), array_agg(c.step_slug),
         array_agg(c.task_index), array_agg(c.attempts_count),
         array_agg(c.message_id) filter (where o.off is distinct from p_read_visibility),
         array_agg(o.off) filter (where o.off is distinct from p_read_visibility),
         (select count(distinct m)::integer from unnest(msg_ids) m where m is not null)
  into c_msg, c_flow, c_run, c_step, c_idx, c_att, v_msg, v_off, n_ids
  from claimed c
  join timeouts o on o.flow_slug = c.flow_slug and o.step_slug = c.step_slug;

  -- Hide each claimed message for the effective timeout + 2 s, and make sure it happened: a claim
  -- whose message is gone would otherwise run with nothing guarding it. A message the read in
  -- this transaction already hid for exactly that long (read_and_claim reads with the worker's
  -- claim_visibility) is left as it is: PGMQ builds and plans every set_vt again.
  if v_msg is not null then
    select count(*), array_agg(r.msg_id), array_agg(r.vt) into changed, s_ids, s_vts
    from pgflow.set_vt_batch(q, v_msg, v_off) r;
    if changed <> cardinality(v_msg) then
      raise exception 'start_tasks: queue % holds only % of the % claimed messages %', q, changed,
        cardinality(v_msg), v_msg using errcode = '55000';
    end if;
  end if;
  -- A read with the claim's visibility hid the messages not claimed for as long too: they get the
  -- visibility the worker asked for, as if read with it.
  if p_unclaimed_visibility is not null and coalesce(cardinality(c_msg), 0) < n_ids then
    select array_agg(i.m) into u_msg
    from (select distinct m from unnest(msg_ids) m where m is not null) i(m)
    where not (i.m = any (coalesce(c_msg, '{}')));
    select s_ids || array_agg(r.msg_id), s_vts || array_agg(r.vt) into s_ids, s_vts
    from pgflow.set_vt_batch(q, u_msg, array_fill(p_unclaimed_visibility, array[cardinality(u_msg)])) r;
  end if;

  return query
  with ids as (select distinct m as mid from unnest(msg_ids) m where m is not null),
  claimed as (
    select * from unnest(c_msg, c_flow, c_run, c_step, c_idx, c_att)
      as c(mid, flow_slug, run_id, step_slug, task_index, attempt)
  )
  select i.mid,
         case
           when c.mid is not null then 'claimed'
           when t.run_id is null then 'unknown'
           when not (sup_keys ? (t.flow_slug || chr(31) || t.step_slug)) then 'unsupported'
           when t.status = 'started' then 'started'
           else 'ineligible'
         end,
         -- The task's identity whenever one owns the message (claimed or not), so the worker can
         -- say which flow and step an unclaimed message needs; input and attempt only if claimed.
         coalesce(c.flow_slug, t.flow_slug),
         coalesce(c.run_id, t.run_id),
         coalesce(c.step_slug, t.step_slug),
         coalesce(c.task_index, t.task_index),
         -- The handler input, built here rather than in a helper function: a SQL function with
         -- its own search_path is planned again on every call, and this runs once per claimed task.
         case when c.mid is not null then
           case
             when s.step_type = 'map' and s.deps_count = 0 then r.input -> c.task_index
             when s.step_type = 'map' then
               (select ss.output -> c.task_index
                from pgflow.deps d
                join pgflow.step_states ss on ss.run_id = c.run_id and ss.step_slug = d.dep_slug
                where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug)
             when s.deps_count = 0 then r.input
             else (select coalesce(jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
                   from pgflow.deps d
                   join pgflow.step_states ss on ss.run_id = c.run_id and ss.step_slug = d.dep_slug
                   where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug
                     and ss.status = 'completed')
           end
         end,
         c.attempt,
         nv.vt
  from ids i
  left join claimed c on c.mid = i.mid
  left join unnest(s_ids, s_vts) as nv(mid, vt) on nv.mid = i.mid
  -- A message not claimed: the task that owns it, if any, looked up per id (LIMIT 1: the pair is
  -- unique), as in the claim above: a join let stale statistics scan every task of the queue.
  left join lateral (
    select t.flow_slug, t.run_id, t.step_slug, t.task_index, t.status from pgflow.step_tasks t
    where c.mid is null and t.queue_name = q and t.message_id = i.mid
    limit 1
  ) t on true
  left join lateral (
    select s.step_type, s.deps_count from pgflow.steps s
    where c.mid is not null and s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
    limit 1
  ) s on true
  left join lateral (
    select r.input from pgflow.runs r where c.mid is not null and r.run_id = c.run_id limit 1
  ) r on true
  order by i.mid;
end;
$$;

-- ---- schemas/0410_read_and_claim.sql: pgflow.read_and_claim(queue_name text, worker_id uuid, visibility_timeout integer, qty integer, max_poll_seconds integer, poll_interval_ms integer, supported jsonb)
-- Read and claim in one round trip. A worker's poll is pgmq.read_with_poll followed by start_tasks
-- on exactly the ids it returned; run as two calls, every batch waits for two round trips in series
-- before a task starts. This does both in one call and one transaction, against the support set
-- the worker registered (start_tasks(..., supported => NULL)) or, when given, the explicit pairs.
--
-- Every message read is returned once with its id, read count, times and disposition, and the
-- identity of the task that owns it (flow, run, step, index; NULL for a message no task owns), so
-- a worker can say which flow and step an unclaimed message needs. Only claimed rows carry input,
-- attempt, and the message's body and headers (the handler context's rawMessage; a claimed
-- message is the one pgflow sent for the task, so it is small). A message that is not claimed
-- comes back without body or headers (NULL): it may be anything another sender put on the queue,
-- of any size, and every worker on the queue would receive it again at every visibility timeout.
-- It ends as PGMQ's own read leaves it (read_ct and a visibility of visibility_timeout), exactly
-- as with the two calls. Should the claim fail, the read is rolled back with it and the messages
-- stay visible.
--
-- A worker claiming against its registered set reads with its claim_visibility (the timeout + 2 s
-- all its steps shared at registration), when it has one: the messages it claims are then hidden
-- as long as the claim needs and get no set_vt (each PGMQ call builds and plans its statement
-- again), and only the messages it does not claim are set back to visibility_timeout.
--
-- Seq scans are priced out here and in everything it calls (enable_seqscan = off): every row it
-- touches is found by a key, and a worker's session keeps plans made on the statistics of the
-- moment. A plan made while the tables were small (a young database, or one autovacuum has just
-- vacuumed) would scan runs or step states in full for every batch after a burst, until the next
-- ANALYZE (tests/sql/claim_plan_test.ts). Where no index fits, a scan still runs.
create or replace function pgflow.read_and_claim(
  queue_name text,
  worker_id uuid,
  visibility_timeout integer,
  qty integer,
  max_poll_seconds integer default 2,
  poll_interval_ms integer default 50,
  supported jsonb default null
)
returns table (
  msg_id bigint,
  read_ct integer,
  enqueued_at timestamptz,
  vt timestamptz,
  message jsonb,
  headers jsonb,
  disposition text,
  flow_slug text,
  run_id uuid,
  step_slug text,
  task_index integer,
  input jsonb,
  attempt integer
)
language plpgsql
volatile
set search_path = ''
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
  q text := read_and_claim.queue_name;
  msgs pgmq.message_record[];
  ids bigint[];
  -- How long the read hides what it reads.
  read_vt integer := read_and_claim.visibility_timeout;
  hint integer;
  -- The registered support set, looked up once here for the claim.
  keys jsonb;
begin
  if q is null then
    raise exception 'read_and_claim: queue_name must not be NULL' using errcode = '22004';
  end if;
  if read_and_claim.supported is null then
    -- Before the read: an unregistered worker (PFW01) reads nothing.
    select r.claim_visibility, r.support_keys into hint, keys
    from pgflow._registered_claim(read_and_claim.worker_id, q) r;
    read_vt := coalesce(hint, read_vt);
  end if;
  if read_and_claim.max_poll_seconds = 0 then
    -- A worker woken by notifications reads once without waiting: it waits for the next
    -- notification itself (read_with_poll with no time left returns before reading at all).
    select array_agg(m order by m.msg_id), array_agg(m.msg_id order by m.msg_id)
    into msgs, ids
    from pgmq.read(q, read_vt, read_and_claim.qty) m;
  else
    select array_agg(m order by m.msg_id), array_agg(m.msg_id order by m.msg_id)
    into msgs, ids
    from pgmq.read_with_poll(q, read_vt, read_and_claim.qty,
                             read_and_claim.max_poll_seconds, read_and_claim.poll_interval_ms) m;
  end if;
  if ids is null then
    return;
  end if;

  return query
  -- The visibility the message ends with: set by the claim (claimed, or set back) or by the read.
  select m.msg_id, m.read_ct, m.enqueued_at, coalesce(c.vt, m.vt),
         case when c.disposition = 'claimed' then m.message end,
         -- to_jsonb: PGMQ before 1.5 has no headers column; a claimed row only, never a foreign body.
         case when c.disposition = 'claimed' then to_jsonb(m) -> 'headers' end,
         c.disposition, c.flow_slug, c.run_id, c.step_slug, c.task_index, c.input, c.attempt
  from unnest(msgs) m
  join pgflow._start_tasks(q, ids, read_and_claim.worker_id, read_and_claim.supported, read_vt,
                           case when read_vt <> read_and_claim.visibility_timeout
                                then read_and_claim.visibility_timeout end, keys) c
    on c.message_id = m.msg_id
  order by m.msg_id;

  -- start_tasks stamps started_at with now(), the start of this transaction, which is when the
  -- read began waiting. When the read waited long enough to matter, stamp the tasks claimed here
  -- (started_at = now() singles them out; last_worker_id is NULL for a worker with no row, see
  -- start_tasks) with the time they really started, so stalled recovery measures from there.
  if clock_timestamp() - now() > interval '500 milliseconds' then
    -- Each id looked up on its own and the task updated by the row version found, as in
    -- start_tasks: a join could scan the queue's every task.
    update pgflow.step_tasks t
    set started_at = clock_timestamp()
    -- The status is checked on the row found, not in the update's conditions: there it would let
    -- the planner walk every started task through step_tasks_started_idx.
    from (select k.tid, k.run_id, k.step_slug, k.task_index
          from unnest(ids) i(mid)
          cross join lateral (
            select t2.ctid as tid, t2.run_id, t2.step_slug, t2.task_index, t2.status
            from pgflow.step_tasks t2
            where t2.queue_name = q and t2.message_id = i.mid
            limit 1
          ) k
          where k.status = 'started') i
    where t.ctid = i.tid
      and t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and (t.last_worker_id = read_and_claim.worker_id or t.last_worker_id is null)
      and t.started_at = now();
  end if;
end;
$$;

-- ---- schemas/0420_complete_and_claim.sql: pgflow.complete_and_claim(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[], queue_name text, worker_id uuid, visibility_timeout integer, qty integer, supported jsonb)
-- Report a batch and take the next in one round trip. A busy worker finishes a batch and has as
-- many free slots as it had tasks: it would send complete_tasks on one connection and
-- read_and_claim on another, two transactions and two durable commits per batch, each call paying
-- the fixed cost of a round trip. This does both in one transaction, in that order: exactly
-- pgflow.complete_tasks (same checks, same idempotence; a late or duplicate completion changes
-- nothing), then exactly pgflow.read_and_claim without waiting (max_poll_seconds 0; the worker
-- waits for a notification or polls again itself when the read comes back short). It returns the
-- read's rows.
--
-- Completions first: a step completed here that makes a dependent ready sends its message before
-- the read, so a worker serving the next step on the same queue claims it in this same call.
-- Should any part fail, nothing of it happens: the worker reports and reads again separately.
create or replace function pgflow.complete_and_claim(
  run_ids uuid[],
  step_slugs text[],
  task_indexes integer[],
  outputs jsonb[],
  attempts integer[],
  queue_name text,
  worker_id uuid,
  visibility_timeout integer,
  qty integer,
  supported jsonb default null
)
returns table (
  msg_id bigint,
  read_ct integer,
  enqueued_at timestamptz,
  vt timestamptz,
  message jsonb,
  headers jsonb,
  disposition text,
  flow_slug text,
  run_id uuid,
  step_slug text,
  task_index integer,
  input jsonb,
  attempt integer
)
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform count(*) from pgflow.complete_tasks(complete_and_claim.run_ids, complete_and_claim.step_slugs,
    complete_and_claim.task_indexes, complete_and_claim.outputs, complete_and_claim.attempts);
  return query select * from pgflow.read_and_claim(complete_and_claim.queue_name, complete_and_claim.worker_id,
    complete_and_claim.visibility_timeout, complete_and_claim.qty, 0, 50, complete_and_claim.supported);
end;
$$;

-- ---- schemas/0500_complete_task.sql: pgflow.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer)
-- Completing tasks. Late or duplicate completions (the task is no longer started, or its run has
-- moved on) change nothing and raise nothing. The caller passes the attempt it ran (start_tasks and
-- read_and_claim return it with the task): a report for an older attempt (its reply was lost, and
-- the task has since been claimed again) is late too, so it can never complete or fail the attempt
-- that is running now. The attempt is required: a report without one cannot be told from a late
-- one, so it would complete whichever attempt happens to be running. The parameter keeps its NULL
-- default only so that a call without it gets this explanation instead of "function does not
-- exist"; an operator completing a task by hand passes step_tasks.attempts_count.
--
-- One code path for one task and for a worker's batch: pgflow._complete_tasks does the work as a
-- handful of set-based statements whatever the batch's size (lock the runs, complete the tasks,
-- count them off their steps, release the dependents of the steps that completed, count those
-- off their runs, archive the messages once per queue). A task at a time, as before, each
-- completion was five statements and a nested plpgsql call, and a batch of ten cost the database
-- about three times what the statements below do (bench/results.md, round 10).
create or replace function pgflow.complete_task(
  run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
begin
  if complete_task.attempt is null then
    raise exception 'complete_task: attempt is required (task % [%] of run %)', complete_task.step_slug,
      complete_task.task_index, complete_task.run_id
      using errcode = '22004',
        hint = 'pass the attempt start_tasks or read_and_claim returned with the task; without it a late report could complete a newer attempt';
  end if;
  return query select * from unnest(pgflow._complete_tasks(array[complete_task.run_id],
    array[complete_task.step_slug], array[complete_task.task_index], array[complete_task.output],
    array[complete_task.attempt]));
end;
$$;

-- ---- schemas/0500_complete_task.sql: pgflow.complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[])
-- Several completions in one round trip and one transaction: each is exactly complete_task (same
-- checks, same idempotence, the attempt required; a late or duplicate one changes nothing).
create or replace function pgflow.complete_tasks(
  run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[] default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  missing integer;
begin
  if cardinality(run_ids) is distinct from cardinality(step_slugs)
     or cardinality(run_ids) is distinct from cardinality(task_indexes)
     or cardinality(run_ids) is distinct from cardinality(outputs)
     or cardinality(run_ids) is distinct from cardinality(attempts) then
    raise exception 'complete_tasks: % run ids, % step slugs, % task indexes, % outputs and % attempts',
      cardinality(run_ids), cardinality(step_slugs), cardinality(task_indexes), cardinality(outputs),
      coalesce(cardinality(attempts)::text, 'no')
      using errcode = '22023', hint = 'pass one run id, step slug, task index, output and attempt per task (the attempt is required, as in complete_task)';
  end if;
  missing := array_position(attempts, null);
  if missing is not null then
    raise exception 'complete_task: attempt is required (task % [%] of run %)', step_slugs[missing],
      task_indexes[missing], run_ids[missing]
      using errcode = '22004',
        hint = 'pass the attempt start_tasks or read_and_claim returned with the task; without it a late report could complete a newer attempt';
  end if;
  return query select * from unnest(pgflow._complete_tasks(run_ids, step_slugs, task_indexes, outputs, attempts));
end;
$$;

-- ---- schemas/0500_complete_task.sql: pgflow._complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[])
-- The work of complete_task and complete_tasks, for any number of tasks (attempts checked by the
-- callers); returns the tasks it completed (NULL for none). Runs are locked in run_id order, so two
-- batches that share runs wait for each other instead of deadlocking; the run lock orders every
-- state change of one run (completions, failures, stalled recovery).
--
-- The tasks of a batch complete together, then their steps, then the runs; a run that has a step
-- ready after that gets one ready-step pass (a pass leaves no ready step behind, so no other run
-- can be waiting for one). Completions of one run in one batch are therefore applied as one: were
-- that pass to fail the run (a condition with whenUnmet 'fail', a map over a non-array), the
-- batch's other tasks of the run stay completed rather than cancelled, as if they had reported
-- first.
--
-- Cost. Each statement a call runs costs a plan lookup and an executor start whatever the batch's
-- size, and under load that fixed cost is most of a batch's; so a batch runs as few as it can: the
-- dependents' release only when a finished step has dependents, the archive in one call when the
-- batch has one queue, and the result as an array rather than a set.
--
-- Plans. A worker's session keeps plpgsql's generic plans, made on the statistics of the moment:
-- on a young database (tables never analysed count as ten pages) or one just vacuumed, a plan
-- that scans runs or step states in full, or hashes them, is the cheapest, and stays in use after
-- a burst has made them large, until autovacuum analyses them. So every row here is found by its
-- key, in a nested loop driven by the batch: seq scans are priced out for this function (it only
-- ever needs keyed rows; where no index fits, a scan still runs), generic plans are used from the
-- first call (a custom plan per call costs more than the statement), and no statement that looks a
-- task up by its key also names its status: the planner could then walk every started task
-- through the partial index step_tasks_started_idx (its statistics say few tasks are started; a
-- busy queue has thousands) instead of the primary key. The status is checked on the row found.
create or replace function pgflow._complete_tasks(
  run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[]
)
returns pgflow.step_tasks[]
language plpgsql
volatile
set search_path = ''
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
declare
  locked uuid[];
  done pgflow.step_tasks[];
  queues text[];
  f_runs uuid[];
  f_flows text[];
  f_steps text[];
  releases boolean;
  ready_runs uuid[];
  ready_run uuid;
  grp record;
begin
  select array_agg(l.run_id order by l.run_id) into locked
  from (select distinct u.id from unnest(run_ids) u(id) where u.id is not null order by u.id) i
  cross join lateral (
    select r.run_id from pgflow.runs r where r.run_id = i.id and r.status = 'started' limit 1 for update
  ) l;
  if locked is null then
    return null;
  end if;

  -- Under the run locks, a started task of the attempt reported is completed; a task named twice
  -- completes once, with the first report of the attempt that is running. The task is updated by
  -- the row version found, so a change since (none can come without the run lock) leaves it alone.
  with completed as (
    update pgflow.step_tasks t
    set status = 'completed', completed_at = now(), output = i.output
    from (select distinct on (u.run_id, u.step_slug, u.task_index)
                 k.tid, u.run_id, u.step_slug, u.task_index, u.output
          from unnest(run_ids, step_slugs, task_indexes, outputs, attempts)
               with ordinality as u(run_id, step_slug, task_index, output, attempt, ord)
          cross join lateral (
            select t2.ctid as tid, t2.status, t2.attempts_count from pgflow.step_tasks t2
            where t2.run_id = u.run_id and t2.step_slug = u.step_slug and t2.task_index = u.task_index
            limit 1
          ) k
          where u.run_id = any (locked) and k.status = 'started' and k.attempts_count = u.attempt
          order by u.run_id, u.step_slug, u.task_index, u.ord) i
    where t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and t.ctid = i.tid
    returning t.*
  )
  select array_agg(c::pgflow.step_tasks), array_agg(distinct c.queue_name) into done, queues
  from completed c;
  if done is null then
    return null;
  end if;

  -- Count the tasks off their steps; a step whose last task this was completes in the same
  -- statement. A map step's output is its tasks' outputs in index order (this batch's outputs are
  -- stored already); CASE evaluates the aggregate only for a map's last task.
  with finished as (
    update pgflow.step_states ss
    set remaining_tasks = ss.remaining_tasks - p.n,
        status = case when ss.remaining_tasks = p.n then 'completed' else ss.status end,
        completed_at = case when ss.remaining_tasks = p.n then now() else ss.completed_at end,
        output = case
          when ss.remaining_tasks <> p.n then ss.output
          when p.step_type = 'map' then
            (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
             where t.run_id = p.run_id and t.step_slug = p.step_slug)
          else p.output
        end
    from (select d.run_id, d.step_slug, d.n, d.output, s.step_type, s.releases
          from (select d.run_id, d.flow_slug, d.step_slug, count(*) as n, (array_agg(d.output))[1] as output
                from unnest(done) d group by d.run_id, d.flow_slug, d.step_slug) d
          cross join lateral (
            select s2.step_type,
                   exists (select 1 from pgflow.deps dd
                           where dd.flow_slug = s2.flow_slug and dd.dep_slug = s2.step_slug) as releases
            from pgflow.steps s2
            where s2.flow_slug = d.flow_slug and s2.step_slug = d.step_slug limit 1
          ) s) p
    where ss.run_id = p.run_id and ss.step_slug = p.step_slug
    returning ss.run_id, ss.flow_slug, ss.step_slug, ss.remaining_tasks, p.releases
  )
  select array_agg(f.run_id), array_agg(f.flow_slug), array_agg(f.step_slug), bool_or(f.releases)
  into f_runs, f_flows, f_steps, releases
  from finished f where f.remaining_tasks = 0;

  if f_runs is not null then
    if releases then
      -- Release the dependents of the steps that completed, and note the runs where one became
      -- ready.
      with released as (
        update pgflow.step_states ss
        set remaining_deps = ss.remaining_deps - r.n
        from (select f.run_id, d.step_slug, count(*) as n
              from unnest(f_runs, f_flows, f_steps) as f(run_id, flow_slug, step_slug)
              join pgflow.deps d on d.flow_slug = f.flow_slug and d.dep_slug = f.step_slug
              group by f.run_id, d.step_slug) r
        where ss.run_id = r.run_id and ss.step_slug = r.step_slug
        returning ss.run_id, ss.remaining_deps, ss.status
      )
      select array_agg(distinct r.run_id order by r.run_id) into ready_runs
      from released r where r.remaining_deps = 0 and r.status = 'created';
    end if;

    -- Count the steps off their runs; a run's last step completes it with the outputs of its
    -- completed leaf steps. Every run here is started: its lock is held and it was checked.
    update pgflow.runs r
    set remaining_steps = r.remaining_steps - c.n,
        status = case when r.remaining_steps = c.n then 'completed' else r.status end,
        completed_at = case when r.remaining_steps = c.n then now() else r.completed_at end,
        output = case when r.remaining_steps = c.n then coalesce((
          select jsonb_object_agg(ss.step_slug, ss.output)
          from pgflow.step_states ss
          where ss.run_id = c.run_id and ss.status = 'completed'
            and not exists (select 1 from pgflow.deps d
                            where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
        ), '{}'::jsonb) else r.output end
    from (select f.run_id, count(*) as n from unnest(f_runs) as f(run_id) group by f.run_id) c
    where r.run_id = c.run_id;

    if ready_runs is not null then
      foreach ready_run in array ready_runs loop
        perform pgflow._start_ready_steps(ready_run);
      end loop;
    end if;
  end if;

  -- The messages of the completed tasks, one pgmq.archive call per queue (each PGMQ call builds
  -- and plans its statement again).
  if cardinality(queues) = 1 then
    perform pgmq.archive(queues[1], (select array_agg(d.message_id order by d.message_id)
                                     from unnest(done) d where d.message_id is not null));
  else
    for grp in
      select d.queue_name as q, array_agg(d.message_id order by d.message_id) as ids
      from unnest(done) d where d.message_id is not null group by d.queue_name
    loop
      perform pgmq.archive(grp.q, grp.ids);
    end loop;
  end if;
  return done;
end;
$$;

-- ---- privileges on function pgflow._complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[])
revoke all on function pgflow._complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[]) from public;

-- ---- privileges on function pgflow._registered_claim(p_worker_id uuid, p_queue_name text)
revoke all on function pgflow._registered_claim(p_worker_id uuid, p_queue_name text) from public;

-- ---- privileges on function pgflow._start_tasks(queue_name text, msg_ids bigint[], worker_id uuid, supported jsonb, p_read_visibility integer, p_unclaimed_visibility integer, p_support_keys jsonb)
revoke all on function pgflow._start_tasks(queue_name text, msg_ids bigint[], worker_id uuid, supported jsonb, p_read_visibility integer, p_unclaimed_visibility integer, p_support_keys jsonb) from public;

-- ---- privileges on function pgflow.complete_and_claim(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[], queue_name text, worker_id uuid, visibility_timeout integer, qty integer, supported jsonb)
revoke all on function pgflow.complete_and_claim(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[], queue_name text, worker_id uuid, visibility_timeout integer, qty integer, supported jsonb) from public;

insert into pgflow.migrations (name) values ('20261204180000_pgflow_set_completions') on conflict (name) do nothing;

commit;
