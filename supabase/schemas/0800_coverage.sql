-- The coverage check: per queue, the (flow, step) pairs that need a handler and whether a live
-- worker serves each. A point-in-time operator check, read-only; not a startup gate.
--
-- Pairs: every persisted route (any stored flow can be started), plus the pairs of tasks that are
-- still waiting (for capacity: counted with the queued ones, work like them), queued or started
-- in started runs (work waiting: snapshots never move, so the retries of
-- a route changed since still arrive on the queue the task was created for).
-- Live: a live worker on that queue (pgflow._worker_live: not stopped or deprecated, heartbeat
-- fresher than stale_after; NULL, the default, is the live window of 30 s, pgflow._live_window)
-- lists the pair in its support set.
-- Stale: a started task whose last worker is not seen any more (pgflow._worker_seen: heartbeat
-- older than stale_after, stopped, or no worker row names it); stalled recovery takes it back
-- after the step's timeout + 30 s. A deprecated worker still counts as seen: it finishes what it
-- holds.
-- Status, the first that applies (one place decides it, so the CLI, status and the dashboard agree):
--   MISSING  work waiting and no live worker serves the pair: nothing will run it;
--   STALE    a live worker serves the pair, but a started task is held by a worker that is gone;
--   PARTIAL  a live worker serves the pair, but not every live worker on the queue does: the
--            others read its messages too and hand them back (a moment of this is every deploy
--            that changes a handler set; left so, each of their reads is wasted). Give every
--            worker on a queue the same handler set;
--   ok       a live worker serves the pair (and every live worker on the queue does);
--   idle     a route with no work waiting and no live worker: nothing to do until a run starts.
create or replace function pgflow.queue_coverage(
  queue_name text default null,
  stale_after interval default null
)
returns table (
  queue_name text,
  flow_slug text,
  step_slug text,
  routed boolean,
  queued_tasks bigint,
  started_tasks bigint,
  stale_tasks bigint,
  live_workers bigint,
  served boolean,
  status text
)
language sql
stable
set search_path = ''
as $$
  -- Only the recently seen workers, read once by heartbeat range: not the whole worker history.
  with recent as materialized (
    select w.worker_id, w.queue_name, w.supported, w.live
    from pgflow._recent_workers(clock_timestamp() - coalesce(stale_after, pgflow._live_window())) w
  ),
  -- Work waiting, counted in one pass over the open tasks of started runs.
  work as (
    select t.queue_name, t.flow_slug, t.step_slug,
           count(*) filter (where t.status in ('queued', 'waiting')) as queued,
           count(*) filter (where t.status = 'started') as started,
           count(*) filter (where t.status = 'started' and not exists (
             select 1 from recent w where w.worker_id = t.last_worker_id)) as stale
    from pgflow.step_tasks t
    join pgflow.runs r on r.run_id = t.run_id
    where t.status in ('waiting', 'queued', 'started') and r.status = 'started'
      and (queue_coverage.queue_name is null or t.queue_name = queue_coverage.queue_name)
    group by t.queue_name, t.flow_slug, t.step_slug
  ),
  pairs as (
    select s.queue_name, s.flow_slug, s.step_slug from pgflow.steps s
    -- A step that waits in SQL (0280_events.sql) needs no handler and no worker.
    where s.kind = 'task' and (queue_coverage.queue_name is null or s.queue_name = queue_coverage.queue_name)
    union
    select k.queue_name, k.flow_slug, k.step_slug from work k
  ),
  counted as (
    select p.queue_name, p.flow_slug, p.step_slug,
           exists (select 1 from pgflow.steps s
                   where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug
                     and s.queue_name = p.queue_name) as routed,
           coalesce(k.queued, 0) as queued,
           coalesce(k.started, 0) as started,
           coalesce(k.stale, 0) as stale,
           (select count(*) from recent w
            where w.queue_name = p.queue_name and w.live
              and w.supported @> jsonb_build_array(jsonb_build_array(p.flow_slug, p.step_slug))) as live,
           (select count(*) from recent w where w.queue_name = p.queue_name and w.live) as on_queue
    from pairs p
    left join work k
      on k.queue_name = p.queue_name and k.flow_slug = p.flow_slug and k.step_slug = p.step_slug
  )
  select c.queue_name, c.flow_slug, c.step_slug, c.routed, c.queued, c.started, c.stale, c.live,
         c.live > 0,
         case when c.live = 0 and c.queued + c.started > 0 then 'MISSING'
              when c.stale > 0 then 'STALE'
              when c.live > 0 and c.live < c.on_queue then 'PARTIAL'
              when c.live > 0 then 'ok'
              else 'idle' end
  from counted c
  order by c.queue_name, c.flow_slug, c.step_slug
$$;
