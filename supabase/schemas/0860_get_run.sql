-- Reading a run: the run with every step's state, output and error as one JSON document, for the
-- client (src/client/) and for supabase-js (rpc('get_run', { run_id })). Null for an unknown run.
--
-- Timestamps are UTC text with microseconds ("2026-12-03T08:00:00.123456Z"): they sort as text
-- and keep the order of events that happened within one millisecond, which a JavaScript Date
-- would lose. Steps come in definition order, which puts every step after its dependencies.
--
-- security invoker: the caller needs select on pgflow.runs, step_states and steps (service_role
-- has it, see 0900_privileges); a wrapper for other roles decides which runs they may read
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
        'skipped_at', to_char(ss.skipped_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
      ) order by s.step_index)
      from pgflow.step_states ss
      join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
      where ss.run_id = r.run_id
    ), '[]'::jsonb)
  )
  from pgflow.runs r
  where r.run_id = get_run.run_id
$$;
