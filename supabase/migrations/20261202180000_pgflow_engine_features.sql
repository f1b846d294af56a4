-- The engine features of the first release, on top of pgflow_base and pgflow_shared_queues:
-- - conditions and skipping: if/ifNot with whenUnmet, whenExhausted skip / skip-cascade, maps over
--   a skipped source, large maps sent in send_batch slices of 1,000;
-- - operator tools: the coverage check (queue_coverage; workers record their support set), the
--   deploy fence (begin/end_deploy_fence, deploy_fence_status), the keep-alive (ensure_workers,
--   schedule_maintenance), and no registration for a disabled worker function;
-- - the hot path: start_tasks by index lookup per id with the support set as keyed lookups (or the
--   set the worker registered), read_and_claim (one round trip per batch), complete_task in one
--   function, complete_tasks (several completions per call);
-- - attempt-aware reports: complete_task, complete_tasks and fail_task ignore a report for an
--   attempt other than the task's current one;
-- - ensure_flow_compiled rejects a route plan whose queue is JSON null.
-- Functions are replaced in place; the tables gain columns with defaults, so runs in flight keep
-- going across the upgrade.
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if to_regclass('pgflow.migrations') is not null then
    if exists (select 1 from pgflow.migrations m where m.name = '20261202180000_pgflow_engine_features') then
      raise exception 'pgflow migration 20261202180000_pgflow_engine_features is already applied to this database; nothing was changed'
        using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
    end if;
  end if;
end
$$;

set local lock_timeout = '5s';

alter table pgflow.workers add column if not exists supported jsonb not null default '[]'::jsonb;
alter table pgflow.workers add column if not exists supported_keys jsonb;


-- ---- schemas/0060_deploy_fences.sql
-- The deploy fence: replacing a complete set of worker functions in place. A fence records each
-- function's enabled flag before disabling it, so ending the fence restores exactly what was there
-- (a function an operator had disabled on purpose stays disabled).

create table if not exists pgflow.deploy_fences (
  fence_id bigint generated always as identity,
  note text,
  started_at timestamptz not null default now(),
  ended_at timestamptz,
  constraint deploy_fences_pkey primary key (fence_id)
);

create table if not exists pgflow.deploy_fence_functions (
  fence_id bigint not null,
  function_name text not null,
  was_enabled boolean not null,
  constraint deploy_fence_functions_pkey primary key (fence_id, function_name),
  constraint deploy_fence_functions_fence_fkey foreign key (fence_id) references pgflow.deploy_fences (fence_id),
  constraint deploy_fence_functions_function_fkey foreign key (function_name) references pgflow.worker_functions (function_name)
);

-- Signatures that change: the old forms go first (complete_tasks, new here, calls complete_task).
drop function if exists pgflow.register_worker(uuid, text, text);
drop function if exists pgflow.complete_task(uuid, text, integer, jsonb);
drop function if exists pgflow.fail_task(uuid, text, integer, text);
-- The base release's per-task input helper; start_tasks now builds the input in its own query.
drop function if exists pgflow._task_input(uuid, text, text, integer);

-- ---- schemas/0200_messages.sql
-- Sending and archiving task messages. Only PGMQ's public functions are used, and every call names
-- the queue from the task's snapshot: a flow slug never stands in for a queue.

-- Sends one message per queued task of the run that has none yet, batched per (queue, delay) in
-- send_batch calls of at most 1,000, and records each message id on its task in the same transaction.
create or replace function pgflow._send_task_messages(p_run_id uuid)
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
    select t.queue_name, s.opt_start_delay as delay,
           array_agg(t.step_slug order by t.step_slug, t.task_index) as steps,
           array_agg(t.task_index order by t.step_slug, t.task_index) as idxs,
           -- The body is informational only: the claim reads ids, never bodies.
           array_agg(jsonb_build_object('flow_slug', t.flow_slug, 'run_id', t.run_id,
                                        'step_slug', t.step_slug, 'task_index', t.task_index)
                     order by t.step_slug, t.task_index) as msgs
    from pgflow.step_tasks t
    join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    where t.run_id = p_run_id and t.status = 'queued' and t.message_id is null
    group by t.queue_name, s.opt_start_delay
  loop
    -- Large maps go out in slices so one statement never carries an unbounded array.
    for slice_start in 1 .. cardinality(grp.msgs) by batch_size loop
      -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
      select array_agg(id order by id) into ids
      from pgmq.send_batch(grp.queue_name, grp.msgs[slice_start:slice_start + batch_size - 1], grp.delay) as id;
      update pgflow.step_tasks t
      set message_id = u.id
      from unnest(grp.steps[slice_start:slice_start + batch_size - 1], grp.idxs[slice_start:slice_start + batch_size - 1], ids)
        as u(step_slug, task_index, id)
      where t.run_id = p_run_id and t.step_slug = u.step_slug and t.task_index = u.task_index;
    end loop;
  end loop;
end;
$$;

-- Archives the messages of the run's tasks that match the given statuses, one archive call per queue.
create or replace function pgflow._archive_task_messages(p_run_id uuid, p_statuses text[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
begin
  for grp in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as ids
    from pgflow.step_tasks t
    where t.run_id = p_run_id and t.status = any (p_statuses) and t.message_id is not null
    group by t.queue_name
  loop
    perform pgmq.archive(grp.queue_name, grp.ids);
  end loop;
end;
$$;

-- Batched visibility change through pgmq.set_vt; returns the messages it changed.
create or replace function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], offsets integer[])
returns table (msg_id bigint, vt timestamptz)
language plpgsql
volatile
set search_path = ''
as $$
begin
  if cardinality(msg_ids) is distinct from cardinality(offsets) then
    raise exception 'set_vt_batch: % message ids but % offsets', cardinality(msg_ids), cardinality(offsets)
      using errcode = '22023', hint = 'pass one offset per message id';
  end if;
  return query
  select m.msg_id, m.vt
  from unnest(msg_ids, offsets) as u(id, off)
  cross join lateral pgmq.set_vt(set_vt_batch.queue_name, u.id, u.off) as m;
