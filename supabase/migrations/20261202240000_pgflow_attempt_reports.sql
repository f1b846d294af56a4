-- Attempt-aware reports: complete_task, complete_tasks and fail_task take the attempt the worker ran
-- (optional; callers that omit it behave as before). A report whose attempt is not the task's
-- current one is late and changes nothing, so a lost reply retried after the task was claimed again
-- can never complete or fail the newer attempt.
set local lock_timeout = '5s';

-- The signatures change, so the old forms go first (complete_tasks calls complete_task).
drop function if exists pgflow.complete_tasks(uuid[], text[], integer[], jsonb[]);
drop function if exists pgflow.complete_task(uuid, text, integer, jsonb);
drop function if exists pgflow.fail_task(uuid, text, integer, text);

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

-- ---- schemas/0900_privileges.sql
-- No pgflow function is executable by PUBLIC (and so by anon or authenticated on Supabase); the
-- service role and postgres own the engine. Grants, where needed, are documented and explicit.
revoke execute on all functions in schema pgflow from public;

