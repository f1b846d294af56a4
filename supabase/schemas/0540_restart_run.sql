-- Starting a run again. Both make a NEW run of the same concrete flow with the same input (retry_run
-- may be given a corrected one instead) and leave the source run exactly as it was; the new run records its source (restart_of_run_id) and how it
-- was made (restart_mode). Only a run that failed or was cancelled can be restarted. Its tasks follow
-- the flow's persisted routes, as any run's do. Neither resolves an alias: the source's flow slug
-- is a concrete slug, and a version whose slug is also an alias's name is still that version.
--
-- retry_run runs everything again, with the source's input or, when input is given (not SQL NULL),
-- with that one: a run that failed on bad input is run again with the input corrected, and stays
-- linked to it. resume_run never takes another input: what it reuses was computed from the
-- source's. resume_run takes over what the source finished and what was built on it, and runs the
-- rest:
--   * every completed step is taken over as completed (reused = true, its output kept);
--   * every skipped step that a completed step depends on, directly or through other steps, is
--     taken over as skipped (reused, its skip reason and error kept): the completed step was
--     computed without its output, and a resumed run holds exactly what its reused steps saw;
--   * every other step runs again: failed, cancelled and unfinished steps, and skipped steps that
--     nothing completed was built on (a step skipped because its handler failed gets another
--     attempt, a condition is decided again, a cascade of skips is applied again if its cause
--     skips again);
--   * of a map step that runs again, every completed task is taken over when the map's input
--     array is the same (_start_ready_steps).
-- Only steps that run again wait for their dependencies, and they wait only for dependencies that
-- run again (a step that is taken over never has one that runs again), so no completion counts a
-- step below zero (complete_tasks also counts down only steps that still wait).
--
-- Each call starts one more run unless again => false: then a run already retried or resumed is
-- refused (23505, naming its restart), so a script that restarts a batch of runs twice, or two
-- operators at once, restart each run once. Restarts of one run are serialised for this check.
--
-- security definer, like start_flow: service_role (0900_privileges) can restart runs without write
-- access to pgflow's tables or to PGMQ's queues.

-- The source of a restart: it must exist and have failed or been cancelled, and, unless p_again,
-- must not have been restarted already. Holds a transaction lock on restarting this run until the
-- caller commits, so a concurrent restart of it sees this one.
create or replace function pgflow._restart_source(p_run_id uuid, p_verb text, p_again boolean)
returns pgflow.runs
language plpgsql
volatile
set search_path = ''
as $$
declare
  source pgflow.runs;
  previous pgflow.runs;
begin
  perform pg_advisory_xact_lock(hashtextextended('pgflow.restart:' || coalesce(p_run_id::text, ''), 0));
  select * into source from pgflow.runs r where r.run_id = p_run_id;
  if not found then
    raise exception 'run % does not exist', coalesce(p_run_id::text, 'NULL')
      using errcode = 'P0002', hint = 'check the run id (pgflow.list_runs lists runs)';
  end if;
  if source.status not in ('failed', 'cancelled') then
    raise exception 'run % is %; only failed or cancelled runs can be %', p_run_id, source.status, p_verb
      using errcode = '55000',
        hint = case when source.status = 'started' then 'cancel it first (pgflow.cancel_run), or wait for it to end'
                    else 'a completed run needs no restart; start a new run with pgflow.start_flow' end;
  end if;
  if p_again is distinct from true then
    select * into previous from pgflow.runs r
    where r.restart_of_run_id = p_run_id
    order by r.started_at desc, r.run_id limit 1;
    if found then
      raise exception 'run % was % already, as run %; it was not % again', p_run_id,
        case previous.restart_mode when 'retry' then 'retried' else 'resumed' end, previous.run_id, p_verb
        using errcode = '23505',
          hint = 'look at run ' || previous.run_id || ' (pgflow.get_run), or pass again => true to restart it once more';
    end if;
  end if;
  return source;
end;
$$;

