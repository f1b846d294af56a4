-- Stalled recovery: a task started more than its effective timeout + 30 s ago, in a started run and
-- step, counts as a failed attempt. While attempts remain it becomes queued and its message visible
-- at once; otherwise its step and run fail, so nothing stays started forever. Safe to call from
-- several connections at once: runs locked by another caller are skipped, not waited for.
create or replace function pgflow.requeue_stalled_tasks()
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  cand record;
  handled integer := 0;
begin
  for cand in
    select t.run_id, t.step_slug, t.task_index, coalesce(s.opt_timeout, f.opt_timeout) as timeout
    from pgflow.step_tasks t
    join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    join pgflow.flows f on f.flow_slug = t.flow_slug
    where t.status = 'started'
      -- A task waiting for its child run (0290_child_flows.sql) has no attempt to take back.
      and t.child_run_id is null
      and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout)
                                                        + pgflow._stalled_margin())
    order by t.started_at
  loop
    perform 1 from pgflow.runs r where r.run_id = cand.run_id and r.status = 'started'
    for update skip locked;
    continue when not found;
    -- Re-check under the run lock: a completion may have won the race.
    perform 1 from pgflow.step_tasks t
    join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
    where t.run_id = cand.run_id and t.step_slug = cand.step_slug and t.task_index = cand.task_index
      and t.status = 'started' and ss.status = 'started'
      and t.started_at < now() - make_interval(secs => cand.timeout + pgflow._stalled_margin());
    continue when not found;
    perform pgflow._task_failed(cand.run_id, cand.step_slug, cand.task_index,
      format('stalled: no completion within %s s (timeout + %s s)', cand.timeout + pgflow._stalled_margin(),
             pgflow._stalled_margin()), 0, 'stalled');
    handled := handled + 1;
  end loop;
  return handled;
end;
$$;
