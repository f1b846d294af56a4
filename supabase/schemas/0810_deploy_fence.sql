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
  select array_agg(coalesce(quote_literal(f), 'NULL')) into busy
  from unnest(function_names) f where not pgflow.is_valid_function_name(f);
  if busy is not null then
    raise exception 'begin_deploy_fence: invalid function name(s) %', array_to_string(busy, ', ')
      using errcode = '22023', hint = 'use 1-128 letters, digits, "_" or "-" (the Edge Function''s name)';
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

-- Per fenced function: live workers, counting the deprecated ones that still drain (seen within
-- stale_after, pgflow._worker_seen; NULL, the default, is the live window, pgflow._live_window),
-- and started tasks held by its workers. drained = both are zero.
create or replace function pgflow.deploy_fence_status(fence_id bigint, stale_after interval default null)
returns table (function_name text, was_enabled boolean, enabled boolean, live_workers bigint, started_tasks bigint, drained boolean)
language sql
stable
set search_path = ''
as $$
  -- Only the recently seen workers, read once by heartbeat range: not the whole worker history.
  with recent as materialized (
    select w.function_name
    from pgflow._recent_workers(clock_timestamp() - coalesce(stale_after, pgflow._live_window())) w
  )
  select ff.function_name, ff.was_enabled, wf.enabled, lw.n, st.n, lw.n = 0 and st.n = 0
  from pgflow.deploy_fence_functions ff
  join pgflow.worker_functions wf on wf.function_name = ff.function_name
  cross join lateral (
    select count(*) as n from recent w where w.function_name = ff.function_name
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