end;
$$;

-- Archives the messages of one step's tasks that match the given statuses, one call per queue.
create or replace function pgflow._archive_step_messages(p_run_id uuid, p_step_slug text, p_statuses text[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
begin
  for grp in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as ids
    from pgflow.step_tasks t
    where t.run_id = p_run_id and t.step_slug = p_step_slug and t.status = any (p_statuses)
      and t.message_id is not null
    group by t.queue_name
  loop
    perform pgmq.archive(grp.queue_name, grp.ids);
  end loop;
end;
$$;

-- ---- schemas/0300_start_flow.sql
-- Starting runs and steps.

-- Completes a step with its output, releases its dependents and counts it off the run; completes the
-- run when it was the last step. The caller holds the run's lock.
create or replace function pgflow._complete_step(p_run_id uuid, p_step_slug text, p_output jsonb)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  flow text;
begin
  update pgflow.step_states ss
  set status = 'completed', output = p_output, completed_at = now(), remaining_tasks = 0
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug
  returning ss.flow_slug into flow;

  update pgflow.step_states ss
  set remaining_deps = ss.remaining_deps - 1
  from pgflow.deps d
  where ss.run_id = p_run_id and d.flow_slug = flow and d.dep_slug = p_step_slug
    and ss.step_slug = d.step_slug;

  perform pgflow._count_off_step(p_run_id);
end;
$$;

-- Counts a finished (completed or skipped) step off its run and completes the run when none is
-- left. The run's output: the outputs of its completed leaf steps (steps nothing depends on);
-- skipped leaves are absent. The caller holds the run's lock.
create or replace function pgflow._count_off_step(p_run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  remaining integer;
begin
  update pgflow.runs r set remaining_steps = r.remaining_steps - 1
  where r.run_id = p_run_id
  returning r.remaining_steps into remaining;
  if remaining = 0 then
    update pgflow.runs r
    set status = 'completed', completed_at = now(),
        output = coalesce((
          select jsonb_object_agg(ss.step_slug, ss.output)
          from pgflow.step_states ss
          where ss.run_id = p_run_id and ss.status = 'completed'
            and not exists (select 1 from pgflow.deps d
                            where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
        ), '{}'::jsonb)
    where r.run_id = p_run_id and r.status = 'started';
  end if;
end;
$$;

-- Skips a step: its outstanding tasks are cancelled and their messages archived, and it is counted
-- off the run. 'skip' releases its dependents (which run without its key); a cascade skips every
-- dependent that has not started, transitively. The caller holds the run's lock.
create or replace function pgflow._skip_step(p_run_id uuid, p_step_slug text, p_reason text, p_cascade boolean)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  flow text;
  dependent text;
begin
  update pgflow.step_states ss
  set status = 'skipped', skip_reason = p_reason, skipped_at = now(), remaining_tasks = 0
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug and ss.status in ('created', 'started')
  returning ss.flow_slug into flow;
  if flow is null then
    return;
  end if;
  -- Messages first, then task rows: a concurrent read_and_claim holds a message row while it
  -- claims the task row, so the opposite order could deadlock with it.
  perform pgflow._archive_step_messages(p_run_id, p_step_slug, array['queued', 'started', 'failed']);
  update pgflow.step_tasks t set status = 'cancelled'
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.status in ('queued', 'started');
  perform pgflow._count_off_step(p_run_id);

  if p_cascade then
    for dependent in
      select d.step_slug from pgflow.deps d
      join pgflow.step_states ss on ss.run_id = p_run_id and ss.step_slug = d.step_slug
      where d.flow_slug = flow and d.dep_slug = p_step_slug and ss.status = 'created'
    loop
      perform pgflow._skip_step(p_run_id, dependent, 'dependency_skipped', true);
    end loop;
  else
    update pgflow.step_states ss
    set remaining_deps = ss.remaining_deps - 1
    from pgflow.deps d
    where ss.run_id = p_run_id and d.flow_slug = flow and d.dep_slug = p_step_slug
      and ss.step_slug = d.step_slug and ss.status = 'created';
  end if;
end;
$$;

-- Fails the run: the step (if given) and the run become failed, every outstanding task is cancelled,
-- and the messages of all of them are archived in every queue they touched.
create or replace function pgflow._fail_run(p_run_id uuid, p_step_slug text, p_error text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  update pgflow.step_states ss
  set status = 'failed', failed_at = now(), error_message = p_error
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug;

  update pgflow.runs r
  set status = 'failed', failed_at = now(), error_message = p_error
  where r.run_id = p_run_id;

  -- Messages first, then task rows: a concurrent read_and_claim holds a message row while it
  -- claims the task row, so the opposite order could deadlock with it. A claim that wins the
  -- message starts its task, which is cancelled right after; its completion is then ignored.
  perform pgflow._archive_task_messages(p_run_id, array['queued', 'started', 'failed']);
  update pgflow.step_tasks t
  set status = 'cancelled'
  where t.run_id = p_run_id and t.status in ('queued', 'started');
end;
$$;

-- Starts every step whose dependencies are done: evaluates its condition, creates its tasks and
-- sends their messages. Steps that finish at once (an empty map, a skip) can make further steps
-- ready, so this repeats until nothing changes. The caller holds the run's lock.
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
begin
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
            perform pgflow._fail_run(p_run_id, ready.step_slug,
              format('[CONDITION_UNMET] step %s: its if/ifNot condition does not hold', ready.step_slug));
            return;
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
          perform pgflow._fail_run(p_run_id, ready.step_slug, format(
            '[TYPE_VIOLATION] map step %s needs an array to map over, got %s',
            ready.step_slug, coalesce(jsonb_typeof(source), 'nothing')));
          return;
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
        insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name)
        select p_run_id, run.flow_slug, ready.step_slug, i, s.queue_name
        from pgflow.steps s, generate_series(0, task_count - 1) as i
        where s.flow_slug = run.flow_slug and s.step_slug = ready.step_slug;
      end if;
    end loop;
  end loop;
  perform pgflow._send_task_messages(p_run_id);
end;
$$;

-- Creates a run of a flow and starts its root steps. Every task's message is sent to its step's
-- routed queue in the same transaction that records the task's queue snapshot and message id.
create or replace function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid default null)
returns pgflow.runs
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  flow pgflow.flows;
  new_run_id uuid := coalesce(start_flow.run_id, gen_random_uuid());
  result pgflow.runs;
begin
  select * into flow from pgflow.flows f where f.flow_slug = start_flow.flow_slug;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(start_flow.flow_slug), 'NULL')
      using errcode = '22023', hint = 'check the slug, or start a worker for the flow so it is compiled';
  end if;
  if start_flow.input is null then
    raise exception 'flow %: input must not be SQL NULL', flow.flow_slug
      using errcode = '22004', hint = 'pass a JSON value, for example ''{}''::jsonb or ''null''::jsonb';
  end if;
  if exists (select 1 from pgflow.runs r where r.run_id = new_run_id) then
    raise exception 'run % already exists', new_run_id using errcode = '23505';
  end if;

  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
  values (new_run_id, flow.flow_slug, start_flow.input,
          (select count(*) from pgflow.steps s where s.flow_slug = flow.flow_slug));

  insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps)
  select new_run_id, s.flow_slug, s.step_slug, s.deps_count
  from pgflow.steps s where s.flow_slug = flow.flow_slug;

  perform pgflow._start_ready_steps(new_run_id);

  -- A flow without steps has nothing to wait for.
  update pgflow.runs r set status = 'completed', completed_at = now(), output = '{}'::jsonb
  where r.run_id = new_run_id and r.status = 'started' and r.remaining_steps = 0;

  select * into result from pgflow.runs r where r.run_id = new_run_id;
  return result;
end;
$$;

-- ---- schemas/0400_start_tasks.sql
-- The claim. A worker that read messages from one queue claims the tasks behind them by exact
-- (queue, message id) identity, restricted to the (flow, step) pairs it has handlers for. Only an
-- eligible queued task in the support set is claimed; every other message is reported and left
-- exactly as it was.

-- A support set as an object keyed by flow || chr(31) || step (slugs never hold chr(31)): a key
-- lookup is a binary search, so membership costs the same for 1 or 1,000 pairs. Entries that are
-- not [string, string] pairs become the key '', which no task can match.
create or replace function pgflow._support_keys(p_supported jsonb)
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select coalesce(jsonb_object_agg(
           case when jsonb_typeof(e) = 'array' then coalesce(e ->> 0, '') || chr(31) || coalesce(e ->> 1, '') else '' end,
           true), '{}'::jsonb)
  from jsonb_array_elements(case when jsonb_typeof(p_supported) = 'array' then p_supported else '[]'::jsonb end) e
$$;

-- supported => NULL claims against the set the worker registered (pgflow.workers.supported, keyed
-- once by register_worker): a worker with 1,000 pairs then sends none of them with each batch.
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
        using errcode = '22023', hint = 'register it with pgflow.register_worker, or pass the supported pairs';
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
  end if;
  if supported is not null and (jsonb_typeof(supported) <> 'array' or malformed) then
    raise exception 'start_tasks: supported must be a JSON array of [flow_slug, step_slug] pairs, got %',
      left(coalesce(supported::text, 'NULL'), 200) using errcode = '22023';
  end if;

  with claimed as (
    update pgflow.step_tasks t
    set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
        last_worker_id = start_tasks.worker_id
    -- One index lookup per id: `message_id = any (msg_ids)` let the planner scan every task the
    -- queue ever had.
    from (select distinct m from unnest(msg_ids) m where m is not null) i(mid),
         pgflow.runs r, pgflow.step_states ss
    where t.queue_name = q
      and t.message_id = i.mid
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
         case when c.mid is not null then t.flow_slug end,
         case when c.mid is not null then t.run_id end,
         case when c.mid is not null then t.step_slug end,
         case when c.mid is not null then t.task_index end,
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
  left join pgflow.step_tasks t on t.queue_name = q and t.message_id = i.mid
  left join pgflow.steps s on c.mid is not null and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
  left join pgflow.runs r on c.mid is not null and r.run_id = t.run_id
  order by i.mid;
end;
$$;

-- The object of a step's completed dependency outputs; skipped dependencies are absent.
create or replace function pgflow._dependency_outputs(p_run_id uuid, p_flow_slug text, p_step_slug text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select coalesce(jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
  from pgflow.deps d
  join pgflow.step_states ss on ss.run_id = p_run_id and ss.step_slug = d.dep_slug
  where d.flow_slug = p_flow_slug and d.step_slug = p_step_slug and ss.status = 'completed'
$$;

-- ---- schemas/0410_read_and_claim.sql
-- Read and claim in one round trip. A worker's poll is pgmq.read_with_poll followed by start_tasks
-- on exactly the ids it returned; run as two calls, every batch waits for two round trips in series
-- before a task starts. This does both in one call and one transaction, against the support set
-- the worker registered (start_tasks(..., supported => NULL)) or, when given, the explicit pairs.
--
-- Every message read is returned once with its PGMQ record and its disposition; only claimed rows
-- carry identity, input and attempt. A message that is not claimed is changed by nothing but PGMQ's
-- own read (read_ct and a visibility of visibility_timeout), exactly as with the two calls. Should
-- the claim fail, the read is rolled back with it and the messages stay visible.
create or replace function pgflow.read_and_claim(
  queue_name text,
  worker_id uuid,
  visibility_timeout integer,
  qty integer,
  max_poll_seconds integer default 5,
  poll_interval_ms integer default 100,
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
  select m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, to_jsonb(m) -> 'headers',
         c.disposition, c.flow_slug, c.run_id, c.step_slug, c.task_index, c.input, c.attempt
  from unnest(msgs) m
  join pgflow.start_tasks(q, ids, read_and_claim.worker_id, read_and_claim.supported) c
    on c.message_id = m.msg_id
  order by m.msg_id;

  -- start_tasks stamps started_at with now(), the start of this transaction, which is when the
  -- read began waiting. When the read waited long enough to matter, stamp the tasks claimed here
  -- (started_at = now() singles them out) with the time they really started, so stalled recovery
  -- measures from there.
  if clock_timestamp() - now() > interval '500 milliseconds' then
    update pgflow.step_tasks t
    set started_at = clock_timestamp()
    from unnest(ids) i(mid)
    where t.queue_name = q and t.message_id = i.mid and t.status = 'started'
      and t.last_worker_id = read_and_claim.worker_id and t.started_at = now();
  end if;
end;
$$;

-- ---- schemas/0500_complete_task.sql
-- Completing a task. Late or duplicate completions (the task is no longer started, or its run or step
-- has moved on) change nothing and raise nothing. A worker passes the attempt it ran: a report for an
-- older attempt (its reply was lost, and the task has since been claimed again) is late too, so it
-- can never complete or fail the attempt that is running now.
--
-- This runs once per task, so the common path is kept to a few statements in one function: nested
-- plpgsql calls each cost a plan and a search_path save/restore. What _complete_step and
-- _count_off_step do is written out here, and the ready-step pass runs only when a dependent's last
-- dependency just completed (a pass always leaves no ready step behind, so no other step can be
-- waiting for one).
create or replace function pgflow.complete_task(
  run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer default null
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
  -- The run lock orders every state change of one run: completions, failures and stalled recovery.
  select r.status into run_status from pgflow.runs r where r.run_id = complete_task.run_id for update;
  if run_status is distinct from 'started' then
    return;
  end if;
  -- Under the run lock, an update that matches only a started task is both the check and the change.
  update pgflow.step_tasks t
  set status = 'completed', completed_at = now(), output = complete_task.output
  where t.run_id = complete_task.run_id and t.step_slug = complete_task.step_slug
    and t.task_index = complete_task.task_index and t.status = 'started'
    and (complete_task.attempt is null or t.attempts_count = complete_task.attempt)
  returning * into task;
  if not found then
    return;
  end if;
  perform pgmq.archive(task.queue_name, task.message_id);

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

-- Several completions in one round trip: each is exactly complete_task (same checks, same
-- idempotence; a late or duplicate one changes nothing), all in one transaction. Runs are locked in
-- run_id order, so two batches that share runs wait for each other instead of deadlocking.
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
begin
  if cardinality(run_ids) is distinct from cardinality(step_slugs)
     or cardinality(run_ids) is distinct from cardinality(task_indexes)
     or cardinality(run_ids) is distinct from cardinality(outputs)
     or (attempts is not null and cardinality(run_ids) is distinct from cardinality(attempts)) then
    raise exception 'complete_tasks: % run ids, % step slugs, % task indexes and % outputs',
      cardinality(run_ids), cardinality(step_slugs), cardinality(task_indexes), cardinality(outputs)
      using errcode = '22023', hint = 'pass one run id, step slug, task index and output per task';
  end if;
  for i in select u.ord from unnest(run_ids) with ordinality as u(run_id, ord) order by u.run_id, u.ord loop
    return query select * from pgflow.complete_task(run_ids[i], step_slugs[i], task_indexes[i], outputs[i], attempts[i]);
  end loop;
end;
$$;

-- ---- schemas/0510_fail_task.sql
-- Failing a task: retry with exponential backoff on the task's own queue snapshot while attempts
-- remain; then the step's whenExhausted decides: fail the step and the run, or skip the step
-- (skip-cascade: and its dependents). The caller holds the run's lock.
create or replace function pgflow._task_failed(
  p_run_id uuid, p_step_slug text, p_task_index integer, p_error text, p_retry_delay integer
)
returns pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  task pgflow.step_tasks;
  max_attempts integer;
  base_delay integer;
  when_exhausted text;
begin
  select t.* into task from pgflow.step_tasks t
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index;
  select coalesce(s.opt_max_attempts, f.opt_max_attempts), coalesce(s.opt_base_delay, f.opt_base_delay),
         s.when_exhausted
  into max_attempts, base_delay, when_exhausted
  from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug
  where s.flow_slug = task.flow_slug and s.step_slug = task.step_slug;

  if task.attempts_count < max_attempts then
    update pgflow.step_tasks t
    set status = 'queued', error_message = p_error, queued_at = now()
    where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index
    returning * into task;
    -- base_delay * 2^(attempt - 1): the first retry waits base_delay, each later one twice as long.
    perform pgmq.set_vt(task.queue_name, task.message_id, coalesce(p_retry_delay,
      least(base_delay::numeric * power(2::numeric, task.attempts_count - 1), 2147483647)::integer));
  else
    update pgflow.step_tasks t
    set status = 'failed', error_message = p_error, failed_at = now()
    where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index
    returning * into task;
    if when_exhausted = 'fail' then
      perform pgflow._fail_run(p_run_id, p_step_slug, p_error);
    else
      -- The step gives up without failing the run: skipped, with the last error kept on it.
      update pgflow.step_states ss set error_message = p_error
      where ss.run_id = p_run_id and ss.step_slug = p_step_slug;
      perform pgflow._skip_step(p_run_id, p_step_slug, 'handler_failed', when_exhausted = 'skip-cascade');
      perform pgflow._start_ready_steps(p_run_id);
    end if;
  end if;
  return task;
end;
$$;

-- Like complete_task, a report for an attempt other than the current one is late and changes nothing.
create or replace function pgflow.fail_task(
  run_id uuid, step_slug text, task_index integer, error_message text, attempt integer default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  run pgflow.runs;
  task pgflow.step_tasks;
begin
  select * into run from pgflow.runs r where r.run_id = fail_task.run_id for update;
  if not found or run.status <> 'started' then
    return;
  end if;
  select * into task from pgflow.step_tasks t
  where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index
  for update;
  if not found or task.status <> 'started' or task.attempts_count <> coalesce(fail_task.attempt, task.attempts_count) then
    return;
  end if;
  return next pgflow._task_failed(task.run_id, task.step_slug, task.task_index,
                                  coalesce(fail_task.error_message, 'unknown error'), null);
end;
$$;

-- ---- schemas/0600_workers.sql
-- The worker registry: registration, heartbeat, stop and deprecation.

create or replace function pgflow.register_worker(
  worker_id uuid,
  queue_name text,
  function_name text,
  supported jsonb default '[]'::jsonb
)
returns pgflow.workers
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  result pgflow.workers;
  fn pgflow.worker_functions;
begin
  if register_worker.worker_id is null or register_worker.queue_name is null or register_worker.function_name is null then
    raise exception 'register_worker: worker_id, queue_name and function_name are required' using errcode = '22004';
  end if;
  if jsonb_typeof(supported) is distinct from 'array' then
    raise exception 'register_worker: supported must be a JSON array of [flow_slug, step_slug] pairs' using errcode = '22023';
  end if;
  insert into pgflow.worker_functions (function_name) values (register_worker.function_name)
  on conflict (function_name) do update set updated_at = now()
  returning * into fn;
  -- A disabled function (a deploy fence is in place) gets no new workers until its flag is restored.
  if not fn.enabled then
    raise exception 'worker function % is disabled; no new worker may register until it is enabled again', fn.function_name
      using errcode = '55000', hint = 'finish the deploy fence with pgflow.end_deploy_fence, or set worker_functions.enabled';
  end if;
  insert into pgflow.workers (worker_id, queue_name, function_name, supported, supported_keys)
  values (register_worker.worker_id, register_worker.queue_name, register_worker.function_name, register_worker.supported,
          pgflow._support_keys(register_worker.supported))
  returning * into result;
  return result;
end;
$$;

-- Records a heartbeat and tells the worker whether it has been deprecated (it should stop polling).
create or replace function pgflow.heartbeat(worker_id uuid)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  deprecated boolean;
begin
  -- A worker of a disabled function is deprecated too: it stops polling and drains.
  update pgflow.workers w
  set last_heartbeat_at = clock_timestamp(),
      deprecated_at = coalesce(w.deprecated_at, case when not fn.enabled then clock_timestamp() end)
  from pgflow.worker_functions fn
  where w.worker_id = heartbeat.worker_id and fn.function_name = w.function_name
  returning w.deprecated_at is not null into deprecated;
  if not found then
    raise exception 'worker % is not registered', heartbeat.worker_id
      using errcode = '22023', hint = 'register it with pgflow.register_worker first';
  end if;
  return deprecated;
end;
$$;

create or replace function pgflow.mark_worker_stopped(worker_id uuid)
returns void
language sql
volatile
set search_path = ''
as $$
  update pgflow.workers w set stopped_at = coalesce(w.stopped_at, clock_timestamp())
  where w.worker_id = mark_worker_stopped.worker_id
$$;

-- Deprecates every live worker of a function: they stop polling and drain their in-flight tasks.
create or replace function pgflow.deprecate_workers(function_name text)
returns integer
language sql
volatile
set search_path = ''
as $$
  with deprecated as (
    update pgflow.workers w set deprecated_at = clock_timestamp()
    where w.function_name = deprecate_workers.function_name
      and w.deprecated_at is null and w.stopped_at is null
    returning 1
  )
  select count(*)::integer from deprecated
$$;

-- ---- schemas/0720_ensure_flow_compiled.sql
-- The startup compiler. A worker sends each flow it serves: the shape, the route plan and the
-- runtime options. SQL validates all of it itself, then, under a per-slug transaction lock:
--   missing            → create definitions, routes and queues   → 'compiled'
--   same shape, routes → nothing                                 → 'verified'
--   different, production → nothing at all, with the differences → 'mismatch'
--   different, local development (pgflow.is_local_development()) → delete the flow's data and
--                        create it again                          → 'recompiled'

-- Every problem with a definition, one line each; empty when it is valid.
create or replace function pgflow._definition_problems(p_flow_slug text, p_shape jsonb, p_routes jsonb)
returns text[]
language plpgsql
stable
set search_path = ''
as $$
declare
  problems text[] := '{}';
  step jsonb;
  i integer := 0;
  slugs text[] := '{}';
  dep jsonb;
  mode text := p_routes ->> 'mode';
  expected text;
  queue text;
  missing text[];
  unknown text[];
begin
  if not pgflow.is_valid_slug(p_flow_slug) then
    return array[format('invalid flow slug %s', coalesce(quote_literal(p_flow_slug), 'NULL'))];
  end if;
  if jsonb_typeof(p_shape -> 'steps') is distinct from 'array' then
    return array['shape must be an object with a "steps" array'];
  end if;
  for step in select value from jsonb_array_elements(p_shape -> 'steps') loop
    if jsonb_typeof(step -> 'slug') is distinct from 'string' or not pgflow.is_valid_slug(step ->> 'slug') then
      problems := problems || format('step %s: invalid slug %s', i, coalesce(step -> 'slug', 'null'));
    elsif lower(step ->> 'slug') = any (select lower(x) from unnest(slugs) x) then
      problems := problems || format('step %s: slug %s is used twice (case-insensitively)', i, step ->> 'slug');
    end if;
    if (step -> 'index') is distinct from to_jsonb(i) then
      problems := problems || format('step %s: index %s does not match its position', i, coalesce(step -> 'index', 'null'));
    end if;
    if (step ->> 'stepType') is null or (step ->> 'stepType') not in ('single', 'map') then
      problems := problems || format('step %s: stepType must be single or map', i);
    end if;
    if (step ->> 'whenUnmet') is null or (step ->> 'whenUnmet') not in ('fail', 'skip', 'skip-cascade')
       or (step ->> 'whenExhausted') is null or (step ->> 'whenExhausted') not in ('fail', 'skip', 'skip-cascade') then
      problems := problems || format('step %s: whenUnmet and whenExhausted must be fail, skip or skip-cascade', i);
    end if;
    if jsonb_typeof(step -> 'dependencies') is distinct from 'array' then
      problems := problems || format('step %s: dependencies must be an array', i);
    else
      for dep in select value from jsonb_array_elements(step -> 'dependencies') loop
        if jsonb_typeof(dep) <> 'string' or not ((dep #>> '{}') = any (slugs)) then
          problems := problems || format('step %s: dependency %s is not an earlier step', i, dep);
        end if;
      end loop;
      if step ->> 'stepType' = 'map' and jsonb_array_length(step -> 'dependencies') > 1 then
        problems := problems || format('step %s: a map step has at most one dependency', i);
      end if;
    end if;
    if jsonb_typeof(step -> 'requiredInputPattern' -> 'defined') is distinct from 'boolean'
       or jsonb_typeof(step -> 'forbiddenInputPattern' -> 'defined') is distinct from 'boolean' then
      problems := problems || format('step %s: patterns must be {"defined": false} or {"defined": true, "value": ...}', i);
    end if;
    slugs := slugs || (step ->> 'slug');
    i := i + 1;
  end loop;

  if mode is null or mode not in ('flow', 'step', 'routed') then
    return problems || format('route plan mode must be flow, step or routed, got %s', coalesce(p_routes -> 'mode', 'null'));
  end if;
  if jsonb_typeof(p_routes -> 'queues') is distinct from 'object' then
    return problems || 'route plan must have a "queues" object';
  end if;
  select array_agg(s order by s) into missing from unnest(slugs) s where not (p_routes -> 'queues' ? s);
  select array_agg(k order by k) into unknown from jsonb_object_keys(p_routes -> 'queues') k where not (k = any (slugs));
  if missing is not null then
    problems := problems || format('route plan has no queue for step(s) %s', array_to_string(missing, ', '));
  end if;
  if unknown is not null then
    problems := problems || format('route plan names unknown step(s) %s', array_to_string(unknown, ', '));
  end if;
  for i in 0 .. coalesce(array_length(slugs, 1), 0) - 1 loop
    -- A JSON null (or number, object) is not a queue name: say so rather than skip the step.
    if jsonb_typeof(p_routes -> 'queues' -> slugs[i + 1]) <> 'string' then
      problems := problems || format('step %s: queue must be a string, got %s', slugs[i + 1], p_routes -> 'queues' -> slugs[i + 1]);
      continue;
    end if;
    queue := p_routes -> 'queues' ->> slugs[i + 1];
    continue when queue is null;
    begin
      expected := case mode
        when 'flow' then lower(p_flow_slug)
        when 'step' then pgflow.private_queue_name(p_flow_slug, slugs[i + 1], i)
        else queue end;
    exception when others then
      problems := problems || format('step %s: %s', slugs[i + 1], sqlerrm);
      continue;
    end;
    if queue <> expected then
      problems := problems || format('step %s: %s-mode queue must be %s, got %s', slugs[i + 1], mode, expected, queue);
    elsif mode = 'routed' and not pgflow.is_valid_queue_name(queue) then
      problems := problems || format('step %s: invalid shared queue name %s (lowercase letters, digits and single underscores, starting with a letter, at most 47 characters)', slugs[i + 1], quote_literal(queue));
    elsif length(queue) > 47 then
      problems := problems || format('step %s: queue %s is longer than 47 characters', slugs[i + 1], queue);
    else
      begin
        perform pgmq.validate_queue_name(queue);
        perform pgmq.format_table_name(queue, 'q');
      exception when others then
        problems := problems || format('step %s: PGMQ rejects queue %s: %s', slugs[i + 1], queue, sqlerrm);
      end;
    end if;
  end loop;
  return problems;
end;
$$;

-- Creates a validated definition: shared queues are checked (and locked) first, so a conflict is
-- found before anything changes; then the flow, its steps and their queues.
create or replace function pgflow._create_flow_from_definition(
  p_flow_slug text, p_shape jsonb, p_routes jsonb, p_options jsonb
)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  step jsonb;
  q text;
  opts jsonb;
  flow_opts jsonb := coalesce(p_options -> 'flow', '{}'::jsonb);
begin
  if p_routes ->> 'mode' = 'routed' then
    for q in select distinct value #>> '{}' from jsonb_each(p_routes -> 'queues') order by 1 loop
      perform pgflow._check_shared_queue(q, p_flow_slug);
    end loop;
  end if;
  perform pgflow.create_flow(p_flow_slug,
    coalesce((flow_opts ->> 'maxAttempts')::integer, 3),
    coalesce((flow_opts ->> 'baseDelay')::integer, 1),
    coalesce((flow_opts ->> 'timeout')::integer, 60),
    p_routes ->> 'mode');
  for step in select value from jsonb_array_elements(p_shape -> 'steps') order by (value ->> 'index')::integer loop
    opts := coalesce(p_options -> 'steps' -> (step ->> 'slug'), '{}'::jsonb);
    perform pgflow.add_step(
      flow_slug => p_flow_slug,
      step_slug => step ->> 'slug',
      deps_slugs => array(select jsonb_array_elements_text(step -> 'dependencies')),
      max_attempts => (opts ->> 'maxAttempts')::integer,
      base_delay => (opts ->> 'baseDelay')::integer,
      timeout => (opts ->> 'timeout')::integer,
      start_delay => coalesce((opts ->> 'startDelay')::integer, 0),
      step_type => step ->> 'stepType',
      required_input_pattern => case when (step -> 'requiredInputPattern' ->> 'defined')::boolean
                                     then step -> 'requiredInputPattern' -> 'value' end,
      forbidden_input_pattern => case when (step -> 'forbiddenInputPattern' ->> 'defined')::boolean
                                      then step -> 'forbiddenInputPattern' -> 'value' end,
      when_unmet => step ->> 'whenUnmet',
      when_exhausted => step ->> 'whenExhausted',
      queue_name => p_routes -> 'queues' ->> (step ->> 'slug'));
  end loop;
end;
$$;

create or replace function pgflow.ensure_flow_compiled(
  flow_slug text,
  shape jsonb,
  route_plan jsonb,
  options jsonb default '{}'::jsonb
)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  problems text[];
  existing text;
  differences text[];
  q text;
begin
  problems := pgflow._definition_problems(ensure_flow_compiled.flow_slug, shape, route_plan);
  if cardinality(problems) > 0 then
    raise exception 'flow %: invalid definition: %', coalesce(ensure_flow_compiled.flow_slug, 'NULL'),
      array_to_string(problems, '; ') using errcode = '22023';
  end if;
  -- One compile per slug at a time: concurrent workers of the same flow wait here.
  perform pg_advisory_xact_lock(hashtext('pgflow.flow:' || lower(ensure_flow_compiled.flow_slug)));

  select f.flow_slug into existing from pgflow.flows f where lower(f.flow_slug) = lower(ensure_flow_compiled.flow_slug);
  if existing is null then
    perform pgflow._create_flow_from_definition(ensure_flow_compiled.flow_slug, shape, route_plan, options);
    return jsonb_build_object('status', 'compiled', 'differences', '[]'::jsonb);
  end if;
  if existing <> ensure_flow_compiled.flow_slug then
    raise exception 'flow % conflicts with existing flow % (flow slugs are unique case-insensitively)',
      ensure_flow_compiled.flow_slug, existing using errcode = '23505', hint = 'use the existing spelling or a new slug';
  end if;

  differences := pgflow._definition_differences(
    pgflow._flow_shape(existing), shape, pgflow._flow_route_plan(existing), route_plan);
  if cardinality(differences) = 0 then
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb);
  end if;
  if not pgflow.is_local_development() then
    -- Production: change nothing. Existing tasks keep their queue snapshots.
    return jsonb_build_object('status', 'mismatch', 'differences', to_jsonb(differences));
  end if;
  -- Local development: check the new shared queues before deleting anything.
  if route_plan ->> 'mode' = 'routed' then
    for q in select distinct value #>> '{}' from jsonb_each(route_plan -> 'queues') order by 1 loop
      perform pgflow._check_shared_queue(q, existing);
    end loop;
  end if;
  perform pgflow.delete_flow_and_data(existing);
  perform pgflow._create_flow_from_definition(existing, shape, route_plan, options);
  return jsonb_build_object('status', 'recompiled', 'differences', to_jsonb(differences));
end;
$$;

-- ---- schemas/0800_coverage.sql
-- The coverage check: per queue, the (flow, step) pairs that need a handler and whether a live
-- worker serves each. A point-in-time operator check, read-only; not a startup gate.
--
-- Needed pairs: every persisted route (any stored flow can be started), plus the pairs of tasks
-- that are still queued or started in started runs (work that will reach the queue's workers).
-- Served: a worker on that queue, not stopped or deprecated, whose heartbeat is fresher than
-- stale_after, lists the pair in its support set.
create or replace function pgflow.queue_coverage(
  queue_name text default null,
  stale_after interval default '30 seconds'
)
returns table (
  queue_name text,
  flow_slug text,
  step_slug text,
  routed boolean,
  queued_tasks bigint,
  started_tasks bigint,
  live_workers bigint,
  served boolean
)
language sql
stable
set search_path = ''
as $$
  with needed as (
    select s.queue_name, s.flow_slug, s.step_slug from pgflow.steps s
    union
    select t.queue_name, t.flow_slug, t.step_slug
    from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
    where t.status in ('queued', 'started') and r.status = 'started'
  )
  select n.queue_name, n.flow_slug, n.step_slug,
         exists (select 1 from pgflow.steps s
                 where s.flow_slug = n.flow_slug and s.step_slug = n.step_slug and s.queue_name = n.queue_name),
         (select count(*) from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
          where t.queue_name = n.queue_name and t.flow_slug = n.flow_slug and t.step_slug = n.step_slug
            and t.status = 'queued' and r.status = 'started'),
         (select count(*) from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
          where t.queue_name = n.queue_name and t.flow_slug = n.flow_slug and t.step_slug = n.step_slug
            and t.status = 'started' and r.status = 'started'),
         w.live,
         w.live > 0
  from needed n
  cross join lateral (
    select count(*) as live from pgflow.workers w
    where w.queue_name = n.queue_name and w.stopped_at is null and w.deprecated_at is null
      and w.last_heartbeat_at > clock_timestamp() - stale_after
      and w.supported @> jsonb_build_array(jsonb_build_array(n.flow_slug, n.step_slug))
  ) w
  where queue_coverage.queue_name is null or n.queue_name = queue_coverage.queue_name
  order by n.queue_name, n.flow_slug, n.step_slug
$$;

-- ---- schemas/0810_deploy_fence.sql
-- Deploy fence helpers. The procedure (docs/operations.md): begin the fence for the complete set of
-- functions being replaced → wait until deploy_fence_status says drained → deploy registries that
-- carry both old and new flow versions while old runs drain → end the fence.

-- Records the functions' enabled flags, disables them and deprecates their workers (they stop
-- polling and finish what they hold). Returns the fence id.
create or replace function pgflow.begin_deploy_fence(function_names text[], note text default null)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  fence bigint;
  busy text[];
begin
  if function_names is null or cardinality(function_names) = 0 then
    raise exception 'begin_deploy_fence: name at least one worker function' using errcode = '22023';
  end if;
  -- Functions never registered yet get a row, so the fence also keeps them from registering.
  insert into pgflow.worker_functions (function_name)
  select distinct f from unnest(function_names) f
  on conflict (function_name) do nothing;
  perform 1 from pgflow.worker_functions wf where wf.function_name = any (function_names)
  order by wf.function_name for update;

  select array_agg(distinct ff.function_name order by ff.function_name) into busy
  from pgflow.deploy_fence_functions ff join pgflow.deploy_fences f on f.fence_id = ff.fence_id
  where f.ended_at is null and ff.function_name = any (function_names);
  if busy is not null then
    raise exception 'begin_deploy_fence: % already inside an open deploy fence', busy
      using errcode = '55000', hint = 'end that fence first (pgflow.end_deploy_fence)';
  end if;

  insert into pgflow.deploy_fences (note) values (note) returning fence_id into fence;
  insert into pgflow.deploy_fence_functions (fence_id, function_name, was_enabled)
  select fence, wf.function_name, wf.enabled
  from pgflow.worker_functions wf where wf.function_name = any (function_names);
  update pgflow.worker_functions wf set enabled = false, updated_at = now()
  where wf.function_name = any (function_names);
  update pgflow.workers w set deprecated_at = clock_timestamp()
  where w.function_name = any (function_names) and w.deprecated_at is null and w.stopped_at is null;
  return fence;
end;
$$;

-- Per fenced function: live workers (fresh heartbeat, not stopped) and started tasks held by its
-- workers. drained = both are zero.
create or replace function pgflow.deploy_fence_status(fence_id bigint, stale_after interval default '30 seconds')
returns table (function_name text, was_enabled boolean, enabled boolean, live_workers bigint, started_tasks bigint, drained boolean)
language sql
stable
set search_path = ''
as $$
  select ff.function_name, ff.was_enabled, wf.enabled, lw.n, st.n, lw.n = 0 and st.n = 0
  from pgflow.deploy_fence_functions ff
  join pgflow.worker_functions wf on wf.function_name = ff.function_name
  cross join lateral (
    select count(*) as n from pgflow.workers w
    where w.function_name = ff.function_name and w.stopped_at is null
      and w.last_heartbeat_at > clock_timestamp() - stale_after
  ) lw
  cross join lateral (
    select count(*) as n from pgflow.step_tasks t join pgflow.workers w on w.worker_id = t.last_worker_id
    where w.function_name = ff.function_name and t.status = 'started'
  ) st
  where ff.fence_id = deploy_fence_status.fence_id
  order by ff.function_name
$$;

-- Restores exactly the recorded enabled flags and closes the fence.
create or replace function pgflow.end_deploy_fence(fence_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
begin
  update pgflow.deploy_fences f set ended_at = now()
  where f.fence_id = end_deploy_fence.fence_id and f.ended_at is null;
  if not found then
    raise exception 'deploy fence % does not exist or has already ended', end_deploy_fence.fence_id
      using errcode = '22023';
  end if;
  update pgflow.worker_functions wf set enabled = ff.was_enabled, updated_at = now()
  from pgflow.deploy_fence_functions ff
  where ff.fence_id = end_deploy_fence.fence_id and wf.function_name = ff.function_name;
end;
$$;

-- ---- schemas/0820_ensure_workers.sql
-- The keep-alive. Picks the enabled worker functions that have no live worker and whose debounce
-- has passed, records the invocation, and (where Supabase provides pg_net and the project URL is
-- in Vault) pings each function over HTTP so it starts a worker. A disabled function is never
-- pinged: that is what keeps a deploy fence closed.
create or replace function pgflow.ensure_workers()
returns table (function_name text, pinged boolean)
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  fn record;
  base_url text;
  auth text;
  can_ping boolean := to_regproc('net.http_post') is not null and to_regclass('vault.decrypted_secrets') is not null;
begin
  if can_ping then
    execute $q$select max(decrypted_secret) filter (where name = 'supabase_project_url'),
                      coalesce(max(decrypted_secret) filter (where name = 'pgflow_auth_secret'),
                               max(decrypted_secret) filter (where name = 'supabase_service_role_key'))
               from vault.decrypted_secrets$q$ into base_url, auth;
    can_ping := base_url is not null and auth is not null;
  end if;
  for fn in
    update pgflow.worker_functions wf set last_invoked_at = now()
    where wf.enabled
      and (wf.last_invoked_at is null or wf.last_invoked_at < now() - wf.debounce)
      and not exists (
        select 1 from pgflow.workers w
        where w.function_name = wf.function_name and w.stopped_at is null and w.deprecated_at is null
          and w.last_heartbeat_at > clock_timestamp() - wf.debounce)
    returning wf.function_name
  loop
    if can_ping then
      execute 'select net.http_post(url => $1, headers => $2, body => ''{}''::jsonb)'
      using rtrim(base_url, '/') || '/functions/v1/' || fn.function_name,
            jsonb_build_object('Content-Type', 'application/json', 'Authorization', 'Bearer ' || auth);
    end if;
    function_name := fn.function_name;
    pinged := can_ping;
    return next;
  end loop;
end;
$$;

-- Schedules ensure_workers and requeue_stalled_tasks with pg_cron (Supabase has it; elsewhere the
-- worker's own periodic recovery and an external keep-alive do the same job).
create or replace function pgflow.schedule_maintenance(keep_alive interval default '5 seconds')
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if to_regproc('cron.schedule') is null then
    raise exception 'pg_cron is not installed' using errcode = '0A000',
      hint = 'enable pg_cron, or call pgflow.ensure_workers() from an external scheduler';
  end if;
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_ensure_workers', extract(epoch from keep_alive)::integer || ' seconds', 'select pgflow.ensure_workers()';
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_requeue_stalled_tasks', '15 seconds', 'select pgflow.requeue_stalled_tasks()';
end;
$$;

-- ---- schemas/0900_privileges.sql
-- No pgflow function is executable by PUBLIC (and so by anon or authenticated on Supabase); the
-- service role and postgres own the engine. Grants, where needed, are documented and explicit.
revoke execute on all functions in schema pgflow from public;

commit;
