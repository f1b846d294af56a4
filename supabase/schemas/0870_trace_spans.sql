-- Run and step spans (docs/telemetry.md). A run and its steps outlive any process, so no span is
-- held open for them: once one has ended, the worker whose report ended it emits its span from the
-- rows' times. Two workers may settle the last tasks of a run at once; a row here says whose the
-- span is, so each is emitted once. Written only by workers that export spans: without telemetry
-- this table stays empty and nothing on the task path reads it.

create table if not exists pgflow.emitted_spans (
  run_id uuid not null,
  -- The step's slug, or '' for the run's own span (a slug is never empty).
  step_slug text not null,
  constraint emitted_spans_pkey primary key (run_id, step_slug),
  -- Pruning or deleting a run drops its markers with it.
  constraint emitted_spans_run_fkey foreign key (run_id) references pgflow.runs (run_id)
    on delete cascade
);

-- The spans reports may have ended, each returned to one caller only: for each (run_ids[i],
-- step_slugs[i]), that step once it is completed, failed, skipped or cancelled; and once the run
-- itself has ended, the run ('' as its step_slug) with every ended step of it not yet handed out
-- (steps skipped or cancelled without a report of their own). One call takes a worker's whole
-- batch of reports: one transaction, one commit. Times are microseconds since the epoch; a step
-- that never started (skipped, cancelled) starts when it ended.
create or replace function pgflow.claim_ended_spans(run_ids uuid[], step_slugs text[])
returns table (
  run_id uuid,
  step_slug text,
  status text,
  started_us bigint,
  ended_us bigint,
  flow_slug text,
  started_as text,
  traceparent text,
  tasks integer
)
language sql
volatile
set search_path = ''
as $$
  with reported as (
    select distinct u.run_id, u.step_slug
    from unnest(claim_ended_spans.run_ids, claim_ended_spans.step_slugs) as u (run_id, step_slug)
  ),
  run as (
    select r.run_id, r.flow_slug, r.status, r.started_as, r.traceparent, r.started_at,
           coalesce(r.completed_at, r.failed_at, r.cancelled_at) as ended_at
    from pgflow.runs r
    where r.run_id in (select reported.run_id from reported)
  ),
  ended as (
    select ss.run_id, ss.step_slug, ss.status,
           coalesce(ss.started_at, ss.completed_at, ss.failed_at, ss.skipped_at, ss.cancelled_at)
             as started_at,
           coalesce(ss.completed_at, ss.failed_at, ss.skipped_at, ss.cancelled_at) as ended_at,
           ss.initial_tasks
    from pgflow.step_states ss
    join run on run.run_id = ss.run_id
    where ss.status in ('completed', 'failed', 'skipped', 'cancelled')
      and (run.status <> 'started'
           or exists (select 1 from reported
                      where reported.run_id = ss.run_id and reported.step_slug = ss.step_slug))
    union all
    select run.run_id, '', run.status, run.started_at, run.ended_at, null
    from run
    where run.status <> 'started'
  ),
  claimed as (
    insert into pgflow.emitted_spans (run_id, step_slug)
    select e.run_id, e.step_slug from ended e where e.ended_at is not null
    on conflict on constraint emitted_spans_pkey do nothing
    returning emitted_spans.run_id, emitted_spans.step_slug
  )
  select e.run_id, e.step_slug, e.status,
         (extract(epoch from e.started_at) * 1000000)::bigint,
         (extract(epoch from e.ended_at) * 1000000)::bigint,
         run.flow_slug, run.started_as, run.traceparent, e.initial_tasks
  from ended e
  join claimed c on c.run_id = e.run_id and c.step_slug = e.step_slug
  join run on run.run_id = e.run_id
  -- A run's span after its steps': in one request, its children come first.
  order by e.run_id, e.step_slug = '', e.started_at;
$$;
