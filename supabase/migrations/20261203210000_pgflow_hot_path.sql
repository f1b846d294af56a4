-- pgflow_hot_path: a cheaper hot path per task (issue 19 part 4; bench/results.md, round 7).
-- - start_tasks (its claim and its result) and read_and_claim's re-stamp of started_at look each
--   message id up on its own (a lateral lookup with LIMIT 1 on the unique (queue, message id)
--   index): with statistics older than the queue's backlog, the cached plan scanned every task of
--   the queue (and every run) per batch.
-- - Tasks are inserted with their message ids (_send_task_messages now creates them, after the
--   send): no second, non-HOT update per task, which also re-checked every foreign key.
-- - complete_tasks archives its batch with one pgmq.archive call per queue instead of one per
--   task (complete_task's work moves to _complete_task; complete_task itself is unchanged).
-- - The index step_tasks_run_status_idx is dropped: every lookup by run and status names the run,
--   which the primary key finds; one index entry fewer for each task insert and update.
-- Existing data is not touched. Dropping the index takes a brief exclusive lock on step_tasks;
-- the rest replaces functions (brief catalog locks only).
--
-- Changes:
-- - drop function pgflow._send_task_messages(p_run_id uuid)
-- - drop index pgflow.step_tasks_run_status_idx
-- - create function pgflow._send_task_messages(p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[])
-- - replace function pgflow._start_ready_steps(p_run_id uuid)
-- - replace function pgflow.start_tasks(queue_name text, msg_ids bigint[], worker_id uuid, supported jsonb)
-- - replace function pgflow.read_and_claim(queue_name text, worker_id uuid, visibility_timeout integer, qty integer, max_poll_seconds integer, poll_interval_ms integer, supported jsonb)
-- - replace function pgflow.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer)
-- - create function pgflow._complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer, p_archive boolean)
-- - replace function pgflow.complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[])
-- - privileges on function pgflow._complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer, p_archive boolean)
-- - privileges on function pgflow._send_task_messages(p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[])
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if exists (select 1 from pgflow.migrations m where m.name = '20261203210000_pgflow_hot_path') then
    raise exception 'pgflow migration 20261203210000_pgflow_hot_path is already applied to this database; nothing was changed'
      using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
  end if;
end
$$;

set local lock_timeout = '5s';

-- ---- function pgflow._send_task_messages(p_run_id uuid): no longer in the schema files
drop function pgflow._send_task_messages(p_run_id uuid);

-- ---- index pgflow.step_tasks_run_status_idx: no longer in the schema files
drop index pgflow.step_tasks_run_status_idx;

-- ---- schemas/0200_messages.sql: pgflow._send_task_messages(p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[])
-- Sending and archiving task messages. Only PGMQ's public functions are used, and every call names
-- the queue from the task's snapshot: a flow slug never stands in for a queue.

-- Creates the tasks of steps just started (p_steps, with p_counts tasks each) and sends one message
-- per task, batched per (queue, delay) in send_batch calls of at most 1,000; each task is inserted
-- with its queue snapshot and message id in the same transaction.
create or replace function pgflow._send_task_messages(p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
  ids bigint[];
  batch_size constant integer := 1000;
begin
  for grp in
    select s.queue_name, s.opt_start_delay as delay,
           array_agg(s.step_slug order by s.step_slug, i) as steps,
           array_agg(i order by s.step_slug, i) as idxs,
           -- The body is informational only: the claim reads ids, never bodies.
           array_agg(jsonb_build_object('flow_slug', p_flow_slug, 'run_id', p_run_id,
                                        'step_slug', s.step_slug, 'task_index', i)
                     order by s.step_slug, i) as msgs
    from unnest(p_steps, p_counts) as n(step_slug, task_count)
    join pgflow.steps s on s.flow_slug = p_flow_slug and s.step_slug = n.step_slug
    cross join generate_series(0, n.task_count - 1) as i
    group by s.queue_name, s.opt_start_delay
  loop
    -- Large maps go out in slices so one statement never carries an unbounded array.
    for slice_start in 1 .. cardinality(grp.msgs) by batch_size loop
      -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
      select array_agg(id order by id) into ids
      from pgmq.send_batch(grp.queue_name, grp.msgs[slice_start:slice_start + batch_size - 1], grp.delay) as id;
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, message_id)
      select p_run_id, p_flow_slug, u.step_slug, u.task_index, grp.queue_name, u.id
      from unnest(grp.steps[slice_start:slice_start + batch_size - 1], grp.idxs[slice_start:slice_start + batch_size - 1], ids)
        as u(step_slug, task_index, id);
    end loop;
  end loop;
