-- Cancelling a run: an operator ends a started run as 'cancelled'. Nothing of it runs again: its
-- queued and started tasks become 'cancelled' and their messages are archived by their exact
-- (queue, message id) snapshots, so on a shared queue no other flow's message and no unknown
-- message is touched; its waiting tasks (flow control) become 'cancelled' too, with nothing to
-- archive; its unfinished steps become 'cancelled'. A worker running one of its tasks
-- learns it (its handler's abort signal fires) and its report is then late: complete_tasks and
-- fail_task change nothing for a run that is not started. A run that already ended is left as it
-- is, and the answer says what it is (cancelled = false); calling this again is harmless.
--
-- security definer, like start_flow: service_role (0900_privileges) can cancel without write
-- access to pgflow's tables or to PGMQ's queues.
-- What cancel_run answers (a type of its own: its columns may not share the parameter's name).
do $$
begin
  create type pgflow.cancel_result as (run_id uuid, flow_slug text, status text, cancelled boolean);
exception when duplicate_object then
  null;
end
$$;

create or replace function pgflow.cancel_run(run_id uuid, reason text default null)
returns pgflow.cancel_result
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  run pgflow.runs;
  started pgflow.step_tasks;
  -- One time for the run and its steps: the cancel is one event.
  at timestamptz;
begin
  -- A run's started descendants (child flows) first, deepest first: a child's end locks the child
  -- and then its parent, so a cancel that took the parent first could deadlock with it. A run
  -- that is no one's parent costs one probe of the partial index on parent_run_id.
  perform 1
  from (with recursive d(run_id, depth) as (
          select c.run_id, 1 from pgflow.runs c
          where c.parent_run_id = cancel_run.run_id and c.status = 'started'
          union all
          select c.run_id, d.depth + 1 from pgflow.runs c join d on c.parent_run_id = d.run_id
          where c.status = 'started')
        select d.run_id, d.depth from d) x
  join pgflow.runs r on r.run_id = x.run_id
  order by x.depth desc, x.run_id
  for update of r;
  select * into run from pgflow.runs r where r.run_id = cancel_run.run_id for update;
  if not found then
    raise exception 'run % does not exist', coalesce(cancel_run.run_id::text, 'NULL')
      using errcode = 'P0002', hint = 'check the run id (pgflow.list_runs lists runs)';
  end if;
  if run.status <> 'started' then
    return (run.run_id, run.flow_slug, run.status, false)::pgflow.cancel_result;
  end if;

  at := clock_timestamp();
  update pgflow.runs r
  set status = 'cancelled', cancelled_at = at, cancel_reason = left(cancel_run.reason, 2000)
  where r.run_id = run.run_id;
  update pgflow.step_states ss
  set status = 'cancelled', cancelled_at = at
  where ss.run_id = run.run_id and ss.status in ('created', 'started');

  -- Waiting tasks first: they have no message, and a release holding one commits its message
  -- before the archive below reads it (0260_flow_control.sql). Then messages, then task rows (the
  -- order _fail_run keeps: a claim holds a message row while it claims the task row). A claim that
  -- won a message before this lock is a started task here.
  update pgflow.step_tasks t set status = 'cancelled' where t.run_id = run.run_id and t.status = 'waiting';
  perform pgflow._archive_task_messages(run.run_id, array['queued', 'started']);
  for started in
    select * from pgflow.step_tasks t where t.run_id = run.run_id and t.status = 'started'
  loop
    perform pgflow._record_attempt(started, 'cancelled',
      'run cancelled' || coalesce(': ' || cancel_run.reason, ''), null);
  end loop;
  update pgflow.step_tasks t
  set status = 'cancelled'
  where t.run_id = run.run_id and t.status in ('queued', 'started');

  return (run.run_id, run.flow_slug, 'cancelled', true)::pgflow.cancel_result;
end;
$$;
