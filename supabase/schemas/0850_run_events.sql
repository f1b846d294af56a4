-- Run events: a change of a run's or a step's status wakes whoever watches that run.
--
-- A notification is a wake-up hint, not the event itself: clients read the run with
-- pgflow.get_run and build their events by comparing what they saw before with what they see now
-- (src/client/), so a lost notification, a reconnect or a late subscriber only delays an event,
-- never loses it. That is why the payload is just the run id and never holds inputs, outputs or
-- errors (pg_notify payloads are limited to 8000 bytes, and a listener needs nothing else).
--
-- Only while someone waits for that run (a session registered with pgflow.listen_start, see
-- 0045_listeners.sql): a NOTIFY makes the commit wait for a lock held across every other
-- notifying commit of the server, and most runs have no watcher. A plain LISTEN, without
-- listen_start, hears nothing.
--
-- One channel per run, pgflow_run:<uuid> (47 bytes, under the 63-byte limit on channel names): a
-- client that waits for one run hears only that run, not every run of the database. Postgres
-- delivers identical notifications (same channel, same payload) once per transaction, so a
-- transaction that moves a run through several states (complete_task: the step completes, its
-- dependents start, the run completes) sends one notification for it.
--
-- Where Supabase Realtime is installed (realtime.send exists and is the platform's own, checked on
-- every call by pgflow._trusted_integration so a project that adds Realtime later needs no
-- migration, and a function merely planted under that name is never called), the same hint is
-- broadcast on the private topic pgflow_run:<uuid>, once per run per transaction.
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
  -- realtime.send inserts a message each time it is called: remember (for this transaction only)
  -- which runs were announced already. A session could forge this setting, but that only silences
  -- its own broadcasts; it is never taken as proof that realtime.send may be called.
  sent := coalesce(current_setting('pgflow.realtime_sent', true), '');
  if position(p_run_id::text in sent) > 0 then
    return;
  end if;
  if not pgflow._trusted_integration('realtime') then
    return;
  end if;
  -- Arguments of exactly the verified signature's types: an exact match is always the function
  -- chosen, whatever other overloads the schema holds.
  perform realtime.send(jsonb_build_object('run_id', p_run_id), 'run_changed'::text,
    ('pgflow_run:' || p_run_id::text)::text, true);
  perform set_config('pgflow.realtime_sent', sent || p_run_id::text || ',', true);
end;
$$;

create or replace function pgflow._run_changed()
returns trigger
language plpgsql
volatile
-- Decides as pgflow._announce does (pgflow._notify_needed, inlined) rather than calling it: this
-- fires about twice per task (a step's status, then the run's), and a nested call of a function
-- with its own settings costs a quarter of what the whole trigger does. security definer for the
-- same reason as _announce: it reads pgflow.listeners whichever role changed the run.
security definer
set search_path = ''
as $$
declare
  run_channel text := 'pgflow_run:' || new.run_id::text;
begin
  if (select n from pgflow._notify_needed(run_channel) n) then
    perform pg_notify(run_channel, new.run_id::text);
  end if;
  -- A schema lookup in the syscache: the common case (no Realtime) costs nothing more.
  if to_regnamespace('realtime') is not null then
    perform pgflow._broadcast_run(new.run_id);
  end if;
  return null;
end;
$$;

create or replace trigger runs_inserted_notify
  after insert on pgflow.runs
  for each row execute function pgflow._run_changed();

create or replace trigger runs_status_notify
  after update of status on pgflow.runs
  for each row when (old.status is distinct from new.status)
  execute function pgflow._run_changed();

create or replace trigger step_states_status_notify
  after update of status on pgflow.step_states
  for each row when (old.status is distinct from new.status)
  execute function pgflow._run_changed();
