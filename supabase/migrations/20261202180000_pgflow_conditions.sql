-- Conditions and skipping: if/ifNot with whenUnmet, whenExhausted skip and skip-cascade, maps
-- over a skipped dependency, and large maps sent in send_batch slices of 1,000.
-- Replaces engine functions in place (same signatures) and adds helpers; no table changes, so
-- runs in flight keep going across the upgrade.
set local lock_timeout = '5s';

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
  update pgflow.step_tasks t set status = 'cancelled'
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.status in ('queued', 'started');
  perform pgflow._archive_step_messages(p_run_id, p_step_slug, array['cancelled', 'failed']);
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

  update pgflow.step_tasks t
  set status = 'cancelled'
  where t.run_id = p_run_id and t.status in ('queued', 'started');

  perform pgflow._archive_task_messages(p_run_id, array['cancelled', 'failed']);
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
  sup_flows text[];
  sup_steps text[];
  c_msg bigint[];
  c_run uuid[];
  c_step text[];
  c_idx integer[];
  c_att integer[];
  c_off integer[];
  changed integer;
begin
  if q is null then
    raise exception 'start_tasks: queue_name must not be NULL' using errcode = '22004';
  end if;
  if jsonb_typeof(supported) is distinct from 'array' or exists (
       select 1 from jsonb_array_elements(supported) e
       where jsonb_typeof(e) <> 'array' or jsonb_array_length(e) <> 2
          or jsonb_typeof(e -> 0) <> 'string' or jsonb_typeof(e -> 1) <> 'string') then
    raise exception 'start_tasks: supported must be a JSON array of [flow_slug, step_slug] pairs, got %',
      left(coalesce(supported::text, 'NULL'), 200) using errcode = '22023';
  end if;
  select array_agg(e ->> 0), array_agg(e ->> 1) into sup_flows, sup_steps
  from jsonb_array_elements(supported) e;

  with claimed as (
    update pgflow.step_tasks t
    set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
        last_worker_id = start_tasks.worker_id
    from pgflow.runs r, pgflow.step_states ss
    where t.queue_name = q
      and t.message_id = any (msg_ids)
      and t.status = 'queued'
      and (t.flow_slug, t.step_slug) in (select * from unnest(sup_flows, sup_steps))
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
           when not ((t.flow_slug, t.step_slug) in (select * from unnest(sup_flows, sup_steps))) then 'unsupported'
           when t.status = 'started' then 'started'
           else 'ineligible'
         end,
         case when c.mid is not null then t.flow_slug end,
         case when c.mid is not null then t.run_id end,
         case when c.mid is not null then t.step_slug end,
         case when c.mid is not null then t.task_index end,
         case when c.mid is not null then pgflow._task_input(t.run_id, t.flow_slug, t.step_slug, t.task_index) end,
         c.attempt
  from ids i
  left join claimed c on c.mid = i.mid
  left join pgflow.step_tasks t on t.queue_name = q and t.message_id = i.mid
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

-- The handler input of one task: the run input for a root step; one element for a map task; an
-- object of completed dependency outputs for a dependent step (skipped dependencies are absent).
create or replace function pgflow._task_input(p_run_id uuid, p_flow_slug text, p_step_slug text, p_task_index integer)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select case
    when s.step_type = 'map' and s.deps_count = 0 then
      (select r.input -> p_task_index from pgflow.runs r where r.run_id = p_run_id)
    when s.step_type = 'map' then
      (select ss.output -> p_task_index
       from pgflow.deps d
       join pgflow.step_states ss on ss.run_id = p_run_id and ss.step_slug = d.dep_slug
       where d.flow_slug = p_flow_slug and d.step_slug = p_step_slug)
    when s.deps_count = 0 then
      (select r.input from pgflow.runs r where r.run_id = p_run_id)
    else pgflow._dependency_outputs(p_run_id, p_flow_slug, p_step_slug)
  end
  from pgflow.steps s
  where s.flow_slug = p_flow_slug and s.step_slug = p_step_slug
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

create or replace function pgflow.fail_task(run_id uuid, step_slug text, task_index integer, error_message text)
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
  if not found or task.status <> 'started' then
    return;
  end if;
  return next pgflow._task_failed(task.run_id, task.step_slug, task.task_index,
                                  coalesce(fail_task.error_message, 'unknown error'), null);
end;
$$;

-- ---- schemas/0900_privileges.sql
-- No pgflow function is executable by PUBLIC (and so by anon or authenticated on Supabase); the
-- service role and postgres own the engine. Grants, where needed, are documented and explicit.
revoke execute on all functions in schema pgflow from public;

