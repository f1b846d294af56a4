-- Attempts that do not count toward maxAttempts. A handler that was told "not now" (HTTP 429 with
-- Retry-After) did nothing wrong, and neither did one whose worker shut down under it: neither
-- should bring its task closer to failing. Each is still an attempt in the history, with its own
-- outcome, so an operator sees it.

-- The longest retry delay a handler may ask for, in seconds (one day). A server asking for more is
-- not a rate limit a task should sit out holding its concurrency; the worker refuses it when the
-- handler builds the error, and fail_task refuses it from anyone else.
create or replace function pgflow._max_retry_delay()
returns integer
language sql
immutable
parallel safe
set search_path = ''
as $$ select 86400 $$;

-- How many attempts of one task may end uncounted, per outcome. Without a bound a handler that
-- always defers, or always outlives its worker (an Edge isolate's wall clock), would be retried for
-- ever; past it, each such attempt counts as a failed one, with an error naming the bound.
create or replace function pgflow._max_uncounted(p_outcome text)
returns integer
language sql
immutable
parallel safe
set search_path = ''
as $$ select case p_outcome when 'deferred' then 100 when 'interrupted' then 10 end $$;

-- Ends a started attempt without counting it: its message is made visible again after p_delay
-- seconds, the attempt is kept in the history with p_outcome ('deferred' or 'interrupted'), and
-- the task is queued with the same number of counted attempts. Past the bound of its outcome, or
-- with its message gone, the attempt is failed as a counted one (pgflow._task_failed) with the
-- reason, retried after the same delay while attempts remain. The caller holds the run's lock and
-- has checked that the attempt is the task's current, started one.
create or replace function pgflow._task_uncounted(
  p_task pgflow.step_tasks, p_outcome text, p_error text, p_stack text, p_delay integer
)
returns pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  task pgflow.step_tasks := p_task;
  so_far integer;
begin
  -- Counted in the history rather than on the task: it is only read here, on a path that is rare.
  select count(*) into so_far from pgflow.task_attempts a
  where a.run_id = task.run_id and a.step_slug = task.step_slug and a.task_index = task.task_index
    and a.outcome = p_outcome;
  if so_far >= pgflow._max_uncounted(p_outcome) then
    return pgflow._task_failed(task.run_id, task.step_slug, task.task_index,
      format('%s %s times, the most one task may be without it counting as a failed attempt; %s',
             p_outcome, so_far, p_error), p_delay, 'failed', p_stack);
  end if;
  perform 1 from pgmq.set_vt(task.queue_name, task.message_id, p_delay);
  if not found then
    -- _task_failed says why nothing can deliver a retry.
    return pgflow._task_failed(task.run_id, task.step_slug, task.task_index, p_error, p_delay,
                               'failed', p_stack);
  end if;
  perform pgflow._record_attempt(task, p_outcome, p_error, p_stack);
  update pgflow.step_tasks t
  set status = 'queued', uncounted_attempts = t.uncounted_attempts + 1, queued_at = now()
  where t.run_id = task.run_id and t.step_slug = task.step_slug and t.task_index = task.task_index
  returning * into task;
  return task;
end;
$$;
