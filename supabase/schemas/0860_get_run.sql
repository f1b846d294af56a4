-- Reading a run: the run with every step's state, output, error and attempt history as one JSON
-- document, for the client (src/client/) and for supabase-js (rpc('get_run', { run_id })). Null for
-- an unknown run.
--
-- Timestamps are UTC text with microseconds ("2026-12-03T08:00:00.123456Z"): they sort as text
-- and keep the order of events that happened within one millisecond, which a JavaScript Date
-- would lose. Steps come in definition order, which puts every step after its dependencies.
--
-- security invoker: the caller needs select on pgflow.runs, step_states, steps, step_tasks,
-- task_attempts, concurrency_limits, rate_limits and rate_limit_windows, and execute on
-- waiting_reason, rate_waiting_reason, _waiting_why and _rate_recent (service_role has them, see
-- 0900_privileges); a wrapper for other roles decides which runs they may read
-- (docs/permissions.md).

create or replace function pgflow.get_run(run_id uuid)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'run_id', r.run_id,
    'flow_slug', r.flow_slug,
    'status', r.status,
    'input', r.input,
    'output', r.output,
    'error_message', r.error_message,
    'remaining_steps', r.remaining_steps,
    'started_at', to_char(r.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'completed_at', to_char(r.completed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'failed_at', to_char(r.failed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'cancelled_at', to_char(r.cancelled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'cancel_reason', r.cancel_reason,
    'restart_of_run_id', r.restart_of_run_id,
    'restart_mode', r.restart_mode,
    'started_as', r.started_as,
    -- The runs made from this one by retry_run or resume_run ("retried as …"), newest first, at
    -- most 20; list_runs lists them the same way. runs_restart_of_idx holds only restarts.
    'restarts', (select coalesce(jsonb_agg(jsonb_build_object('run_id', x.run_id, 'restart_mode', x.restart_mode,
                   'status', x.status, 'started_at', to_char(x.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                 order by x.started_at desc, x.run_id), '[]'::jsonb)
                 from (select * from pgflow.runs x2 where x2.restart_of_run_id = r.run_id
                       order by x2.started_at desc, x2.run_id limit 20) x),
    'steps', coalesce((
      select jsonb_agg(jsonb_build_object(
        'step_slug', ss.step_slug,
        'step_index', s.step_index,
        'step_type', s.step_type,
        'status', ss.status,
        'output', ss.output,
        'error_message', ss.error_message,
        'skip_reason', ss.skip_reason,
        'initial_tasks', ss.initial_tasks,
        'remaining_tasks', ss.remaining_tasks,
        'started_at', to_char(ss.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'completed_at', to_char(ss.completed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'failed_at', to_char(ss.failed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'skipped_at', to_char(ss.skipped_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'cancelled_at', to_char(ss.cancelled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'reused', ss.reused,
        -- A waiting step (0280_events.sql): the event it waits for ('' for a sleep), its
        -- correlation key and deadline; waiting since started_at. NULL for a task step.
        'kind', s.kind,
        'waiting_for', ss.waiting_for,
        'wait_key', ss.wait_key,
        'wait_until', to_char(ss.wait_until at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        -- Its tasks waiting for capacity or for a rate limit's window (flow control), per (scope,
        -- key), with the reason waiting_tasks gives: a waiting task has no message, so it is
        -- neither queued nor lost. Only a started step of a limited step can have any, so no
        -- other step reads its tasks.
        'waiting', case when ss.status = 'started'
                             and (s.concurrency_scope is not null or s.rate_scope is not null) then coalesce((
          select jsonb_agg(jsonb_build_object(
            'limit_scope', w.scope,
            'limit_key', w.key,
            'tasks', w.n,
            'since', to_char(w.oldest at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
            'in_flight', y.in_flight,
            'max_running', y.max_running,
            'reason', y.reason
          ) order by w.oldest, w.scope, w.key)
          from (select t.not_before is not null as rate,
                       case when t.not_before is not null then t.rate_scope else t.limit_scope end as scope,
                       case when t.not_before is not null then t.rate_key else t.limit_key end as key,
                       count(*) as n, min(t.queued_at) as oldest, min(t.not_before) as next_at
                from pgflow.step_tasks t
                where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.status = 'waiting'
                group by 1, 2, 3) w
          cross join lateral pgflow._waiting_why(w.rate, w.scope, w.key, w.next_at) y
        ), '[]'::jsonb) else '[]'::jsonb end,
        -- The attempts that ended other than by completing (the newest 100 of the step).
        'attempts', coalesce((
          select jsonb_agg(jsonb_build_object(
            'task_index', a.task_index,
            'attempt', a.attempt,
            'worker_id', a.worker_id,
            'started_at', to_char(a.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
            'ended_at', to_char(a.ended_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
            'outcome', a.outcome,
            'error_message', a.error_message,
            'error_stack', a.error_stack
          ) order by a.task_index, a.attempt)
          from (select * from pgflow.task_attempts a2
                where a2.run_id = ss.run_id and a2.step_slug = ss.step_slug
                order by a2.ended_at desc limit 100) a
        ), '[]'::jsonb)
      ) || case when s.kind = 'flow' then jsonb_build_object(
        -- A child-flow step (0290_child_flows.sql): the flow it runs and its child runs by task
        -- index (the first 1,000; with their status now).
        'child_flow', s.child_flow,
        'children', coalesce((
          select jsonb_agg(jsonb_build_object('task_index', t.task_index, 'run_id', t.child_run_id,
                                              'status', c.status) order by t.task_index)
          from (select * from pgflow.step_tasks t2
                where t2.run_id = ss.run_id and t2.step_slug = ss.step_slug and t2.child_run_id is not null
                order by t2.task_index limit 1000) t
          left join pgflow.runs c on c.run_id = t.child_run_id
        ), '[]'::jsonb)) else '{}'::jsonb end
      order by s.step_index)
      from pgflow.step_states ss
      join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
      where ss.run_id = r.run_id
    ), '[]'::jsonb)
  ) || case when r.parent_run_id is not null then jsonb_build_object(
    -- A child run (0290_child_flows.sql): the run, step and task waiting for it.
    'parent', jsonb_build_object('run_id', r.parent_run_id, 'step_slug', r.parent_step_slug,
                                 'task_index', r.parent_task_index)) else '{}'::jsonb end
  from pgflow.runs r
  where r.run_id = get_run.run_id
$$;

-- The same document as text: what the supabase-js client calls (rpc('get_run_text', { run_id })).
-- PostgREST answers with it as one JSON string, which supabase-js's JSON.parse reads exactly; the
-- document itself would be read by JSON.parse whole, and V8's can read an escaped key of an input
-- or output as another key, and rounds numbers beyond 2^53. The client reads the text with its
-- own exact parser. Null for an unknown run; security invoker, like get_run.
create or replace function pgflow.get_run_text(run_id uuid)
returns text
language sql
stable
set search_path = ''
as $$
  select pgflow.get_run(get_run_text.run_id)::text
$$;

-- Searching runs, newest first: by flow, status, start time, run id prefix and whether the run was
-- restarted (retried or resumed) already (each optional), at most max_rows (1 to 1,000). Each run
-- as a small JSON document (no input or output) with the runs made from it (restarts), times as
-- get_run writes them. security invoker, like get_run. flow_slug may name an alias: then the runs
-- of every version carrying it (an operator asking for "order" means the order flow, whichever
-- version ran, and however the run was started).
create or replace function pgflow.list_runs(
  flow_slug text default null,
  status text default null,
  since timestamptz default null,
  run_id_prefix text default null,
  max_rows integer default 50,
  restarted boolean default null
)
returns setof jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  slugs text[];
begin
  if list_runs.flow_slug is not null then
    slugs := array[list_runs.flow_slug]
      || array(select f.flow_slug from pgflow.flows f where f.alias = list_runs.flow_slug);
  end if;
  if max_rows is null or max_rows < 1 or max_rows > 1000 then
    raise exception 'list_runs: max_rows must be between 1 and 1000, got %', coalesce(max_rows::text, 'NULL')
      using errcode = '22023';
  end if;
  if list_runs.status is not null
     and list_runs.status not in ('started', 'completed', 'failed', 'cancelled') then
    raise exception 'list_runs: unknown status %', quote_literal(list_runs.status)
      using errcode = '22023', hint = 'a run is started, completed, failed or cancelled';
  end if;
  if run_id_prefix is not null and run_id_prefix !~ '^[0-9a-fA-F-]{1,36}$' then
    raise exception 'list_runs: run_id_prefix % is not the start of a run id', quote_literal(run_id_prefix)
      using errcode = '22023', hint = 'give hexadecimal digits and dashes, e.g. ''3f2a''';
  end if;
  return query
  select jsonb_build_object(
    'run_id', r.run_id,
    'flow_slug', r.flow_slug,
    'status', r.status,
    'started_at', to_char(r.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'completed_at', to_char(r.completed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'failed_at', to_char(r.failed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'cancelled_at', to_char(r.cancelled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'restart_of_run_id', r.restart_of_run_id,
    'restart_mode', r.restart_mode,
    'started_as', r.started_as,
    'error_message', r.error_message,
    -- As in get_run (not a shared function: the caller would need the right to execute it).
    'restarts', (select coalesce(jsonb_agg(jsonb_build_object('run_id', x.run_id, 'restart_mode', x.restart_mode,
                   'status', x.status, 'started_at', to_char(x.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                 order by x.started_at desc, x.run_id), '[]'::jsonb)
                 from (select * from pgflow.runs x2 where x2.restart_of_run_id = r.run_id
                       order by x2.started_at desc, x2.run_id limit 20) x)
  )
  from pgflow.runs r
  -- One probe of runs_restart_of_idx per run looked at, as the newest runs are read: written as
  -- a lateral join, because an EXISTS under the OR below would be planned as a hash of every
  -- restart ever made (tens of milliseconds with a long history).
  left join lateral (select true as yes from pgflow.runs x where x.restart_of_run_id = r.run_id limit 1) was
    on list_runs.restarted is not null
  where (slugs is null or r.flow_slug = any (slugs))
    and (list_runs.status is null or r.status = list_runs.status)
    and (since is null or r.started_at >= since)
    and (run_id_prefix is null or r.run_id::text like lower(run_id_prefix) || '%')
    and (list_runs.restarted is null or coalesce(was.yes, false) = list_runs.restarted)
  order by r.started_at desc, r.run_id
  limit max_rows;
end;
$$;
