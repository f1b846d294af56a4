-- Starting a run again. Both make a NEW run of the same concrete flow with the same input and leave
-- the source run exactly as it was; the new run records its source (restart_of_run_id) and how it
-- was made (restart_mode). Only a run that failed or was cancelled can be restarted. Its tasks follow
-- the flow's persisted routes, as any run's do.
--
-- retry_run runs everything again. resume_run reuses what the source completed: every completed
-- step is copied as completed (reused = true, its output kept), and of a map step that did not
-- complete, every completed task, when the map's input array is the same (_start_ready_steps);
-- only the rest is queued, and the run proceeds normally from there (dependencies, conditions, map
-- aggregation, the run's output).
--
-- security definer, like start_flow: service_role (0900_privileges) can restart runs without write
-- access to pgflow's tables or to PGMQ's queues.

-- The source of a restart: it must exist and have failed or been cancelled.
create or replace function pgflow._restart_source(p_run_id uuid, p_verb text)
returns pgflow.runs
language plpgsql
stable
set search_path = ''
as $$
declare
  source pgflow.runs;
begin
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
  return source;
end;
$$;

create or replace function pgflow.retry_run(run_id uuid)
returns pgflow.runs
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  source pgflow.runs := pgflow._restart_source(retry_run.run_id, 'retried');
  created pgflow.runs;
begin
  created := pgflow.start_flow(source.flow_slug, source.input);
  update pgflow.runs r set restart_of_run_id = source.run_id, restart_mode = 'retry'
  where r.run_id = created.run_id
  returning * into created;
  return created;
end;
$$;

create or replace function pgflow.resume_run(run_id uuid)
returns pgflow.runs
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  source pgflow.runs := pgflow._restart_source(resume_run.run_id, 'resumed');
  new_run_id uuid := gen_random_uuid();
  created pgflow.runs;
begin
  if not exists (select 1 from pgflow.flows f where f.flow_slug = source.flow_slug) then
    raise exception 'flow % does not exist', source.flow_slug using errcode = '22023';
  end if;
  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, restart_of_run_id, restart_mode)
  values (new_run_id, source.flow_slug, source.input,
          (select count(*) from pgflow.steps s where s.flow_slug = source.flow_slug)
            - (select count(*) from pgflow.step_states ss
               where ss.run_id = source.run_id and ss.status = 'completed'),
          source.run_id, 'resume');

  -- A completed step is copied as completed; every other step waits for its dependencies that
  -- did not complete in the source (they run again here).
  insert into pgflow.step_states (run_id, flow_slug, step_slug, status, remaining_deps, remaining_tasks,
                                  initial_tasks, output, started_at, completed_at, reused)
  select new_run_id, s.flow_slug, s.step_slug,
         case when done then 'completed' else 'created' end,
         case when done then 0 else (
           select count(*) from pgflow.deps d
           left join pgflow.step_states dss on dss.run_id = source.run_id and dss.step_slug = d.dep_slug
           where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug
             and dss.status is distinct from 'completed') end,
         case when done then 0 end,
         case when done then prev.initial_tasks end,
         case when done then prev.output end,
         case when done then clock_timestamp() end,
         case when done then clock_timestamp() end,
         done
  from pgflow.steps s
  left join pgflow.step_states prev on prev.run_id = source.run_id and prev.step_slug = s.step_slug
  cross join lateral (select prev.status is not distinct from 'completed' as done) c
  where s.flow_slug = source.flow_slug;

  perform pgflow._start_ready_steps(new_run_id);

  -- Nothing left to run (every step was reused or finished at once): the run is complete.
  update pgflow.runs r
  set status = 'completed', completed_at = clock_timestamp(), output = pgflow._run_output(new_run_id)
  where r.run_id = new_run_id and r.status = 'started' and r.remaining_steps = 0;

  select * into created from pgflow.runs r where r.run_id = new_run_id;
  return created;
end;
$$;
