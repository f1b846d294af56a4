-- Batched completion: pgflow.complete_tasks runs complete_task for several tasks in one round trip,
-- so a busy worker reports a batch of finished tasks with one call (bench/results.md, round 2).

-- Several completions in one round trip: each is exactly complete_task (same checks, same
-- idempotence; a late or duplicate one changes nothing), all in one transaction. Runs are locked in
-- run_id order, so two batches that share runs wait for each other instead of deadlocking.
create or replace function pgflow.complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[])
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  i integer;
begin
  if cardinality(run_ids) is distinct from cardinality(step_slugs)
     or cardinality(run_ids) is distinct from cardinality(task_indexes)
     or cardinality(run_ids) is distinct from cardinality(outputs) then
    raise exception 'complete_tasks: % run ids, % step slugs, % task indexes and % outputs',
      cardinality(run_ids), cardinality(step_slugs), cardinality(task_indexes), cardinality(outputs)
      using errcode = '22023', hint = 'pass one run id, step slug, task index and output per task';
  end if;
  for i in select u.ord from unnest(run_ids) with ordinality as u(run_id, ord) order by u.run_id, u.ord loop
    return query select * from pgflow.complete_task(run_ids[i], step_slugs[i], task_indexes[i], outputs[i]);
  end loop;
end;
$$;

revoke execute on all functions in schema pgflow from public;
