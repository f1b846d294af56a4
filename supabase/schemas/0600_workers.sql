-- The worker registry: registration, heartbeat, stop and deprecation.

create or replace function pgflow.register_worker(worker_id uuid, queue_name text, function_name text)
returns pgflow.workers
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  result pgflow.workers;
begin
  if register_worker.worker_id is null or register_worker.queue_name is null or register_worker.function_name is null then
    raise exception 'register_worker: worker_id, queue_name and function_name are required' using errcode = '22004';
  end if;
  insert into pgflow.worker_functions (function_name) values (register_worker.function_name)
  on conflict (function_name) do update set updated_at = now();
  insert into pgflow.workers (worker_id, queue_name, function_name)
  values (register_worker.worker_id, register_worker.queue_name, register_worker.function_name)
  returning * into result;
  return result;
end;
$$;

-- Records a heartbeat and tells the worker whether it has been deprecated (it should stop polling).
create or replace function pgflow.heartbeat(worker_id uuid)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  deprecated boolean;
begin
  update pgflow.workers w set last_heartbeat_at = clock_timestamp()
  where w.worker_id = heartbeat.worker_id
  returning w.deprecated_at is not null into deprecated;
  if not found then
    raise exception 'worker % is not registered', heartbeat.worker_id
      using errcode = '22023', hint = 'register it with pgflow.register_worker first';
  end if;
  return deprecated;
end;
$$;

create or replace function pgflow.mark_worker_stopped(worker_id uuid)
returns void
language sql
volatile
set search_path = ''
as $$
  update pgflow.workers w set stopped_at = coalesce(w.stopped_at, clock_timestamp())
  where w.worker_id = mark_worker_stopped.worker_id
$$;

-- Deprecates every live worker of a function: they stop polling and drain their in-flight tasks.
create or replace function pgflow.deprecate_workers(function_name text)
returns integer
language sql
volatile
set search_path = ''
as $$
  with deprecated as (
    update pgflow.workers w set deprecated_at = clock_timestamp()
    where w.function_name = deprecate_workers.function_name
      and w.deprecated_at is null and w.stopped_at is null
    returning 1
  )
  select count(*)::integer from deprecated
$$;
