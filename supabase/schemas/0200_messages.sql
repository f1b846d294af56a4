-- Sending and archiving task messages. Only PGMQ's public functions are used, and every call names
-- the queue from the task's snapshot: a flow slug never stands in for a queue.

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
