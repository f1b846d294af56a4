-- Completing a task. Late or duplicate completions (the task is no longer started, or its run or step
-- has moved on) change nothing and raise nothing.
create or replace function pgflow.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  run pgflow.runs;
  task pgflow.step_tasks;
  left_tasks integer;
  step_output jsonb;
  kind text;
begin
  -- The run lock orders every state change of one run: completions, failures and stalled recovery.
  select * into run from pgflow.runs r where r.run_id = complete_task.run_id for update;
  if not found or run.status <> 'started' then
    return;
  end if;
  select * into task from pgflow.step_tasks t
  where t.run_id = complete_task.run_id and t.step_slug = complete_task.step_slug
    and t.task_index = complete_task.task_index
  for update;
  if not found or task.status <> 'started' then
    return;
  end if;

  update pgflow.step_tasks t
  set status = 'completed', completed_at = now(), output = complete_task.output
  where t.run_id = task.run_id and t.step_slug = task.step_slug and t.task_index = task.task_index
  returning * into task;
  perform pgmq.archive(task.queue_name, task.message_id);

  update pgflow.step_states ss
  set remaining_tasks = ss.remaining_tasks - 1
  where ss.run_id = task.run_id and ss.step_slug = task.step_slug
  returning ss.remaining_tasks into left_tasks;

  if left_tasks = 0 then
    select s.step_type into kind from pgflow.steps s
    where s.flow_slug = task.flow_slug and s.step_slug = task.step_slug;
    if kind = 'map' then
      select jsonb_agg(t.output order by t.task_index) into step_output
      from pgflow.step_tasks t where t.run_id = task.run_id and t.step_slug = task.step_slug;
    else
      step_output := task.output;
    end if;
    perform pgflow._complete_step(task.run_id, task.step_slug, step_output);
    perform pgflow._start_ready_steps(task.run_id);
  end if;
  return next task;
end;
$$;
