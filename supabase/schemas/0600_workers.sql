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
  fence record;
begin
  if register_worker.worker_id is null or register_worker.queue_name is null or register_worker.function_name is null then
    raise exception 'register_worker: worker_id, queue_name and function_name are required' using errcode = '22004';
  end if;
  if not pgflow.is_valid_function_name(register_worker.function_name) then
    raise exception 'register_worker: invalid function name %', quote_literal(register_worker.function_name)
      using errcode = '22023', hint = 'use 1-128 letters, digits, "_" or "-" (the Edge Function''s name)';
  end if;
  if jsonb_typeof(supported) is distinct from 'array' then
    raise exception 'register_worker: supported must be a JSON array of [flow_slug, step_slug] pairs' using errcode = '22023';
  end if;
  insert into pgflow.worker_functions (function_name) values (register_worker.function_name)
  on conflict (function_name) do update set updated_at = now()
  returning * into fn;
  -- A disabled function (a deploy fence is in place) gets no new workers until its flag is restored.
  -- The error names the open fence, so the operator who started a worker during a deploy knows
  -- which call ends it.
  if not fn.enabled then
    select f.fence_id, f.note into fence
    from pgflow.deploy_fence_functions ff join pgflow.deploy_fences f on f.fence_id = ff.fence_id
    where ff.function_name = fn.function_name and f.ended_at is null
    order by f.fence_id desc limit 1;
    if fence.fence_id is not null then
      raise exception 'worker function % is disabled by open deploy fence % (%); no new worker may register until it ends',
        fn.function_name, fence.fence_id, coalesce(fence.note, 'no note')
        using errcode = '55000',
          hint = format('once the old workers drained (select * from pgflow.deploy_fence_status(%s)), end it: select pgflow.end_deploy_fence(%s)', fence.fence_id, fence.fence_id);
    end if;
    raise exception 'worker function % is disabled (no deploy fence is open); no new worker may register until it is enabled again', fn.function_name
      using errcode = '55000',
        hint = format('enable it: update pgflow.worker_functions set enabled = true where function_name = %L', fn.function_name);
  end if;
  insert into pgflow.workers (worker_id, queue_name, function_name, supported, claim_visibility)
  values (register_worker.worker_id, register_worker.queue_name, register_worker.function_name, register_worker.supported,
          -- The steps' shared timeout + the claim margin, if they share one (NULL for none or
          -- several).
          (select case when count(distinct coalesce(s.opt_timeout, f.opt_timeout)) = 1
                       then min(coalesce(s.opt_timeout, f.opt_timeout)) + pgflow._claim_margin() end
           from jsonb_array_elements(register_worker.supported) e
           join pgflow.steps s on s.flow_slug = e ->> 0 and s.step_slug = e ->> 1
           join pgflow.flows f on f.flow_slug = s.flow_slug
           where jsonb_typeof(e) = 'array'))
  returning * into result;
  -- Every start adds a row; each registration also removes a bounded batch of expired ones, so the
  -- table stays about the size of the retention window without a scheduler.
  perform pgflow.prune_workers(100);
  return result;
end;
$$;

-- Records a heartbeat and tells the worker whether it has been deprecated (it should stop polling).
-- A worker id with no row fails with SQLSTATE PFW01, as in start_tasks.
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
      using errcode = 'PFW01', hint = 'register it with pgflow.register_worker first';
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

-- Deprecates every worker of a function that has not stopped, live or silent: they stop polling
-- and drain their in-flight tasks.
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

-- The workers seen since p_since (pgflow._worker_seen), and whether each is live
-- (pgflow._worker_live: not deprecated, so it takes new work): what the keep-alive, the coverage
-- check and the deploy fence's status read. plpgsql plans this with the actual p_since, so the
-- planner sees how few rows are that recent and reads them by heartbeat range
-- (workers_heartbeat_idx); a cutoff it cannot see (a parameter, clock_timestamp()) looks to it
-- like a third of the table, and it scanned every worker the database ever had instead.
create or replace function pgflow._recent_workers(p_since timestamptz)
returns table (worker_id uuid, queue_name text, function_name text, live boolean, supported jsonb)
language plpgsql
stable
set search_path = ''
as $$
begin
  return query
  select w.worker_id, w.queue_name, w.function_name, pgflow._worker_live(w, p_since), w.supported
  from pgflow.workers w
  where pgflow._worker_seen(w, p_since);
end;
$$;
