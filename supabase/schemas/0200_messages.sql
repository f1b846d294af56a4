-- Sending and archiving task messages. Only PGMQ's public functions are used, and every call names
-- the queue from the task's snapshot: a flow slug never stands in for a queue.

-- Creates the tasks of steps just started (p_steps, with p_counts tasks each) and sends one message
-- per task, batched per (queue, delay) in send_batch calls of at most 1,000; each task is inserted
-- with its queue snapshot and message id in the same transaction, and channel pgflow_queue:<queue>
-- is notified for every queue that got messages visible at once.
create or replace function pgflow._send_task_messages(p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
  ids bigint[];
  batch_size constant integer := 1000;
begin
  for grp in
    select s.queue_name, s.opt_start_delay as delay,
           array_agg(s.step_slug order by s.step_slug, i) as steps,
           array_agg(i order by s.step_slug, i) as idxs,
           -- The body is informational only: the claim reads ids, never bodies.
           array_agg(jsonb_build_object('flow_slug', p_flow_slug, 'run_id', p_run_id,
                                        'step_slug', s.step_slug, 'task_index', i)
                     order by s.step_slug, i) as msgs
    from unnest(p_steps, p_counts) as n(step_slug, task_count)
    join pgflow.steps s on s.flow_slug = p_flow_slug and s.step_slug = n.step_slug
    cross join generate_series(0, n.task_count - 1) as i
    group by s.queue_name, s.opt_start_delay
  loop
    -- Large maps go out in slices so one statement never carries an unbounded array.
    for slice_start in 1 .. cardinality(grp.msgs) by batch_size loop
      -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
      select array_agg(id order by id) into ids
      from pgmq.send_batch(grp.queue_name, grp.msgs[slice_start:slice_start + batch_size - 1], grp.delay) as id;
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, message_id)
      select p_run_id, p_flow_slug, u.step_slug, u.task_index, grp.queue_name, u.id
      from unnest(grp.steps[slice_start:slice_start + batch_size - 1], grp.idxs[slice_start:slice_start + batch_size - 1], ids)
        as u(step_slug, task_index, id);
    end loop;
    -- Wakes the workers listening on the queue. Sent in this transaction, so it is delivered at
    -- commit or never: a worker never wakes before the messages are visible to its read. A delayed
    -- group is not announced (nothing to read yet); the workers' fallback poll finds it. Equal
    -- notifications of one transaction are folded into one by Postgres.
    if grp.delay = 0 then
      perform pg_notify('pgflow_queue:' || grp.queue_name, '');
    end if;
  end loop;
end;
$$;

-- Archives the messages of the run's tasks that match the given statuses, one archive call per queue.
create or replace function pgflow._archive_task_messages(p_run_id uuid, p_statuses text[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
begin
  for grp in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as ids
    from pgflow.step_tasks t
    where t.run_id = p_run_id and t.status = any (p_statuses) and t.message_id is not null
    group by t.queue_name
  loop
    perform pgmq.archive(grp.queue_name, grp.ids);
  end loop;
end;
$$;

-- Batched visibility change through pgmq.set_vt; returns the messages it changed.
create or replace function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], offsets integer[])
returns table (msg_id bigint, vt timestamptz)
language plpgsql
volatile
set search_path = ''
as $$
begin
  if cardinality(msg_ids) is distinct from cardinality(offsets) then
    raise exception 'set_vt_batch: % message ids but % offsets', cardinality(msg_ids), cardinality(offsets)
      using errcode = '22023', hint = 'pass one offset per message id';
  end if;
  return query
  select m.msg_id, m.vt
  from unnest(msg_ids, offsets) as u(id, off)
  cross join lateral pgmq.set_vt(set_vt_batch.queue_name, u.id, u.off) as m;
end;
$$;

-- Archives the messages of one step's tasks that match the given statuses, one call per queue.
create or replace function pgflow._archive_step_messages(p_run_id uuid, p_step_slug text, p_statuses text[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
begin
  for grp in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as ids
    from pgflow.step_tasks t
    where t.run_id = p_run_id and t.step_slug = p_step_slug and t.status = any (p_statuses)
      and t.message_id is not null
    group by t.queue_name
  loop
    perform pgmq.archive(grp.queue_name, grp.ids);
  end loop;
end;
$$;
