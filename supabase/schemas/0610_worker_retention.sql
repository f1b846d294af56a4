-- Worker retention. Every worker start adds a row to pgflow.workers (an Edge isolate lives a few
-- minutes), so rows of workers that stopped or went silent are deleted once they are older than the
-- retention: a bounded batch at every registration, or all at once with prune_workers(). A worker
-- that still holds a started task is kept whatever its age: deploy_fence_status counts those tasks
-- by worker, and stalled recovery has not taken them back yet.

-- How long a stopped or silent worker's row is kept: the 'worker_retention' setting, else 7 days.
create or replace function pgflow.worker_retention()
returns interval
language sql
stable
set search_path = ''
as $$
  select coalesce((select (s.value #>> '{}')::interval from pgflow.settings s where s.key = 'worker_retention'),
                  interval '7 days')
$$;

-- Sets the retention (NULL: back to the default). At least one hour, far beyond the live window
-- (pgflow._live_window): a live worker heartbeats every few seconds, so only a worker that is long
-- gone can look that old.
create or replace function pgflow.set_worker_retention(retention interval)
returns interval
language plpgsql
volatile
set search_path = ''
as $$
begin
  if retention is null then
    delete from pgflow.settings s where s.key = 'worker_retention';
  elsif retention < interval '1 hour' then
    raise exception 'set_worker_retention: retention must be at least 1 hour, got %', retention
      using errcode = '22023', hint = 'a live worker heartbeats every few seconds; keep stopped workers for hours or days';
  else
    insert into pgflow.settings (key, value) values ('worker_retention', to_jsonb(retention::text))
    on conflict (key) do update set value = excluded.value, updated_at = now();
  end if;
  return pgflow.worker_retention();
end;
$$;

-- Deletes up to max_rows workers (NULL: all) whose last heartbeat and stop are older than the
-- retention and that hold no started task; returns how many. Rows another session is deleting
-- are skipped, so concurrent registrations never wait on each other here.
create or replace function pgflow.prune_workers(max_rows integer default null)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  cutoff timestamptz := now() - pgflow.worker_retention();
  deleted integer;
begin
  if max_rows is not null and max_rows < 1 then
    raise exception 'prune_workers: max_rows must be at least 1 or NULL (all), got %', max_rows
      using errcode = '22023';
  end if;
  with doomed as (
    select w.worker_id from pgflow.workers w
    where w.last_heartbeat_at < cutoff
      and (w.stopped_at is null or w.stopped_at < cutoff)
      and not exists (select 1 from pgflow.step_tasks t
                      where t.last_worker_id = w.worker_id and t.status = 'started')
    order by w.last_heartbeat_at
    limit max_rows
    for update skip locked
  ), gone as (
    delete from pgflow.workers w using doomed d where w.worker_id = d.worker_id returning 1
  )
  select count(*)::integer into deleted from gone;
  return deleted;
end;
$$;
