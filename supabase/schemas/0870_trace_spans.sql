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

-- One ended span, as claim_ended_spans and sweep_ended_spans hand it out: the step's, or the run's
-- ('' as its step_slug); its times in microseconds since the epoch; the run's flow, alias and
-- traceparent; the step's task count (null for the run).
do $$
begin
  create type pgflow.ended_span as (
    run_id uuid,
    step_slug text,
    status text,
    started_us bigint,
    ended_us bigint,
    flow_slug text,
    started_as text,
    traceparent text,
    tasks integer
  );
exception when duplicate_object then
  null;
end
$$;

-- The spans reports may have ended, each returned to one caller only: for each (run_ids[i],
-- step_slugs[i]), that step once it is completed, failed, skipped or cancelled; and once the run
-- itself has ended, the run ('' as its step_slug) with every ended step of it not yet handed out
-- (steps skipped or cancelled without a report of their own). One call takes a worker's whole
-- batch of reports: one transaction, one commit. Times are microseconds since the epoch; a step
-- that never started (skipped, cancelled) starts when it ended.
create or replace function pgflow.claim_ended_spans(run_ids uuid[], step_slugs text[])
returns setof pgflow.ended_span
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

-- Runs end without any worker's report too: cancel_run (and its child runs with it), stalled
-- recovery failing a run, a wait timing out in the tick, an event or a child run completing the
-- last step. Their spans are found by a sweep that workers exporting spans call on a timer: it
-- walks the runs by start time, a bounded page per call, and claims through claim_ended_spans the
-- ended runs whose span nobody took. One row, shared by every worker, so the pages of a pass are
-- not walked once per worker.
create table if not exists pgflow.span_sweep (
  only_row boolean not null default true,
  -- When the first sweep ran: runs that ended before it are not the sweep's, so turning spans on
  -- does not send the spans of a backlog of old runs.
  since timestamptz not null default now(),
  -- Where the current pass stopped, by (started_at, run_id); null: the next call starts a pass.
  scanned_at timestamptz,
  scanned_run uuid,
  constraint span_sweep_pkey primary key (only_row),
  constraint span_sweep_one_row check (only_row),
  constraint span_sweep_cursor_whole check ((scanned_at is null) = (scanned_run is null))
);

-- One page of the sweep: looks at up to max_scanned runs started within horizon, after where the
-- last call stopped (the runs_started_at_idx index; no index on the end times, which every run's
-- end would pay for with telemetry off), and claims the spans of the ended ones not yet emitted,
-- with their ended steps not yet emitted. At the newest run the pass ends and the next call starts
-- over: a run that was still started when a pass saw it is found by the next pass. A caller that
-- finds another one sweeping returns nothing at once (skip locked) rather than waiting.
create or replace function pgflow.sweep_ended_spans(
  max_scanned integer default 1000,
  horizon interval default '7 days'
)
returns setof pgflow.ended_span
language plpgsql
volatile
set search_path = ''
-- The page's bounds change every call; a generic plan, made for unknown bounds, took 37.5 ms a call
-- against 7.8 ms with 200,000 runs kept (bench/telemetry_sweep.ts).
set plan_cache_mode = force_custom_plan
as $$
declare
  sweep pgflow.span_sweep;
  scanned integer;
  due uuid[];
  last_at timestamptz;
  last_run uuid;
begin
  if max_scanned is null or max_scanned not between 1 and 100000 then
    raise exception 'max_scanned must be between 1 and 100000, got %', coalesce(max_scanned::text, 'NULL')
      using errcode = '22023', hint = 'pass a page size such as 1000';
  end if;
  if horizon is null or horizon <= interval '0' then
    raise exception 'horizon must be a positive interval, got %', coalesce(horizon::text, 'NULL')
      using errcode = '22023', hint = 'pass how far back runs may have started, such as ''7 days''';
  end if;
  select * into sweep from pgflow.span_sweep for update skip locked;
  if not found then
    -- Locked by another sweeper (inserting now would wait for it), or the very first sweep.
    perform 1 from pgflow.span_sweep;
    if found then
      return;
    end if;
    insert into pgflow.span_sweep (only_row) values (true)
    on conflict on constraint span_sweep_pkey do nothing;
    select * into sweep from pgflow.span_sweep for update skip locked;
    if not found then
      return;
    end if;
  end if;

  with page as (
    select r.run_id, r.started_at, r.status,
           coalesce(r.completed_at, r.failed_at, r.cancelled_at) as ended_at
    from pgflow.runs r
    where r.started_at >= greatest(sweep.scanned_at, now() - horizon)
      and (sweep.scanned_at is null or (r.started_at, r.run_id) > (sweep.scanned_at, sweep.scanned_run))
    order by r.started_at, r.run_id
    limit max_scanned
  )
  select count(*)::integer,
         coalesce(array_agg(p.run_id) filter (
           where p.status <> 'started' and p.ended_at >= sweep.since
             and not exists (select 1 from pgflow.emitted_spans e
                             where e.run_id = p.run_id and e.step_slug = '')), '{}'),
         (array_agg(p.started_at order by p.started_at desc, p.run_id desc))[1],
         (array_agg(p.run_id order by p.started_at desc, p.run_id desc))[1]
  into scanned, due, last_at, last_run
  from page p;

  update pgflow.span_sweep s
  set scanned_at = case when scanned < max_scanned then null else last_at end,
      scanned_run = case when scanned < max_scanned then null else last_run end
  where s.only_row;

  return query
  select * from pgflow.claim_ended_spans(due, array_fill(''::text, array[cardinality(due)]));
end;
$$;
