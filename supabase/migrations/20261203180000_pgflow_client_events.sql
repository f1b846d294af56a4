-- client_events: the SQL side of the typed client (src/client/, docs/client.md).
--
-- - Run events: row-level triggers on pgflow.runs and pgflow.step_states, limited to status
--   changes, send a wake-up hint (pg_notify on channel pgflow_run:<run id>, payload the run id;
--   and realtime.send on the same private topic where Supabase Realtime is installed). No body,
--   input, output or error is ever put in a notification.
-- - pgflow.get_run(run_id): the run with every step's state, output and error as one JSON
--   document; executable by service_role.
--
-- Existing data is not touched. Creating the triggers takes a short SHARE ROW EXCLUSIVE lock on
-- pgflow.runs and pgflow.step_states (it waits for running transactions that write them, at most
-- lock_timeout); no table is rewritten.
--
-- Changes:
-- - create function pgflow._broadcast_run(p_run_id uuid)
-- - create function pgflow._run_changed()
-- - create function pgflow.get_run(run_id uuid)
-- - create trigger pgflow.runs.runs_inserted_notify
-- - create trigger pgflow.runs.runs_status_notify
-- - create trigger pgflow.step_states.step_states_status_notify
-- - privileges on function pgflow._broadcast_run(p_run_id uuid)
-- - privileges on function pgflow._run_changed()
-- - privileges on function pgflow.get_run(run_id uuid)
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if exists (select 1 from pgflow.migrations m where m.name = '20261203180000_pgflow_client_events') then
    raise exception 'pgflow migration 20261203180000_pgflow_client_events is already applied to this database; nothing was changed'
      using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
  end if;
end
$$;

set local lock_timeout = '5s';

-- ---- schemas/0850_run_events.sql: pgflow._broadcast_run(p_run_id uuid)
-- Run events: a change of a run's or a step's status wakes whoever watches that run.
--
-- A notification is a wake-up hint, not the event itself: clients read the run with
-- pgflow.get_run and build their events by comparing what they saw before with what they see now
-- (src/client/), so a lost notification, a reconnect or a late subscriber only delays an event,
-- never loses it. That is why the payload is just the run id and never holds inputs, outputs or
-- errors (pg_notify payloads are limited to 8000 bytes, and a listener needs nothing else).
--
-- One channel per run, pgflow_run:<uuid> (47 bytes, under the 63-byte limit on channel names): a
-- client that waits for one run hears only that run, not every run of the database. Postgres
-- delivers identical notifications (same channel, same payload) once per transaction, so a
-- transaction that moves a run through several states (complete_task: the step completes, its
-- dependents start, the run completes) sends one notification for it.
--
-- Where Supabase Realtime is installed (realtime.send exists, looked up on every call so a project
-- that adds Realtime later needs no migration), the same hint is broadcast on the private topic
-- pgflow_run:<uuid>, once per run per transaction.
--
-- Row-level triggers limited to the status column (`update of status`) with a `when` clause that
-- Postgres evaluates without calling any function: the function runs only for a real status
-- change (about three times per step), never for the counters the hot path decrements on every
-- task (remaining_tasks, remaining_deps, remaining_steps). Measured against statement-level
-- triggers with transition tables, which fire for every statement that touches the tables and
-- copy their rows: those cost about twice as much (bench/trigger_cost.ts, bench/results.md).

-- Broadcasts a run's hint through Supabase Realtime, once per transaction.
create or replace function pgflow._broadcast_run(p_run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  sent text;
begin
  if to_regprocedure('realtime.send(jsonb, text, text, boolean)') is null then
    return;
  end if;
  -- realtime.send inserts a message each time it is called: remember (for this transaction only)
  -- which runs were announced already.
  sent := coalesce(current_setting('pgflow.realtime_sent', true), '');
  if position(p_run_id::text in sent) > 0 then
    return;
  end if;
  perform realtime.send(jsonb_build_object('run_id', p_run_id), 'run_changed', 'pgflow_run:' || p_run_id::text, true);
  perform set_config('pgflow.realtime_sent', sent || p_run_id::text || ',', true);
end;
$$;

-- ---- schemas/0850_run_events.sql: pgflow._run_changed()
create or replace function pgflow._run_changed()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform pg_notify('pgflow_run:' || new.run_id::text, new.run_id::text);
  -- A schema lookup in the syscache: the common case (no Realtime) costs nothing more.
  if to_regnamespace('realtime') is not null then
    perform pgflow._broadcast_run(new.run_id);
  end if;
  return null;
end;
$$;

-- ---- schemas/0860_get_run.sql: pgflow.get_run(run_id uuid)
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

-- ---- trigger pgflow.runs.runs_inserted_notify
CREATE TRIGGER runs_inserted_notify AFTER INSERT ON pgflow.runs FOR EACH ROW EXECUTE FUNCTION pgflow._run_changed();

-- ---- trigger pgflow.runs.runs_status_notify
CREATE TRIGGER runs_status_notify AFTER UPDATE OF status ON pgflow.runs FOR EACH ROW WHEN ((old.status IS DISTINCT FROM new.status)) EXECUTE FUNCTION pgflow._run_changed();

-- ---- trigger pgflow.step_states.step_states_status_notify
CREATE TRIGGER step_states_status_notify AFTER UPDATE OF status ON pgflow.step_states FOR EACH ROW WHEN ((old.status IS DISTINCT FROM new.status)) EXECUTE FUNCTION pgflow._run_changed();

-- ---- privileges on function pgflow._broadcast_run(p_run_id uuid)
revoke all on function pgflow._broadcast_run(p_run_id uuid) from public;

-- ---- privileges on function pgflow._run_changed()
revoke all on function pgflow._run_changed() from public;

-- ---- privileges on function pgflow.get_run(run_id uuid)
revoke all on function pgflow.get_run(run_id uuid) from public;
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'service_role') then
    grant execute on function pgflow.get_run(run_id uuid) to service_role;
  end if;
end
$$;

insert into pgflow.migrations (name) values ('20261203180000_pgflow_client_events') on conflict (name) do nothing;

commit;
