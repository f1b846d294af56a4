-- Completing a task. Late or duplicate completions (the task is no longer started, or its run or step
-- has moved on) change nothing and raise nothing. The caller passes the attempt it ran (start_tasks
-- and read_and_claim return it with the task): a report for an older attempt (its reply was lost,
-- and the task has since been claimed again) is late too, so it can never complete or fail the
-- attempt that is running now. The attempt is required: a report without one cannot be told from a
-- late one, so it would complete whichever attempt happens to be running. The parameter keeps its
-- NULL default only so that a call without it gets this explanation instead of "function does not
-- exist"; an operator completing a task by hand passes step_tasks.attempts_count.
--
-- This runs once per task, so the common path is kept to a few statements in one function: nested
-- plpgsql calls each cost a plan and a search_path save/restore. What _complete_step and
-- _count_off_step do is written out here, and the ready-step pass runs only when a dependent's last
-- dependency just completed (a pass always leaves no ready step behind, so no other step can be
-- waiting for one).
--
-- The work is pgflow._complete_task's; complete_task archives the task's message at once, and
-- complete_tasks archives the messages of a whole batch with one pgmq.archive call per queue (each
-- PGMQ call builds and plans its statement again, which cost more than the rest of a completion).
create or replace function pgflow.complete_task(
  run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
begin
  return query select * from pgflow._complete_task(complete_task.run_id, complete_task.step_slug,
    complete_task.task_index, complete_task.output, complete_task.attempt, true);
end;
$$;

-- complete_task's work. p_archive false leaves the completed task's message in its queue for the
-- caller to archive (complete_tasks, once per queue for its batch) before its transaction ends.
create or replace function pgflow._complete_task(
  run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer, p_archive boolean
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  run_status text;
  task pgflow.step_tasks;
  left_tasks integer;
  ready integer;
begin
  if _complete_task.attempt is null then
    raise exception 'complete_task: attempt is required (task % [%] of run %)', _complete_task.step_slug,
      _complete_task.task_index, _complete_task.run_id
      using errcode = '22004',
        hint = 'pass the attempt start_tasks or read_and_claim returned with the task; without it a late report could complete a newer attempt';
  end if;
  -- The run lock orders every state change of one run: completions, failures and stalled recovery.
  select r.status into run_status from pgflow.runs r where r.run_id = _complete_task.run_id for update;
  if run_status is distinct from 'started' then
    return;
  end if;
  -- Under the run lock, an update that matches only a started task is both the check and the change.
  update pgflow.step_tasks t
  set status = 'completed', completed_at = now(), output = _complete_task.output
  where t.run_id = _complete_task.run_id and t.step_slug = _complete_task.step_slug
    and t.task_index = _complete_task.task_index and t.status = 'started'
    and t.attempts_count = _complete_task.attempt
  returning * into task;
  if not found then
    return;
  end if;
  if p_archive then
    perform pgmq.archive(task.queue_name, task.message_id);
  end if;

  -- Count the task off; when it was the step's last, complete the step in the same statement. A
  -- map step's output is its tasks' outputs in index order (this task's output is already stored);
  -- CASE evaluates the aggregate only for the last task of a map.
  update pgflow.step_states ss
  set remaining_tasks = ss.remaining_tasks - 1,
      status = case when ss.remaining_tasks = 1 then 'completed' else ss.status end,
      completed_at = case when ss.remaining_tasks = 1 then now() else ss.completed_at end,
      output = case
        when ss.remaining_tasks <> 1 then ss.output
        when s.step_type = 'map' then
          (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
           where t.run_id = task.run_id and t.step_slug = task.step_slug)
        else task.output
      end
  from pgflow.steps s
  where ss.run_id = task.run_id and ss.step_slug = task.step_slug
    and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
  returning ss.remaining_tasks into left_tasks;

  if left_tasks = 0 then
    -- Release the dependents (as _complete_step does) and note whether any became ready.
    with released as (
      update pgflow.step_states ss
      set remaining_deps = ss.remaining_deps - 1
      from pgflow.deps d
      where ss.run_id = task.run_id and d.flow_slug = task.flow_slug and d.dep_slug = task.step_slug
        and ss.step_slug = d.step_slug
      returning ss.remaining_deps, ss.status
    )
    select count(*) filter (where r.remaining_deps = 0 and r.status = 'created') into ready from released r;

    -- Count the step off the run (as _count_off_step does); the last one completes the run with the
    -- outputs of its completed leaf steps. The run is started: its lock is held and it was checked.
    update pgflow.runs r
    set remaining_steps = r.remaining_steps - 1,
        status = case when r.remaining_steps = 1 then 'completed' else r.status end,
        completed_at = case when r.remaining_steps = 1 then now() else r.completed_at end,
        output = case when r.remaining_steps = 1 then coalesce((
          select jsonb_object_agg(ss.step_slug, ss.output)
          from pgflow.step_states ss
          where ss.run_id = task.run_id and ss.status = 'completed'
            and not exists (select 1 from pgflow.deps d
                            where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
        ), '{}'::jsonb) else r.output end
    where r.run_id = task.run_id;

    if ready > 0 then
      perform pgflow._start_ready_steps(task.run_id);
    end if;
  end if;
  return next task;
end;
$$;

-- Several completions in one round trip: each is exactly complete_task (same checks, same
-- idempotence, the attempt required; a late or duplicate one changes nothing), all in one
-- transaction. Runs are locked in run_id order, so two batches that share runs wait for each other
-- instead of deadlocking. The completed tasks' messages are archived at the end, one pgmq.archive
-- call per queue.
create or replace function pgflow.complete_tasks(
  run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[] default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  i integer;
  task pgflow.step_tasks;
  done_queues text[] := '{}';
  done_ids bigint[] := '{}';
  grp record;
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
  for i in select u.ord from unnest(run_ids) with ordinality as u(run_id, ord) order by u.run_id, u.ord loop
    for task in select * from pgflow._complete_task(run_ids[i], step_slugs[i], task_indexes[i], outputs[i], attempts[i], false) loop
      done_queues := done_queues || task.queue_name;
      done_ids := done_ids || task.message_id;
      return next task;
    end loop;
  end loop;
  for grp in
    select u.q, array_agg(u.id order by u.id) as ids from unnest(done_queues, done_ids) as u(q, id) group by u.q
  loop
    perform pgmq.archive(grp.q, grp.ids);
  end loop;
end;
$$;