end;
$$;

-- ---- schemas/0300_start_flow.sql: pgflow._start_ready_steps(p_run_id uuid)
-- Starts every step whose dependencies are done: evaluates its condition, creates its tasks and
-- sends their messages. Steps that finish at once (an empty map, a skip) can make further steps
-- ready, so this repeats until nothing changes. The caller holds the run's lock.
--
-- The tasks of the started steps are created at the end, by _send_task_messages, with their
-- message ids: inserted once rather than inserted and then updated (an update in the creating
-- transaction also checks every foreign key again, and touches every index). A pass that fails
-- the run creates them without messages first, so _fail_run cancels them as it always did.
create or replace function pgflow._start_ready_steps(p_run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  run pgflow.runs;
  ready record;
  source jsonb;
  cond_input jsonb;
  task_count integer;
  progressed boolean := true;
  -- The steps started by this call and their task counts, in start order.
  new_steps text[] := '{}';
  new_counts integer[] := '{}';
  fail_step text;
  fail_error text;
begin
  <<pass>>
  while progressed loop
    progressed := false;
    select * into run from pgflow.runs r where r.run_id = p_run_id;
    exit when run.status <> 'started';
    for ready in
      select ss.step_slug, s.step_type, s.deps_count, s.required_input_pattern, s.forbidden_input_pattern,
             s.when_unmet,
             -- A map step has at most one dependency: the one it maps over.
             (select min(d.dep_slug) from pgflow.deps d
              where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug) as map_dep
      from pgflow.step_states ss
      join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
      where ss.run_id = p_run_id and ss.status = 'created' and ss.remaining_deps = 0
      order by s.step_index
    loop
      -- An earlier step of this pass may have failed the run or cascaded a skip onto this one.
      exit when (select r.status from pgflow.runs r where r.run_id = p_run_id) <> 'started';
      continue when (select ss.status from pgflow.step_states ss
                     where ss.run_id = p_run_id and ss.step_slug = ready.step_slug) <> 'created';

      -- Conditions: if / ifNot are containment patterns on the run input (root steps) or on the
      -- object of completed dependency outputs (dependent steps).
      if ready.required_input_pattern is not null or ready.forbidden_input_pattern is not null then
        cond_input := case when ready.deps_count = 0 then run.input
                           else pgflow._dependency_outputs(p_run_id, run.flow_slug, ready.step_slug) end;
        if not ((ready.required_input_pattern is null or cond_input @> ready.required_input_pattern)
                and (ready.forbidden_input_pattern is null or not cond_input @> ready.forbidden_input_pattern)) then
          if ready.when_unmet = 'fail' then
            fail_step := ready.step_slug;
            fail_error := format('[CONDITION_UNMET] step %s: its if/ifNot condition does not hold', ready.step_slug);
            exit pass;
          end if;
          perform pgflow._skip_step(p_run_id, ready.step_slug, 'condition_unmet', ready.when_unmet = 'skip-cascade');
          progressed := true;
          continue;
        end if;
      end if;

      if ready.step_type = 'single' then
        task_count := 1;
      else
        -- A map step fans out over the run input (root map) or its one dependency's output.
        if ready.deps_count = 0 then
          source := run.input;
        else
          if (select ss.status from pgflow.step_states ss
              where ss.run_id = p_run_id and ss.step_slug = ready.map_dep) = 'skipped' then
            -- Nothing to map over: the map is skipped like its source, and releases its dependents.
            perform pgflow._skip_step(p_run_id, ready.step_slug, 'dependency_skipped', false);
            progressed := true;
            continue;
          end if;
          select ss.output into source from pgflow.step_states ss
          where ss.run_id = p_run_id and ss.step_slug = ready.map_dep;
        end if;
        if jsonb_typeof(source) is distinct from 'array' then
          fail_step := ready.step_slug;
          fail_error := format('[TYPE_VIOLATION] map step %s needs an array to map over, got %s',
            ready.step_slug, coalesce(jsonb_typeof(source), 'nothing'));
          exit pass;
        end if;
        task_count := jsonb_array_length(source);
      end if;

      update pgflow.step_states ss
      set status = 'started', started_at = now(), initial_tasks = task_count, remaining_tasks = task_count
      where ss.run_id = p_run_id and ss.step_slug = ready.step_slug;

      if task_count = 0 then
        perform pgflow._complete_step(p_run_id, ready.step_slug, '[]'::jsonb);
        progressed := true;
      else
        new_steps := new_steps || ready.step_slug;
        new_counts := new_counts || task_count;
      end if;
    end loop;
  end loop;
  if fail_step is not null then
    insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name)
    select p_run_id, run.flow_slug, n.step_slug, i, s.queue_name
    from unnest(new_steps, new_counts) as n(step_slug, task_count)
    join pgflow.steps s on s.flow_slug = run.flow_slug and s.step_slug = n.step_slug
    cross join generate_series(0, n.task_count - 1) as i;
    perform pgflow._fail_run(p_run_id, fail_step, fail_error);
    return;
  end if;
  if cardinality(new_steps) > 0 then
    perform pgflow._send_task_messages(p_run_id, run.flow_slug, new_steps, new_counts);
  end if;
