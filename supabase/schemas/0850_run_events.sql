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
-- Where Supabase Realtime is installed (realtime.send exists, checked on every call so a project
-- that adds Realtime later needs no migration), the same hint is broadcast on the private topic
-- pgflow_run:<uuid>, once per run per transaction.

create or replace function pgflow._notify_runs(p_run_ids uuid[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  id uuid;
  realtime boolean;
  sent text;
begin
  if coalesce(cardinality(p_run_ids), 0) = 0 then
    return;
  end if;
  realtime := to_regprocedure('realtime.send(jsonb, text, text, boolean)') is not null;
  foreach id in array p_run_ids loop
    perform pg_notify('pgflow_run:' || id::text, id::text);
    if realtime then
      -- realtime.send inserts a message each time it is called: remember (for this transaction
      -- only) which runs were announced already.
      sent := coalesce(current_setting('pgflow.realtime_sent', true), '');
      if position(id::text in sent) = 0 then
        perform realtime.send(jsonb_build_object('run_id', id), 'run_changed', 'pgflow_run:' || id::text, true);
        perform set_config('pgflow.realtime_sent', sent || id::text || ',', true);
      end if;
    end if;
  end loop;
end;
$$;

-- Statement-level triggers with transition tables: one call per statement whatever the number of
-- rows (complete_tasks completes a batch of tasks in one statement), and only rows whose status
-- changed count (decrementing remaining_deps or remaining_tasks is not an event).
create or replace function pgflow._run_status_changed()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
begin
  if tg_op = 'INSERT' then
    perform pgflow._notify_runs(array(select n.run_id from new_rows n));
  else
    perform pgflow._notify_runs(array(
      select n.run_id from new_rows n join old_rows o on o.run_id = n.run_id
      where n.status is distinct from o.status));
  end if;
  return null;
end;
$$;

create or replace function pgflow._step_status_changed()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform pgflow._notify_runs(array(
    select distinct n.run_id from new_rows n
    join old_rows o on o.run_id = n.run_id and o.step_slug = n.step_slug
    where n.status is distinct from o.status));
  return null;
end;
$$;

create or replace trigger runs_inserted_notify
  after insert on pgflow.runs
  referencing new table as new_rows
  for each statement execute function pgflow._run_status_changed();

create or replace trigger runs_updated_notify
  after update on pgflow.runs
  referencing old table as old_rows new table as new_rows
  for each statement execute function pgflow._run_status_changed();

create or replace trigger step_states_updated_notify
  after update on pgflow.step_states
  referencing old table as old_rows new table as new_rows
  for each statement execute function pgflow._step_status_changed();
