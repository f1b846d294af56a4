-- Operator tools: the coverage check (queue_coverage), the deploy fence (begin/end_deploy_fence,
-- deploy_fence_status) and the keep-alive (ensure_workers, schedule_maintenance). Workers now
-- record their support set, and a disabled worker function can register no new worker.
set local lock_timeout = '5s';

alter table pgflow.workers add column if not exists supported jsonb not null default '[]'::jsonb;

-- ---- schemas/0060_deploy_fences.sql
-- The deploy fence: replacing a complete set of worker functions in place. A fence records each
-- function's enabled flag before disabling it, so ending the fence restores exactly what was there
-- (a function an operator had disabled on purpose stays disabled).

create table if not exists pgflow.deploy_fences (
  fence_id bigint generated always as identity,
  note text,
  started_at timestamptz not null default now(),
  ended_at timestamptz,
  constraint deploy_fences_pkey primary key (fence_id)
);

create table if not exists pgflow.deploy_fence_functions (
  fence_id bigint not null,
  function_name text not null,
  was_enabled boolean not null,
  constraint deploy_fence_functions_pkey primary key (fence_id, function_name),
  constraint deploy_fence_functions_fence_fkey foreign key (fence_id) references pgflow.deploy_fences (fence_id),
  constraint deploy_fence_functions_function_fkey foreign key (function_name) references pgflow.worker_functions (function_name)
);

-- register_worker gains the support set; the old three-argument form goes (callers that pass
-- three arguments get the new default).
drop function if exists pgflow.register_worker(uuid, text, text);

-- ---- schemas/0600_workers.sql
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
  insert into pgflow.workers (worker_id, queue_name, function_name, supported)
  values (register_worker.worker_id, register_worker.queue_name, register_worker.function_name, register_worker.supported)
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

-- ---- schemas/0800_coverage.sql
-- The coverage check: per queue, the (flow, step) pairs that need a handler and whether a live
-- worker serves each. A point-in-time operator check, read-only; not a startup gate.
--
-- Needed pairs: every persisted route (any stored flow can be started), plus the pairs of tasks
-- that are still queued or started in started runs (work that will reach the queue's workers).
-- Served: a worker on that queue, not stopped or deprecated, whose heartbeat is fresher than
-- stale_after, lists the pair in its support set.
create or replace function pgflow.queue_coverage(
  queue_name text default null,
  stale_after interval default '30 seconds'
)
returns table (
  queue_name text,
  flow_slug text,
  step_slug text,
  routed boolean,
  queued_tasks bigint,
  started_tasks bigint,
  live_workers bigint,
  served boolean
)
language sql
stable
set search_path = ''
as $$
  with needed as (
    select s.queue_name, s.flow_slug, s.step_slug from pgflow.steps s
    union
    select t.queue_name, t.flow_slug, t.step_slug
    from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
    where t.status in ('queued', 'started') and r.status = 'started'
  )
  select n.queue_name, n.flow_slug, n.step_slug,
         exists (select 1 from pgflow.steps s
                 where s.flow_slug = n.flow_slug and s.step_slug = n.step_slug and s.queue_name = n.queue_name),
         (select count(*) from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
          where t.queue_name = n.queue_name and t.flow_slug = n.flow_slug and t.step_slug = n.step_slug
            and t.status = 'queued' and r.status = 'started'),
         (select count(*) from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
          where t.queue_name = n.queue_name and t.flow_slug = n.flow_slug and t.step_slug = n.step_slug
            and t.status = 'started' and r.status = 'started'),
         w.live,
         w.live > 0
  from needed n
  cross join lateral (
    select count(*) as live from pgflow.workers w
    where w.queue_name = n.queue_name and w.stopped_at is null and w.deprecated_at is null
      and w.last_heartbeat_at > clock_timestamp() - stale_after
      and w.supported @> jsonb_build_array(jsonb_build_array(n.flow_slug, n.step_slug))
  ) w
  where queue_coverage.queue_name is null or n.queue_name = queue_coverage.queue_name
  order by n.queue_name, n.flow_slug, n.step_slug
$$;

-- ---- schemas/0810_deploy_fence.sql
-- Deploy fence helpers. The procedure (docs/operations.md): begin the fence for the complete set of
-- functions being replaced → wait until deploy_fence_status says drained → deploy registries that
-- carry both old and new flow versions while old runs drain → end the fence.

-- Records the functions' enabled flags, disables them and deprecates their workers (they stop
-- polling and finish what they hold). Returns the fence id.
create or replace function pgflow.begin_deploy_fence(function_names text[], note text default null)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  fence bigint;
  busy text[];
begin
  if function_names is null or cardinality(function_names) = 0 then
    raise exception 'begin_deploy_fence: name at least one worker function' using errcode = '22023';
  end if;
  -- Functions never registered yet get a row, so the fence also keeps them from registering.
  insert into pgflow.worker_functions (function_name)
  select distinct f from unnest(function_names) f
  on conflict (function_name) do nothing;
  perform 1 from pgflow.worker_functions wf where wf.function_name = any (function_names)
  order by wf.function_name for update;

  select array_agg(distinct ff.function_name order by ff.function_name) into busy
  from pgflow.deploy_fence_functions ff join pgflow.deploy_fences f on f.fence_id = ff.fence_id
  where f.ended_at is null and ff.function_name = any (function_names);
  if busy is not null then
    raise exception 'begin_deploy_fence: % already inside an open deploy fence', busy
      using errcode = '55000', hint = 'end that fence first (pgflow.end_deploy_fence)';
  end if;

  insert into pgflow.deploy_fences (note) values (note) returning fence_id into fence;
  insert into pgflow.deploy_fence_functions (fence_id, function_name, was_enabled)
  select fence, wf.function_name, wf.enabled
  from pgflow.worker_functions wf where wf.function_name = any (function_names);
  update pgflow.worker_functions wf set enabled = false, updated_at = now()
  where wf.function_name = any (function_names);
  update pgflow.workers w set deprecated_at = clock_timestamp()
  where w.function_name = any (function_names) and w.deprecated_at is null and w.stopped_at is null;
  return fence;
