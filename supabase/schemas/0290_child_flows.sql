-- Child flows: a step whose work is a run of another flow (docs/child-flows.md). Such a step has
-- no handler and no message. When it becomes ready (_start_ready_steps, with the parent run's lock
-- held) it starts one child run per task, single or map, in that same transaction; its tasks wait
-- 'started' with no message and the child's run id (step_tasks.child_run_id), so no worker holds
-- them and stalled recovery leaves them alone. The child's run records its parent (runs.parent_*),
-- and a trigger on the child's status moves the parent in the child's own finishing transaction:
-- a completion completes the parent's task through complete_tasks (so the step, its dependents and
-- the run go on exactly as after a handler's completion); a failure or a cancellation fails it.
--
-- The child's input is the task's input (a single step's dependency outputs, or the run input for
-- a root step; a map step's element), optionally reshaped by a mapping recorded by the DSL when
-- the flow is defined (steps.child_input): a JSON template and the paths it copies from the task's
-- input. It is evaluated here, without a worker, so a child starts in the transaction that made
-- its step ready.
--
-- Lock order: descendant before ancestor. The child's finish holds the child's run lock and then
-- takes the parent's; cancel_run (0530) locks a run's started descendants, deepest first, before
-- the run itself, so a parent's cancellation meeting a child's finish waits instead of
-- deadlocking. A step skipped when one child fails still cancels its other children while holding
-- the parent: a sibling finishing at that moment can meet it, and Postgres then ends one side with
-- 40P01 (the worker's completion retries it; nothing is half done).

-- The flow (a concrete slug or an alias, resolved when each child starts) a 'flow' step runs.
alter table pgflow.steps add column if not exists child_flow text;
-- How a 'flow' step builds its child's input from its task's input; NULL: the task's input as it
-- is. {"template": <json>, "refs": [[<path in template>, <path in task input>], ...]}.
alter table pgflow.steps add column if not exists child_input jsonb;
do $$
begin
  alter table pgflow.steps add constraint steps_child_flow_iff_flow_kind
    check ((kind = 'flow') = (child_flow is not null) and (child_input is null or kind = 'flow'));
exception when duplicate_object then
  null;
end
$$;

-- The parent of a child run: the run, step and task index waiting for it. No foreign key, like
-- restart_of_run_id: a parent can be pruned before its children.
alter table pgflow.runs add column if not exists parent_run_id uuid;
alter table pgflow.runs add column if not exists parent_step_slug text;
alter table pgflow.runs add column if not exists parent_task_index integer;
do $$
begin
  alter table pgflow.runs add constraint runs_parent_complete check (
    (parent_run_id is null) = (parent_step_slug is null) and (parent_run_id is null) = (parent_task_index is null));
exception when duplicate_object then
  null;
end
$$;
-- A run's children (cancel, get_run). Partial: a run that is not a child adds no entry.
create index if not exists runs_parent_idx on pgflow.runs (parent_run_id, parent_step_slug, parent_task_index)
  where parent_run_id is not null;

-- The child run a 'flow' step's task waits for (or took its output from); NULL for other tasks.
alter table pgflow.step_tasks add column if not exists child_run_id uuid;

-- The child input of one task: the template with every reference replaced by the value at its
-- path in the task's input (JSON null where the path leads nowhere, as a missing key would).
create or replace function pgflow._child_input(p_mapping jsonb, p_source jsonb)
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
declare
  result jsonb := p_mapping -> 'template';
  ref jsonb;
  target text[];
  val jsonb;
begin
  for ref in select r.value from jsonb_array_elements(p_mapping -> 'refs') r loop
    val := coalesce(p_source #> array(select jsonb_array_elements_text(ref -> 1)), 'null'::jsonb);
    target := array(select jsonb_array_elements_text(ref -> 0));
    result := case when cardinality(target) = 0 then val else jsonb_set(result, target, val) end;
  end loop;
  return result;
end;
$$;

-- Starts the child runs of a 'flow' step that _start_ready_steps just started with p_count tasks
-- (p_source: the array a map step maps over, NULL for a single step). The caller holds the run's
-- lock. A restarted run (retry_run, resume_run) takes over its source's child of the same index
-- when that child had the same input: a completed one gives its output at once, a running one is
-- moved to the new parent; only the others start anew. Tasks a resume copied already are done.
--
-- Returns NULL when the step waits for children, 'completed' when it has nothing left to wait
-- for, or an error that fails the run (the child flow does not exist, or a child ended at once).
create or replace function pgflow._start_child_runs(
  p_run_id uuid, p_step_slug text, p_count integer, p_source jsonb
)
returns text
language plpgsql
volatile
set search_path = ''
as $$
declare
  run pgflow.runs;
  step pgflow.steps;
  base jsonb;
  child_in jsonb;
  prior pgflow.runs;
  child pgflow.runs;
  finished integer := 0;
  remaining integer;
begin
  select * into run from pgflow.runs r where r.run_id = p_run_id;
  select * into step from pgflow.steps s where s.flow_slug = run.flow_slug and s.step_slug = p_step_slug;
  if not exists (select 1 from pgflow.aliases a where a.alias = step.child_flow)
     and not exists (select 1 from pgflow.flows f where f.flow_slug = step.child_flow) then
    return format('[CHILD_FLOW_MISSING] step %s runs flow %s, which does not exist; compile it (start a worker for it) or point the step at another flow',
                  p_step_slug, step.child_flow);
  end if;
  -- Tasks a resume copied from its source run keep the child they came from.
  update pgflow.step_tasks t set child_run_id = src.child_run_id
  from pgflow.step_tasks src
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.child_run_id is null
    and src.run_id = run.restart_of_run_id and src.step_slug = p_step_slug and src.task_index = t.task_index;

  for i in 0 .. p_count - 1 loop
    continue when exists (select 1 from pgflow.step_tasks t
                          where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = i);
    base := case when step.step_type = 'map' then p_source -> i
                 else (select o from pgflow._task_input(p_run_id, run.flow_slug, p_step_slug, 0) o) end;
    child_in := case when step.child_input is null then base else pgflow._child_input(step.child_input, base) end;
    prior := null;
    if run.restart_of_run_id is not null then
      select c.* into prior
      from pgflow.step_tasks src
      join pgflow.runs c on c.run_id = src.child_run_id
      where src.run_id = run.restart_of_run_id and src.step_slug = p_step_slug and src.task_index = i
        and c.status in ('completed', 'started') and c.input = child_in
      for update of c;
    end if;
    if prior.status = 'started' then
      update pgflow.runs r set parent_run_id = p_run_id, parent_step_slug = p_step_slug, parent_task_index = i
      where r.run_id = prior.run_id;
      child := prior;
    elsif prior.status = 'completed' then
      child := prior;
    else
      -- The child's spans hang under this step's span, in the parent's trace.
      child := pgflow.start_flow(step.child_flow, child_in,
        traceparent => pgflow._step_traceparent(p_run_id, p_step_slug, run.traceparent));
      update pgflow.runs r set parent_run_id = p_run_id, parent_step_slug = p_step_slug, parent_task_index = i
      where r.run_id = child.run_id;
    end if;
    if child.status = 'completed' then
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status, output,
                                     attempts_count, started_at, completed_at, child_run_id)
      values (p_run_id, run.flow_slug, p_step_slug, i, step.queue_name, 'completed', child.output,
              1, clock_timestamp(), clock_timestamp(), child.run_id);
      finished := finished + 1;
    elsif child.status = 'started' then
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status,
                                     attempts_count, started_at, child_run_id)
      values (p_run_id, run.flow_slug, p_step_slug, i, step.queue_name, 'started', 1, clock_timestamp(),
              child.run_id);
    else
      return format('[CHILD_FLOW_FAILED] step %s [%s]: child run %s of flow %s %s at its start: %s',
                    p_step_slug, i, child.run_id, child.flow_slug, child.status,
                    coalesce(child.error_message, 'no error recorded'));
    end if;
  end loop;

  update pgflow.step_states ss set remaining_tasks = ss.remaining_tasks - finished
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug
  returning ss.remaining_tasks into remaining;
  if remaining > 0 then
    return null;
  end if;
  perform pgflow._complete_step(p_run_id, p_step_slug,
    case when step.step_type = 'map'
         then (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
               where t.run_id = p_run_id and t.step_slug = p_step_slug)
         else (select t.output from pgflow.step_tasks t
               where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = 0) end);
  return 'completed';
end;
$$;

-- Cancels the running children of a run (of one of its steps, when p_step_slug is given), in
-- run_id order. Each cancellation's own trigger cancels that child's children in turn.
create or replace function pgflow._cancel_child_runs(p_run_id uuid, p_step_slug text, p_reason text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  child uuid;
begin
  for child in
    select r.run_id from pgflow.runs r
    where r.parent_run_id = p_run_id and (p_step_slug is null or r.parent_step_slug = p_step_slug)
      and r.status = 'started'
    order by r.run_id
  loop
    perform pgflow.cancel_run(child, p_reason);
  end loop;
end;
$$;

-- A child run ended: its parent's task completes with the child's output, or fails by the step's
-- whenExhausted (the child's steps had their own attempts, so a failed child is not started
-- again: a retry or resume of the parent does that, reusing the children that completed). Nothing
-- happens when the parent has moved on (cancelled, failed) or the task waits for another child.
create or replace function pgflow._settle_child(p_child pgflow.runs)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  task pgflow.step_tasks;
  when_exhausted text;
  err text;
begin
  perform 1 from pgflow.runs r where r.run_id = p_child.parent_run_id and r.status = 'started' for update;
  if not found then
    return;
  end if;
  select * into task from pgflow.step_tasks t
  where t.run_id = p_child.parent_run_id and t.step_slug = p_child.parent_step_slug
    and t.task_index = p_child.parent_task_index;
  if not found or task.status <> 'started' or task.child_run_id is distinct from p_child.run_id then
    return;
  end if;
  if p_child.status = 'completed' then
    perform pgflow.complete_tasks(array[task.run_id], array[task.step_slug], array[task.task_index],
                                  array[p_child.output], array[task.attempts_count]);
    return;
  end if;
  err := left(format('[CHILD_FLOW_FAILED] child run %s of flow %s %s: %s', p_child.run_id, p_child.flow_slug,
                     p_child.status, coalesce(p_child.error_message, p_child.cancel_reason, 'no reason given')), 2000);
  perform pgflow._record_attempt(task, 'failed', err, null);
  update pgflow.step_tasks t set status = 'failed', error_message = err, failed_at = clock_timestamp()
  where t.run_id = task.run_id and t.step_slug = task.step_slug and t.task_index = task.task_index;
  select s.when_exhausted into when_exhausted from pgflow.steps s
  where s.flow_slug = task.flow_slug and s.step_slug = task.step_slug;
  if when_exhausted = 'fail' then
    -- The other children run on: a resume of the parent takes them over, done or running.
    perform pgflow._fail_run(task.run_id, task.step_slug, err);
  else
    update pgflow.step_states ss set error_message = err
    where ss.run_id = task.run_id and ss.step_slug = task.step_slug;
    perform pgflow._skip_step(task.run_id, task.step_slug, 'handler_failed', when_exhausted = 'skip-cascade');
    -- A skipped step needs no more of its children.
    perform pgflow._cancel_child_runs(task.run_id, task.step_slug,
                                      format('step %s of parent run %s was skipped', task.step_slug, task.run_id));
    perform pgflow._start_ready_steps(task.run_id);
  end if;
end;
$$;

-- Fires when a run ends: a child moves its parent on; a cancelled run cancels its running children.
create or replace function pgflow._run_ended_for_children()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
begin
  if new.status = 'cancelled' then
    perform pgflow._cancel_child_runs(new.run_id, null, format('parent run %s was cancelled', new.run_id));
  end if;
  if new.parent_run_id is not null then
    perform pgflow._settle_child(new);
  end if;
  return null;
end;
$$;

-- Only a child's end, or a cancellation, fires it: the when clause costs any other run's status
-- change nothing more than its test.
drop trigger if exists runs_child_ended on pgflow.runs;
create trigger runs_child_ended
  after update of status on pgflow.runs
  for each row
  when (old.status = 'started' and new.status <> 'started'
        and (new.parent_run_id is not null or new.status = 'cancelled'))
  execute function pgflow._run_ended_for_children();

-- Refuses to delete a flow that another flow's step runs as its child (by slug, or by the alias
-- that points at it), naming that step: its next run would fail to start the child.
create or replace function pgflow._refuse_deleting_child_flow(p_flow_slug text)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  user_step record;
begin
  select s.flow_slug, s.step_slug, s.child_flow into user_step
  from pgflow.steps s
  where s.kind = 'flow' and s.flow_slug <> p_flow_slug
    and (s.child_flow = p_flow_slug
         or exists (select 1 from pgflow.aliases a where a.alias = s.child_flow and a.flow_slug = p_flow_slug))
  order by s.flow_slug, s.step_index
  limit 1;
  if found then
    raise exception 'flow % is run as a child by step % of flow % (child flow %); it was not deleted',
      p_flow_slug, user_step.step_slug, user_step.flow_slug, user_step.child_flow
      using errcode = '55000',
        hint = format('delete flow %s first (select pgflow.delete_flow_and_data(%L)), then this one',
                      user_step.flow_slug, user_step.flow_slug);
  end if;
end;
$$;

-- What is wrong with the child of step number p_index of a shape the compiler was sent (nothing for
-- a step without one): the flow must be a slug or alias, the input mapping null or a template with
-- [[path, path], ...] references.
create or replace function pgflow._child_step_problems(p_step jsonb, p_index integer)
returns text[]
language sql
immutable
set search_path = ''
as $$
  select case
    when not (p_step ? 'child') then '{}'::text[]
    when jsonb_typeof(p_step -> 'child' -> 'flow') is distinct from 'string'
         or not pgflow.is_valid_slug(p_step -> 'child' ->> 'flow') then
      array[format('step %s: child flow %s is not a valid flow slug or alias', p_index,
                   coalesce(p_step -> 'child' -> 'flow', 'null'))]
    when jsonb_typeof(p_step -> 'child' -> 'input') not in ('null', 'object')
         or (jsonb_typeof(p_step -> 'child' -> 'input') = 'object'
             and (not (p_step -> 'child' -> 'input' ? 'template')
                  or jsonb_typeof(p_step -> 'child' -> 'input' -> 'refs') is distinct from 'array')) then
      array[format('step %s: child input must be null or {"template": ..., "refs": [[path, path], ...]}', p_index)]
    else '{}'::text[]
  end
$$;