-- Makes the new run of a restart and starts what is ready in it. p_mode 'retry' takes over nothing;
-- 'resume' takes over what the top of this file says.
create or replace function pgflow._restart_run(p_source pgflow.runs, p_mode text)
returns pgflow.runs
language plpgsql
volatile
set search_path = ''
as $$
declare
  new_run_id uuid := gen_random_uuid();
  reused_steps text[];
  created pgflow.runs;
begin
  -- The steps taken over: the completed ones and every step they were built on (each of which
  -- finished: a step starts only after its dependencies did). A skipped step among them stays
  -- skipped; one that is neither completed nor skipped (never expected) would run again.
  if p_mode = 'resume' then
    with recursive built_on(step_slug) as (
      select ss.step_slug from pgflow.step_states ss
      where ss.run_id = p_source.run_id and ss.status = 'completed'
      union
      select d.dep_slug from built_on b
      join pgflow.deps d on d.flow_slug = p_source.flow_slug and d.step_slug = b.step_slug
    )
    select coalesce(array_agg(b.step_slug), '{}') into reused_steps
    from built_on b
    join pgflow.step_states ss on ss.run_id = p_source.run_id and ss.step_slug = b.step_slug
    where ss.status in ('completed', 'skipped');
  else
    reused_steps := '{}';
  end if;

  -- The restart keeps the source's priority: its tasks wait again like the source's did; and its
  -- trace context, so its spans join the source's trace.
  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, restart_of_run_id, restart_mode,
                           priority, traceparent)
  values (new_run_id, p_source.flow_slug, p_source.input,
          (select count(*) from pgflow.steps s where s.flow_slug = p_source.flow_slug)
            - cardinality(reused_steps),
          p_source.run_id, p_mode, p_source.priority, p_source.traceparent);

  -- A step taken over is copied with its outcome; every other step waits for its dependencies
  -- that are not taken over (they run again here).
  insert into pgflow.step_states (run_id, flow_slug, step_slug, status, remaining_deps, remaining_tasks,
                                  initial_tasks, output, skip_reason, error_message, started_at,
                                  completed_at, skipped_at, reused)
  select new_run_id, s.flow_slug, s.step_slug,
         case when kept then prev.status else 'created' end,
         case when kept then 0 else (
           select count(*) from pgflow.deps d
           where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug
             and not (d.dep_slug = any (reused_steps))) end,
         case when kept then 0 end,
         case when kept then prev.initial_tasks end,
         case when kept then prev.output end,
         case when kept then prev.skip_reason end,
         case when kept then prev.error_message end,
         case when kept and prev.status = 'completed' then clock_timestamp() end,
         case when kept and prev.status = 'completed' then clock_timestamp() end,
         case when kept and prev.status = 'skipped' then clock_timestamp() end,
         kept
  from pgflow.steps s
  left join pgflow.step_states prev on prev.run_id = p_source.run_id and prev.step_slug = s.step_slug
  cross join lateral (select s.step_slug = any (reused_steps) as kept) c
  where s.flow_slug = p_source.flow_slug;

  perform pgflow._start_ready_steps(new_run_id);

  -- Nothing left to run (every step was taken over, or finished at once): the run is complete.
  update pgflow.runs r
  set status = 'completed', completed_at = clock_timestamp(), output = (select o from pgflow._run_output(new_run_id) o)
  where r.run_id = new_run_id and r.status = 'started' and r.remaining_steps = 0;

  select * into created from pgflow.runs r where r.run_id = new_run_id;
  return created;
end;
$$;

create or replace function pgflow.retry_run(run_id uuid, again boolean default true, input jsonb default null)
returns pgflow.runs
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  source pgflow.runs := pgflow._restart_source(retry_run.run_id, 'retried', retry_run.again);
begin
  -- The new run is made from this copy of the source's row: the source itself is not changed.
  if retry_run.input is not null then
    source.input := retry_run.input;
  end if;
  return pgflow._restart_run(source, 'retry');
end;
$$;

create or replace function pgflow.resume_run(run_id uuid, again boolean default true)
returns pgflow.runs
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  return pgflow._restart_run(pgflow._restart_source(resume_run.run_id, 'resumed', resume_run.again), 'resume');
end;
$$;