end;
$$;

-- Per fenced function: live workers (fresh heartbeat, not stopped) and started tasks held by its
-- workers. drained = both are zero.
create or replace function pgflow.deploy_fence_status(fence_id bigint, stale_after interval default '30 seconds')
returns table (function_name text, was_enabled boolean, enabled boolean, live_workers bigint, started_tasks bigint, drained boolean)
language sql
stable
set search_path = ''
as $$
  select ff.function_name, ff.was_enabled, wf.enabled, lw.n, st.n, lw.n = 0 and st.n = 0
  from pgflow.deploy_fence_functions ff
  join pgflow.worker_functions wf on wf.function_name = ff.function_name
  cross join lateral (
    select count(*) as n from pgflow.workers w
    where w.function_name = ff.function_name and w.stopped_at is null
      and w.last_heartbeat_at > clock_timestamp() - stale_after
  ) lw
  cross join lateral (
    select count(*) as n from pgflow.step_tasks t join pgflow.workers w on w.worker_id = t.last_worker_id
    where w.function_name = ff.function_name and t.status = 'started'
  ) st
  where ff.fence_id = deploy_fence_status.fence_id
  order by ff.function_name
$$;

-- Restores exactly the recorded enabled flags and closes the fence.
create or replace function pgflow.end_deploy_fence(fence_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
begin
  update pgflow.deploy_fences f set ended_at = now()
  where f.fence_id = end_deploy_fence.fence_id and f.ended_at is null;
  if not found then
    raise exception 'deploy fence % does not exist or has already ended', end_deploy_fence.fence_id
      using errcode = '22023';
  end if;
  update pgflow.worker_functions wf set enabled = ff.was_enabled, updated_at = now()
  from pgflow.deploy_fence_functions ff
  where ff.fence_id = end_deploy_fence.fence_id and wf.function_name = ff.function_name;
end;
$$;

-- ---- schemas/0820_ensure_workers.sql
-- The keep-alive. Picks the enabled worker functions that have no live worker and whose debounce
-- has passed, records the invocation, and (where Supabase provides pg_net and the project URL is
-- in Vault) pings each function over HTTP so it starts a worker. A disabled function is never
-- pinged: that is what keeps a deploy fence closed.
create or replace function pgflow.ensure_workers()
returns table (function_name text, pinged boolean)
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  fn record;
  base_url text;
  auth text;
  can_ping boolean := to_regproc('net.http_post') is not null and to_regclass('vault.decrypted_secrets') is not null;
begin
  if can_ping then
    execute $q$select max(decrypted_secret) filter (where name = 'supabase_project_url'),
                      coalesce(max(decrypted_secret) filter (where name = 'pgflow_auth_secret'),
                               max(decrypted_secret) filter (where name = 'supabase_service_role_key'))
               from vault.decrypted_secrets$q$ into base_url, auth;
    can_ping := base_url is not null and auth is not null;
  end if;
  for fn in
    update pgflow.worker_functions wf set last_invoked_at = now()
    where wf.enabled
      and (wf.last_invoked_at is null or wf.last_invoked_at < now() - wf.debounce)
      and not exists (
        select 1 from pgflow.workers w
        where w.function_name = wf.function_name and w.stopped_at is null and w.deprecated_at is null
          and w.last_heartbeat_at > clock_timestamp() - wf.debounce)
    returning wf.function_name
  loop
    if can_ping then
      execute 'select net.http_post(url => $1, headers => $2, body => ''{}''::jsonb)'
      using rtrim(base_url, '/') || '/functions/v1/' || fn.function_name,
            jsonb_build_object('Content-Type', 'application/json', 'Authorization', 'Bearer ' || auth);
    end if;
    function_name := fn.function_name;
    pinged := can_ping;
    return next;
  end loop;
end;
$$;

-- Schedules ensure_workers and requeue_stalled_tasks with pg_cron (Supabase has it; elsewhere the
-- worker's own periodic recovery and an external keep-alive do the same job).
create or replace function pgflow.schedule_maintenance(keep_alive interval default '5 seconds')
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if to_regproc('cron.schedule') is null then
    raise exception 'pg_cron is not installed' using errcode = '0A000',
      hint = 'enable pg_cron, or call pgflow.ensure_workers() from an external scheduler';
  end if;
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_ensure_workers', extract(epoch from keep_alive)::integer || ' seconds', 'select pgflow.ensure_workers()';
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_requeue_stalled_tasks', '15 seconds', 'select pgflow.requeue_stalled_tasks()';
end;
$$;

-- ---- schemas/0900_privileges.sql
-- No pgflow function is executable by PUBLIC (and so by anon or authenticated on Supabase); the
-- service role and postgres own the engine. Grants, where needed, are documented and explicit.
revoke execute on all functions in schema pgflow from public;

