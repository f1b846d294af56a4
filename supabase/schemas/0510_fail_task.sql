-- Keeps one ended attempt of a task in the history: the task row as it was when the attempt ended
-- (its attempt number, worker and start time). Errors are bounded as the table requires.
create or replace function pgflow._record_attempt(
  p_task pgflow.step_tasks, p_outcome text, p_error text, p_stack text
)
returns void
language sql
volatile
set search_path = ''
as $$
  insert into pgflow.task_attempts (run_id, step_slug, task_index, attempt, worker_id, started_at,
                                    outcome, error_message, error_stack)
  values (p_task.run_id, p_task.step_slug, p_task.task_index, greatest(p_task.attempts_count, 1),
          p_task.last_worker_id, p_task.started_at, p_outcome, left(p_error, 2000), left(p_stack, 4000))
  on conflict on constraint task_attempts_pkey do nothing
$$;

-- Failing a task: retry with exponential backoff on the task's own queue snapshot while attempts
-- remain and its message is still there; then the step's whenExhausted decides: fail the step and
-- the run, or skip the step (skip-cascade: and its dependents). The attempt that ended is kept in
-- pgflow.task_attempts with its outcome (failed, or stalled for stalled recovery), worker, times,
-- error and stack. The caller holds the run's lock.
create or replace function pgflow._task_failed(
  p_run_id uuid, p_step_slug text, p_task_index integer, p_error text, p_retry_delay integer,
  p_outcome text default 'failed', p_stack text default null
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

  -- Deferred and interrupted attempts (0515) do not count: maxAttempts and the backoff see only
  -- the attempts that ran to a failure.
  if task.attempts_count - task.uncounted_attempts < max_attempts then
    -- base_delay * 2^(attempt - 1): the first retry waits base_delay, each later one twice as long.
    -- The message is made visible again first, and the retry happens only if PGMQ still had it: a
    -- message purged or deleted outside pgflow would leave the task queued with nothing to claim,
    -- and its run waiting forever.
    perform 1 from pgmq.set_vt(task.queue_name, task.message_id, coalesce(p_retry_delay,
      least(base_delay::numeric * power(2::numeric, task.attempts_count - task.uncounted_attempts - 1),
            2147483647)::integer));
    if found then
      perform pgflow._record_attempt(task, p_outcome, p_error, p_stack);
      update pgflow.step_tasks t
      set status = 'queued', error_message = p_error, queued_at = now()
      where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index
      returning * into task;
      return task;
    end if;
    -- Nothing can deliver a retry: the attempts end here, visibly, with the reason.
    p_error := format('%s; not retried: its message %s is gone from queue %s (purged or deleted outside pgflow)',
                      p_error, task.message_id, task.queue_name);
    raise warning 'pgflow: task %.% [%] of run %: %', task.flow_slug, task.step_slug, task.task_index, task.run_id, p_error;
  end if;

  perform pgflow._record_attempt(task, p_outcome, p_error, p_stack);
  update pgflow.step_tasks t
  set status = 'failed', error_message = p_error, failed_at = clock_timestamp()
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
  return task;
end;
$$;

-- Like complete_task, a report for an attempt other than the current one is late and changes
-- nothing, and the attempt is required (see complete_task). error_stack (the handler error's stack
-- trace, at most 4,000 characters kept) goes to the attempt's history row only. fail_run: the run
-- fails at once with this error, no retry and no whenExhausted (a run input that fails its schema).
-- outcome: 'failed' (the default: the attempt counts), or an attempt that does not count toward
-- maxAttempts (pgflow._task_uncounted): 'deferred' (the handler asked to be retried after
-- retry_delay seconds, e.g. an HTTP 429's Retry-After) or 'interrupted' (its worker shut down
-- under it; retried at once). retry_delay replaces the backoff, in whole seconds.
create or replace function pgflow.fail_task(
  run_id uuid, step_slug text, task_index integer, error_message text, attempt integer default null,
  error_stack text default null, fail_run boolean default false, outcome text default 'failed',
  retry_delay integer default null
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
  if fail_task.attempt is null then
    raise exception 'fail_task: attempt is required (task % [%] of run %)', fail_task.step_slug,
      fail_task.task_index, fail_task.run_id
      using errcode = '22004',
        hint = 'pass the attempt start_tasks or read_and_claim returned with the task; without it a late report could fail a newer attempt';
  end if;
  if fail_task.outcome is null or fail_task.outcome not in ('failed', 'deferred', 'interrupted') then
    raise exception 'fail_task: outcome must be failed, deferred or interrupted, not %',
      coalesce(quote_literal(fail_task.outcome), 'NULL')
      using errcode = '22023', hint = 'pass failed, or one of the attempts that do not count';
  end if;
  if fail_task.retry_delay is not null
     and fail_task.retry_delay not between 0 and pgflow._max_retry_delay() then
    raise exception 'fail_task: retry_delay must be 0 to % seconds, not %', pgflow._max_retry_delay(),
      fail_task.retry_delay
      using errcode = '22023', hint = 'a handler that must wait longer should fail, or start a new run later';
  end if;
  if fail_task.outcome = 'deferred' and fail_task.retry_delay is null then
    raise exception 'fail_task: a deferred attempt needs its retry_delay' using errcode = '22004';
  end if;
  select * into run from pgflow.runs r where r.run_id = fail_task.run_id for update;
  if not found or run.status <> 'started' then
    return;
  end if;
  select * into task from pgflow.step_tasks t
  where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index
  for update;
  if not found or task.status <> 'started' or task.attempts_count <> fail_task.attempt then
    return;
  end if;
  if fail_task.fail_run then
    perform pgflow._record_attempt(task, 'failed', fail_task.error_message, fail_task.error_stack);
    update pgflow.step_tasks t
    set status = 'failed', error_message = left(fail_task.error_message, 2000), failed_at = clock_timestamp()
    where t.run_id = task.run_id and t.step_slug = task.step_slug and t.task_index = task.task_index
    returning * into task;
    perform pgflow._fail_run(task.run_id, task.step_slug, coalesce(fail_task.error_message, 'unknown error'));
    return next task;
    return;
  end if;
  if fail_task.outcome <> 'failed' then
    return next pgflow._task_uncounted(task, fail_task.outcome,
                                       coalesce(fail_task.error_message, 'unknown error'),
                                       fail_task.error_stack, coalesce(fail_task.retry_delay, 0));
    return;
  end if;
  return next pgflow._task_failed(task.run_id, task.step_slug, task.task_index,
                                  coalesce(fail_task.error_message, 'unknown error'),
                                  fail_task.retry_delay, 'failed', fail_task.error_stack);
end;
$$;
