-- The worker registry: registration, heartbeat, stop and deprecation.

create or replace function pgflow.register_worker(
  worker_id uuid,
  queue_name text,
  function_name text,
  supported jsonb default '[]'::jsonb
)
returns pgflow.workers
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  result pgflow.workers;
  fn pgflow.worker_functions;
begin
  if register_worker.worker_id is null or register_worker.queue_name is null or register_worker.function_name is null then
    raise exception 'register_worker: worker_id, queue_name and function_name are required' using errcode = '22004';
  end if;
  if jsonb_typeof(supported) is distinct from 'array' then
    raise exception 'register_worker: supported must be a JSON array of [flow_slug, step_slug] pairs' using errcode = '22023';
  end if;
  insert into pgflow.worker_functions (function_name) values (register_worker.function_name)
  on conflict (function_name) do update set updated_at = now()
  returning * into fn;
  -- A disabled function (a deploy fence is in place) gets no new workers until its flag is restored.
  if not fn.enabled then
    raise exception 'worker function % is disabled; no new worker may register until it is enabled again', fn.function_name
      using errcode = '55000', hint = 'finish the deploy fence with pgflow.end_deploy_fence, or set worker_functions.enabled';
  end if;
  insert into pgflow.workers (worker_id, queue_name, function_name, supported, supported_keys)
  values (register_worker.worker_id, register_worker.queue_name, register_worker.function_name, register_worker.supported,
          pgflow._support_keys(register_worker.supported))
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
  -- A worker of a disabled function is deprecated too: it stops polling and drains.
  update pgflow.workers w
  set last_heartbeat_at = clock_timestamp(),
      deprecated_at = coalesce(w.deprecated_at, case when not fn.enabled then clock_timestamp() end)
  from pgflow.worker_functions fn
  where w.worker_id = heartbeat.worker_id and fn.function_name = w.function_name
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