end;
$$;

-- ---- schemas/0400_start_tasks.sql: pgflow.start_tasks(queue_name text, msg_ids bigint[], worker_id uuid, supported jsonb)
-- supported => NULL claims against the set the worker registered (pgflow.workers.supported, keyed
-- once by register_worker): a worker with 1,000 pairs then sends none of them with each batch.
-- A worker id with no row (never registered, or its row deleted since) fails with SQLSTATE PFW01,
-- pgflow's own code for an unregistered worker (class PF is used by neither Postgres nor the SQL
-- standard), so a caller tells it from every other error by its code alone. With explicit pairs
-- such a worker still claims (its poll falls back to them): the tasks it claims then record no
-- last_worker_id, which can only name a registered worker.
create or replace function pgflow.start_tasks(
  queue_name text,
  msg_ids bigint[],
  worker_id uuid,
  supported jsonb
)
returns table (
  message_id bigint,
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
#variable_conflict use_column
declare
  q text := start_tasks.queue_name;
  -- The support set keyed as pgflow._support_keys builds it.
  sup_keys jsonb;
  c_msg bigint[];
  c_run uuid[];
  c_step text[];
  c_idx integer[];
  c_att integer[];
  c_off integer[];
  changed integer;
  malformed boolean;
  reg_queue text;
  -- The worker id stamped on claimed tasks: NULL for a worker with no row (see above).
  stamp uuid := start_tasks.worker_id;
begin
  if q is null then
    raise exception 'start_tasks: queue_name must not be NULL' using errcode = '22004';
  end if;
  if supported is null then
    -- The registered set, already keyed: one primary-key lookup whatever the set's size.
    select w.queue_name, coalesce(w.supported_keys, pgflow._support_keys(w.supported))
    into reg_queue, sup_keys
    from pgflow.workers w where w.worker_id = start_tasks.worker_id;
    if not found then
      raise exception 'start_tasks: worker % is not registered, so it has no recorded support set', start_tasks.worker_id
        using errcode = 'PFW01', hint = 'register it with pgflow.register_worker, or pass the supported pairs';
    end if;
    -- A set registered for another queue says nothing about this one.
    if reg_queue is distinct from q then
      raise exception 'start_tasks: worker % is registered for queue %, not %', start_tasks.worker_id,
        quote_literal(reg_queue), quote_literal(q)
        using errcode = '22023', hint = 'claim on the queue the worker registered, or pass the supported pairs';
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
    -- Key-share locked, as the foreign key would: the row cannot vanish before the claim.
    perform 1 from pgflow.workers w where w.worker_id = start_tasks.worker_id for key share;
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
    -- One index lookup per id: `message_id = any (msg_ids)` let the planner scan every task the
    -- queue ever had. A join on (queue, message id) did too, whenever the statistics were older
    -- than the queue's backlog (a new queue, a fresh database, a burst: the cached plan expected
    -- a few tasks per queue and scanned all of them for every batch), so each id is looked up on
    -- its own (LIMIT 1 keeps the lookup a parameterised index scan; the pair is unique) and the
    -- task updated by its primary key.
    from (select k.run_id, k.step_slug, k.task_index
          from (select distinct m from unnest(msg_ids) m where m is not null) i(mid)
          cross join lateral (
            select t2.run_id, t2.step_slug, t2.task_index from pgflow.step_tasks t2
            where t2.queue_name = q and t2.message_id = i.mid
            limit 1
          ) k) i,
         pgflow.runs r, pgflow.step_states ss
    where t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and t.status = 'queued'
      and sup_keys ? (t.flow_slug || chr(31) || t.step_slug)
      and r.run_id = t.run_id and r.status = 'started'
      and ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
    returning t.message_id, t.run_id, t.flow_slug, t.step_slug, t.task_index, t.attempts_count
  )
  select array_agg(c.message_id), array_agg(c.run_id), array_agg(c.step_slug),
         array_agg(c.task_index), array_agg(c.attempts_count),
         array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2)
  into c_msg, c_run, c_step, c_idx, c_att, c_off
  from claimed c
  join pgflow.steps s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
  join pgflow.flows f on f.flow_slug = c.flow_slug;

  if c_msg is not null then
    -- Hide each claimed message for the effective timeout + 2 s, and make sure it happened: a claim
    -- whose message is gone would otherwise run with nothing guarding it.
    select count(*) into changed from pgflow.set_vt_batch(q, c_msg, c_off);
    if changed <> cardinality(c_msg) then
      raise exception 'start_tasks: queue % holds only % of the % claimed messages %', q, changed,
        cardinality(c_msg), c_msg using errcode = '55000';
    end if;
  end if;

  return query
  with ids as (select distinct m as mid from unnest(msg_ids) m where m is not null),
  claimed as (
    select * from unnest(c_msg, c_run, c_step, c_idx, c_att) as c(mid, run_id, step_slug, task_index, attempt)
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
         t.flow_slug,
         t.run_id,
         t.step_slug,
         t.task_index,
         -- The handler input, built here rather than in a helper function: a SQL function with
         -- its own search_path is planned again on every call, and this runs once per claimed task.
         case when c.mid is not null then
           case
             when s.step_type = 'map' and s.deps_count = 0 then r.input -> t.task_index
             when s.step_type = 'map' then
               (select ss.output -> t.task_index
                from pgflow.deps d
                join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = d.dep_slug
                where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug)
             when s.deps_count = 0 then r.input
             else (select coalesce(jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
                   from pgflow.deps d
                   join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = d.dep_slug
                   where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug
                     and ss.status = 'completed')
           end
         end,
         c.attempt
  from ids i
  left join claimed c on c.mid = i.mid
  -- Looked up per id (LIMIT 1: the pair is unique), as in the claim above: a join let stale
  -- statistics scan every task of the queue and every run for each batch.
  left join lateral (
    select t.flow_slug, t.run_id, t.step_slug, t.task_index, t.status from pgflow.step_tasks t
    where t.queue_name = q and t.message_id = i.mid
    limit 1
  ) t on true
  left join pgflow.steps s on c.mid is not null and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
  left join lateral (
    select r.input from pgflow.runs r where c.mid is not null and r.run_id = t.run_id limit 1
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
-- It is changed by nothing but PGMQ's own read (read_ct and a visibility of visibility_timeout),
-- exactly as with the two calls. Should the claim fail, the read is rolled back with it and the
-- messages stay visible.
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
as $$
#variable_conflict use_column
declare
  q text := read_and_claim.queue_name;
  msgs pgmq.message_record[];
  ids bigint[];
begin
  if q is null then
    raise exception 'read_and_claim: queue_name must not be NULL' using errcode = '22004';
  end if;
  select array_agg(m order by m.msg_id), array_agg(m.msg_id order by m.msg_id)
  into msgs, ids
  from pgmq.read_with_poll(q, read_and_claim.visibility_timeout, read_and_claim.qty,
                           read_and_claim.max_poll_seconds, read_and_claim.poll_interval_ms) m;
  if ids is null then
    return;
  end if;

  return query
  select m.msg_id, m.read_ct, m.enqueued_at, m.vt,
         case when c.disposition = 'claimed' then m.message end,
         -- to_jsonb: PGMQ before 1.5 has no headers column; a claimed row only, never a foreign body.
         case when c.disposition = 'claimed' then to_jsonb(m) -> 'headers' end,
         c.disposition, c.flow_slug, c.run_id, c.step_slug, c.task_index, c.input, c.attempt
  from unnest(msgs) m
  join pgflow.start_tasks(q, ids, read_and_claim.worker_id, read_and_claim.supported) c
    on c.message_id = m.msg_id
  order by m.msg_id;

  -- start_tasks stamps started_at with now(), the start of this transaction, which is when the
  -- read began waiting. When the read waited long enough to matter, stamp the tasks claimed here
  -- (started_at = now() singles them out; last_worker_id is NULL for a worker with no row, see
  -- start_tasks) with the time they really started, so stalled recovery measures from there.
  if clock_timestamp() - now() > interval '500 milliseconds' then
    -- Each id looked up on its own, as in start_tasks: a join could scan the queue's every task.
    update pgflow.step_tasks t
    set started_at = clock_timestamp()
    from (select k.run_id, k.step_slug, k.task_index
          from unnest(ids) i(mid)
          cross join lateral (
            select t2.run_id, t2.step_slug, t2.task_index from pgflow.step_tasks t2
            where t2.queue_name = q and t2.message_id = i.mid
            limit 1
          ) k) i
    where t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and t.status = 'started'
      and (t.last_worker_id = read_and_claim.worker_id or t.last_worker_id is null)
      and t.started_at = now();
  end if;
end;
$$;

-- ---- schemas/0500_complete_task.sql: pgflow.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer)
-- Completing a task. Late or duplicate completions (the task is no longer started, or its run or step
-- has moved on) change nothing and raise nothing. The caller passes the attempt it ran (start_tasks
-- and read_and_claim return it with the task): a report for an older attempt (its reply was lost,
-- and the task has since been claimed again) is late too, so it can never complete or fail the
-- attempt that is running now. The attempt is required: a report without one cannot be told from a
-- late one, so it would complete whichever attempt happens to be running. The parameter keeps its
-- NULL default only so that a call without it gets this explanation instead of "function does not
-- exist"; an operator completing a task by hand passes step_tasks.attempts_count.
--
-- This runs once per task, so the common path is kept to a few statements in one function: nested
-- plpgsql calls each cost a plan and a search_path save/restore. What _complete_step and
-- _count_off_step do is written out here, and the ready-step pass runs only when a dependent's last
-- dependency just completed (a pass always leaves no ready step behind, so no other step can be
-- waiting for one).
--
-- The work is pgflow._complete_task's; complete_task archives the task's message at once, and
-- complete_tasks archives the messages of a whole batch with one pgmq.archive call per queue (each
-- PGMQ call builds and plans its statement again, which cost more than the rest of a completion).
create or replace function pgflow.complete_task(
  run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
begin
  return query select * from pgflow._complete_task(complete_task.run_id, complete_task.step_slug,
    complete_task.task_index, complete_task.output, complete_task.attempt, true);
end;
$$;

-- ---- schemas/0500_complete_task.sql: pgflow._complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer, p_archive boolean)
-- complete_task's work. p_archive false leaves the completed task's message in its queue for the
-- caller to archive (complete_tasks, once per queue for its batch) before its transaction ends.
create or replace function pgflow._complete_task(
  run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer, p_archive boolean
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  run_status text;
  task pgflow.step_tasks;
  left_tasks integer;
  ready integer;
begin
  if _complete_task.attempt is null then
    raise exception 'complete_task: attempt is required (task % [%] of run %)', _complete_task.step_slug,
      _complete_task.task_index, _complete_task.run_id
      using errcode = '22004',
        hint = 'pass the attempt start_tasks or read_and_claim returned with the task; without it a late report could complete a newer attempt';
  end if;
  -- The run lock orders every state change of one run: completions, failures and stalled recovery.
  select r.status into run_status from pgflow.runs r where r.run_id = _complete_task.run_id for update;
  if run_status is distinct from 'started' then
    return;
  end if;
  -- Under the run lock, an update that matches only a started task is both the check and the change.
  update pgflow.step_tasks t
  set status = 'completed', completed_at = now(), output = _complete_task.output
  where t.run_id = _complete_task.run_id and t.step_slug = _complete_task.step_slug
    and t.task_index = _complete_task.task_index and t.status = 'started'
    and t.attempts_count = _complete_task.attempt
  returning * into task;
  if not found then
    return;
  end if;
  if p_archive then
    perform pgmq.archive(task.queue_name, task.message_id);
  end if;

  -- Count the task off; when it was the step's last, complete the step in the same statement. A
  -- map step's output is its tasks' outputs in index order (this task's output is already stored);
  -- CASE evaluates the aggregate only for the last task of a map.
  update pgflow.step_states ss
  set remaining_tasks = ss.remaining_tasks - 1,
      status = case when ss.remaining_tasks = 1 then 'completed' else ss.status end,
      completed_at = case when ss.remaining_tasks = 1 then now() else ss.completed_at end,
      output = case
        when ss.remaining_tasks <> 1 then ss.output
        when s.step_type = 'map' then
          (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
           where t.run_id = task.run_id and t.step_slug = task.step_slug)
        else task.output
      end
  from pgflow.steps s
  where ss.run_id = task.run_id and ss.step_slug = task.step_slug
    and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
  returning ss.remaining_tasks into left_tasks;

  if left_tasks = 0 then
    -- Release the dependents (as _complete_step does) and note whether any became ready.
    with released as (
      update pgflow.step_states ss
      set remaining_deps = ss.remaining_deps - 1
      from pgflow.deps d
      where ss.run_id = task.run_id and d.flow_slug = task.flow_slug and d.dep_slug = task.step_slug
        and ss.step_slug = d.step_slug
      returning ss.remaining_deps, ss.status
    )
    select count(*) filter (where r.remaining_deps = 0 and r.status = 'created') into ready from released r;

    -- Count the step off the run (as _count_off_step does); the last one completes the run with the
    -- outputs of its completed leaf steps. The run is started: its lock is held and it was checked.
    update pgflow.runs r
    set remaining_steps = r.remaining_steps - 1,
        status = case when r.remaining_steps = 1 then 'completed' else r.status end,
        completed_at = case when r.remaining_steps = 1 then now() else r.completed_at end,
        output = case when r.remaining_steps = 1 then coalesce((
          select jsonb_object_agg(ss.step_slug, ss.output)
          from pgflow.step_states ss
          where ss.run_id = task.run_id and ss.status = 'completed'
            and not exists (select 1 from pgflow.deps d
                            where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
        ), '{}'::jsonb) else r.output end
    where r.run_id = task.run_id;

    if ready > 0 then
      perform pgflow._start_ready_steps(task.run_id);
    end if;
  end if;
  return next task;
end;
$$;

-- ---- schemas/0500_complete_task.sql: pgflow.complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[])
-- Several completions in one round trip: each is exactly complete_task (same checks, same
-- idempotence, the attempt required; a late or duplicate one changes nothing), all in one
-- transaction. Runs are locked in run_id order, so two batches that share runs wait for each other
-- instead of deadlocking. The completed tasks' messages are archived at the end, one pgmq.archive
-- call per queue.
create or replace function pgflow.complete_tasks(
  run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[] default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  i integer;
  task pgflow.step_tasks;
  done_queues text[] := '{}';
  done_ids bigint[] := '{}';
  grp record;
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
  for i in select u.ord from unnest(run_ids) with ordinality as u(run_id, ord) order by u.run_id, u.ord loop
    for task in select * from pgflow._complete_task(run_ids[i], step_slugs[i], task_indexes[i], outputs[i], attempts[i], false) loop
      done_queues := done_queues || task.queue_name;
      done_ids := done_ids || task.message_id;
      return next task;
    end loop;
  end loop;
  for grp in
    select u.q, array_agg(u.id order by u.id) as ids from unnest(done_queues, done_ids) as u(q, id) group by u.q
  loop
    perform pgmq.archive(grp.q, grp.ids);
  end loop;
end;
$$;

-- ---- privileges on function pgflow._complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer, p_archive boolean)
revoke all on function pgflow._complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer, p_archive boolean) from public;

-- ---- privileges on function pgflow._send_task_messages(p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[])
revoke all on function pgflow._send_task_messages(p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[]) from public;

insert into pgflow.migrations (name) values ('20261203210000_pgflow_hot_path') on conflict (name) do nothing;

commit;
