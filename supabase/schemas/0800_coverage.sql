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
  -- Only the recently seen workers, read once by heartbeat range: not the whole worker history.
  with live as materialized (
    select w.queue_name, w.supported from pgflow._recent_workers(clock_timestamp() - stale_after) w
    where not w.deprecated
  ),
  needed as (
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
    select count(*) as live from live w
    where w.queue_name = n.queue_name
      and w.supported @> jsonb_build_array(jsonb_build_array(n.flow_slug, n.step_slug))
  ) w
  where queue_coverage.queue_name is null or n.queue_name = queue_coverage.queue_name
  order by n.queue_name, n.flow_slug, n.step_slug
$$;
