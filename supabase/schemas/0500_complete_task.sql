-- Completing tasks: complete_tasks is the one entry point that completes anything; complete_task
-- (one task, for operators and tests) and complete_and_claim (a worker's batch with its next read,
-- 0410_read_and_claim.sql) call it.
--
-- Late or duplicate completions (the task is no longer started, or its run has moved on) change
-- nothing and raise nothing. The caller passes the attempt it ran (start_tasks and read_and_claim
-- return it with the task): a report for an older attempt (its reply was lost, and the task has
-- since been claimed again) is late too, so it can never complete or fail the attempt that is
-- running now. The attempt is required: a report without one cannot be told from a late one, so it
-- would complete whichever attempt happens to be running. The parameter keeps its NULL default only
-- so that a call without it gets this explanation instead of "function does not exist"; an operator
-- completing a task by hand passes step_tasks.attempts_count.

-- Any number of completions in one call and one transaction, done as a handful of set-based
-- statements whatever the batch's size (lock the runs, complete the tasks, count them off their
-- steps, release the dependents of the steps that completed, count those off their runs, archive
-- the messages once per queue); returns the tasks it completed. Runs are locked in run_id order, so two
-- batches that share runs wait for each other instead of deadlocking; the run lock orders every
-- state change of one run (completions, failures, stalled recovery).
-- Times are stamped after the locks are taken (clock_timestamp(), see 0300_start_flow.sql): a
-- batch that waited for one run's lock must not date its changes to another run before changes
-- committed on that run while it waited.
--
-- The tasks of a batch complete together, then their steps, then the runs; a run that has a step
-- ready after that gets one ready-step pass (a pass leaves no ready step behind, so no other run
-- can be waiting for one). Completions of one run in one batch are therefore applied as one: were
-- that pass to fail the run (a condition with whenUnmet 'fail', a map over a non-array), the
-- batch's other tasks of the run stay completed rather than cancelled, as if they had reported
-- first.
--
-- Cost. Each statement a call runs costs a plan lookup and an executor start whatever the batch's
-- size, and under load that fixed cost is most of a batch's; so a batch runs as few as it can: the
-- dependents' release only when a finished step has dependents, and the archive in one call when
-- the batch has one queue.
--
-- Plans. A worker's session keeps plpgsql's generic plans, made on the statistics of the moment:
-- on a young database (tables never analysed count as ten pages) or one just vacuumed, a plan
-- that scans runs or step states in full, or hashes them, is the cheapest, and stays in use after
-- a burst has made them large, until autovacuum analyses them. So every row here is found by its
-- key, in a nested loop driven by the batch: seq scans are priced out for this function (it only
-- ever needs keyed rows; where no index fits, a scan still runs), generic plans are used from the
-- first call (a custom plan per call costs more than the statement), and no statement that looks a
-- task up by its key also names its status: the planner could then walk every started task
-- through the partial index step_tasks_started_idx (its statistics say few tasks are started; a
-- busy queue has thousands) instead of the primary key. The status is checked on the row found.
create or replace function pgflow.complete_tasks(
  run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[] default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
declare
  locked uuid[];
  done pgflow.step_tasks[];
  queues text[];
  f_runs uuid[];
  f_flows text[];
  f_steps text[];
  releases boolean;
  ready_runs uuid[];
  ready_run uuid;
  -- The plain steps the release started, in (run, step index) order.
  started_runs uuid[];
  started_flows text[];
  started_steps text[];
  grp record;
  missing integer;
begin
  if cardinality(run_ids) is distinct from cardinality(step_slugs)
     or cardinality(run_ids) is distinct from cardinality(task_indexes)
     or cardinality(run_ids) is distinct from cardinality(outputs)
     or cardinality(run_ids) is distinct from cardinality(attempts) then
    raise exception 'complete_tasks: % run ids, % step slugs, % task indexes, % outputs and % attempts',
      cardinality(run_ids), cardinality(step_slugs), cardinality(task_indexes), cardinality(outputs),
      coalesce(cardinality(attempts)::text, 'no')
      using errcode = '22023', hint = 'pass one run id, step slug, task index, output and attempt per task (the attempt is required, as in complete_task)';
  end if;
  missing := array_position(attempts, null);
  if missing is not null then
    raise exception 'complete_task: attempt is required (task % [%] of run %)', step_slugs[missing],
      task_indexes[missing], run_ids[missing]
      using errcode = '22004',
        hint = 'pass the attempt start_tasks or read_and_claim returned with the task; without it a late report could complete a newer attempt';
  end if;
  select array_agg(l.run_id order by l.run_id) into locked
  from (select distinct u.id from unnest(run_ids) u(id) where u.id is not null order by u.id) i
  cross join lateral (
    select r.run_id from pgflow.runs r where r.run_id = i.id and r.status = 'started' limit 1 for update
  ) l;
  if locked is null then
    return;
  end if;

  -- Under the run locks, a started task of the attempt reported is completed; a task named twice
  -- completes once, with the first report of the attempt that is running. The task is updated by
  -- the row version found, so a change since (none can come without the run lock) leaves it alone.
  with completed as (
    update pgflow.step_tasks t
    set status = 'completed', completed_at = clock_timestamp(), output = i.output
    from (select distinct on (u.run_id, u.step_slug, u.task_index)
                 k.tid, u.run_id, u.step_slug, u.task_index, u.output
          from unnest(run_ids, step_slugs, task_indexes, outputs, attempts)
               with ordinality as u(run_id, step_slug, task_index, output, attempt, ord)
          cross join lateral (
            select t2.ctid as tid, t2.status, t2.attempts_count from pgflow.step_tasks t2
            where t2.run_id = u.run_id and t2.step_slug = u.step_slug and t2.task_index = u.task_index
            limit 1
          ) k
          where u.run_id = any (locked) and k.status = 'started' and k.attempts_count = u.attempt
          order by u.run_id, u.step_slug, u.task_index, u.ord) i
    where t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and t.ctid = i.tid
    returning t.*
  )
  select array_agg(c::pgflow.step_tasks), array_agg(distinct c.queue_name) into done, queues
  from completed c;
  if done is null then
    return;
  end if;

  -- Count the tasks off their steps; a step whose last task this was completes in the same
  -- statement. A map step's output is its tasks' outputs in index order (this batch's outputs are
  -- stored already); CASE evaluates the aggregate only for a map's last task.
  with finished as (
    update pgflow.step_states ss
    set remaining_tasks = ss.remaining_tasks - p.n,
        status = case when ss.remaining_tasks = p.n then 'completed' else ss.status end,
        completed_at = case when ss.remaining_tasks = p.n then clock_timestamp() else ss.completed_at end,
        output = case
          when ss.remaining_tasks <> p.n then ss.output
          when p.step_type = 'map' then
            (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
             where t.run_id = p.run_id and t.step_slug = p.step_slug)
          else p.output
        end
    from (select d.run_id, d.step_slug, d.n, d.output, s.step_type, s.releases
          from (select d.run_id, d.flow_slug, d.step_slug, count(*) as n, (array_agg(d.output))[1] as output
                from unnest(done) d group by d.run_id, d.flow_slug, d.step_slug) d
          cross join lateral (
            select s2.step_type,
                   exists (select 1 from pgflow.deps dd
                           where dd.flow_slug = s2.flow_slug and dd.dep_slug = s2.step_slug) as releases
            from pgflow.steps s2
            where s2.flow_slug = d.flow_slug and s2.step_slug = d.step_slug limit 1
          ) s) p
    where ss.run_id = p.run_id and ss.step_slug = p.step_slug
    returning ss.run_id, ss.flow_slug, ss.step_slug, ss.remaining_tasks, p.releases
  )
  select array_agg(f.run_id), array_agg(f.flow_slug), array_agg(f.step_slug), bool_or(f.releases)
  into f_runs, f_flows, f_steps, releases
  from finished f where f.remaining_tasks = 0;

  if f_runs is not null then
    if releases then
      -- Release the dependents of the steps that completed. Only a dependent that still waits
      -- ('created') counts: one that a cascade skipped, or that a resume took over from its source
      -- run, waits for nothing, and counting it down would take its counter below zero.
      --
      -- A dependent that becomes ready starts in this same statement when it is plain (one task,
      -- no condition, a handler's step: a chain's next step), as pgflow._start_ready_steps would
      -- start it and as start_flow starts plain roots; its task is sent below. A run where any
      -- step becoming ready is not plain (a map, a condition, a child flow, an event or sleep: each
      -- may skip steps or fail the run) starts none here and gets the ready-step pass, which starts
      -- all of them in step order as before. Started here, the step's row is updated once in this
      -- transaction, not twice: a second update of a row this transaction wrote checks its foreign
      -- keys again, and the pass costs a plan lookup for each of its statements.
      with released as (
        update pgflow.step_states ss
        set remaining_deps = ss.remaining_deps - r.n,
            status = case when r.start then 'started' else ss.status end,
            started_at = case when r.start then clock_timestamp() else ss.started_at end,
            initial_tasks = case when r.start then 1 else ss.initial_tasks end,
            remaining_tasks = case when r.start then 1 else ss.remaining_tasks end
        from (select g.run_id, g.step_slug, g.n, g.step_index,
                     g.ready and bool_and(g.plain or not g.ready) over (partition by g.run_id) as start
              from (select c.run_id, c.step_slug, c.n, s.step_index, w.remaining_deps = c.n as ready,
                           s.kind = 'task' and s.step_type = 'single' and s.required_input_pattern is null
                             and s.forbidden_input_pattern is null as plain
                    from (select f.run_id, f.flow_slug, d.step_slug, count(*) as n
                          from unnest(f_runs, f_flows, f_steps) as f(run_id, flow_slug, step_slug)
                          join pgflow.deps d on d.flow_slug = f.flow_slug and d.dep_slug = f.step_slug
                          group by f.run_id, f.flow_slug, d.step_slug) c
                    cross join lateral (
                      select s2.step_index, s2.kind, s2.step_type, s2.required_input_pattern,
                             s2.forbidden_input_pattern
                      from pgflow.steps s2 where s2.flow_slug = c.flow_slug and s2.step_slug = c.step_slug
                      limit 1
                    ) s
                    cross join lateral (
                      select w2.remaining_deps from pgflow.step_states w2
                      where w2.run_id = c.run_id and w2.step_slug = c.step_slug and w2.status = 'created'
                      limit 1
                    ) w) g) r
        where ss.run_id = r.run_id and ss.step_slug = r.step_slug and ss.status = 'created'
        returning ss.run_id, ss.flow_slug, ss.step_slug, ss.remaining_deps, ss.status, r.step_index
      )
      select array_agg(distinct r.run_id order by r.run_id)
               filter (where r.remaining_deps = 0 and r.status = 'created'),
             array_agg(r.run_id order by r.run_id, r.step_index) filter (where r.status = 'started'),
             array_agg(r.flow_slug order by r.run_id, r.step_index) filter (where r.status = 'started'),
             array_agg(r.step_slug order by r.run_id, r.step_index) filter (where r.status = 'started')
      into ready_runs, started_runs, started_flows, started_steps
      from released r;
    end if;

    -- Count the steps off their runs; a run's last step completes it with the outputs of its
    -- completed leaf steps. Every run here is started: its lock is held and it was checked.
    update pgflow.runs r
    set remaining_steps = r.remaining_steps - c.n,
        status = case when r.remaining_steps = c.n then 'completed' else r.status end,
        completed_at = case when r.remaining_steps = c.n then clock_timestamp() else r.completed_at end,
        -- Inlined (0090_inline_helpers.sql): this runs for every run a batch completes (every
        -- task of a single-step flow; bench/results.md, round 12).
        output = case when r.remaining_steps = c.n
                      then (select o from pgflow._run_output(c.run_id) o) else r.output end
    from (select f.run_id, count(*) as n from unnest(f_runs) as f(run_id) group by f.run_id) c
    where r.run_id = c.run_id;

    -- The tasks of the plain steps started above, each sent as the ready-step pass would send it.
    for i in 1 .. coalesce(cardinality(started_runs), 0) loop
      perform pgflow._send_task_messages(started_runs[i], started_flows[i], array[started_steps[i]], array[1]);
    end loop;
    if ready_runs is not null then
      foreach ready_run in array ready_runs loop
        perform pgflow._start_ready_steps(ready_run);
      end loop;
    end if;
  end if;

  -- The messages of the completed tasks, one pgmq.archive call per queue (each PGMQ call builds
  -- and plans its statement again).
  if cardinality(queues) = 1 then
    perform pgmq.archive(queues[1], (select array_agg(d.message_id order by d.message_id)
                                     from unnest(done) d where d.message_id is not null));
  else
    for grp in
      select d.queue_name as q, array_agg(d.message_id order by d.message_id) as ids
      from unnest(done) d where d.message_id is not null group by d.queue_name
    loop
      perform pgmq.archive(grp.q, grp.ids);
    end loop;
  end if;
  return query select * from unnest(done);
end;
$$;

-- One task: exactly complete_tasks with one entry.
create or replace function pgflow.complete_task(
  run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer default null
)
returns setof pgflow.step_tasks
language sql
volatile
set search_path = ''
as $$
  select * from pgflow.complete_tasks(array[complete_task.run_id], array[complete_task.step_slug],
    array[complete_task.task_index], array[complete_task.output], array[complete_task.attempt])
$$;
