-- Deleting one concrete flow: its definitions, its runtime rows and its own queues. On shared
-- queues only this flow's tracked messages go (found through its task snapshots): other flows'
-- messages and unknown messages stay exactly as they were, and the queue and its archive stay.

-- Removes the given messages from a queue and from its archive. Live messages go through
-- pgmq.delete; PGMQ has no public function for archive rows, so those are pruned directly (the one
-- direct table access product SQL allows itself).
create or replace function pgflow._purge_tracked_messages(p_queue text, p_msg_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if p_msg_ids is null or cardinality(p_msg_ids) = 0
     or not exists (select 1 from pgmq.list_queues() q where q.queue_name = p_queue) then
    return;
  end if;
  perform pgmq.delete(p_queue, p_msg_ids);
  execute format('delete from pgmq.%I where msg_id = any ($1)', pgmq.format_table_name(p_queue, 'a'))
  using p_msg_ids;
end;
$$;

create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  flow pgflow.flows;
  grp record;
  own_queue text;
begin
  perform pg_advisory_xact_lock(hashtext('pgflow.flow:' || lower(delete_flow_and_data.flow_slug)));
  select * into flow from pgflow.flows f where f.flow_slug = delete_flow_and_data.flow_slug for update;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(delete_flow_and_data.flow_slug), 'NULL')
      using errcode = '22023';
  end if;

  -- Messages on shared queues: only this flow's, through its snapshots.
  for grp in
    select t.queue_name, array_agg(t.message_id) as ids
    from pgflow.step_tasks t
    where t.flow_slug = flow.flow_slug and t.message_id is not null
      and exists (select 1 from pgflow.shared_queues s where s.queue_name = t.queue_name)
    group by t.queue_name
  loop
    perform pgflow._purge_tracked_messages(grp.queue_name, grp.ids);
  end loop;

  -- The flow's own queues: its default queue (flow mode) or its private step queues (step mode).
  -- Collected before the steps go; snapshots of older routes count too.
  for own_queue in
    select distinct q from (
      select s.queue_name as q from pgflow.steps s
      where s.flow_slug = flow.flow_slug and flow.queue_mode in ('flow', 'step')
      union
      select t.queue_name from pgflow.step_tasks t
      where t.flow_slug = flow.flow_slug
        and not exists (select 1 from pgflow.shared_queues s where s.queue_name = t.queue_name)
        -- A prefix comparison, not LIKE: underscores in the slug must not act as wildcards.
        and (t.queue_name = lower(flow.flow_slug)
             or left(t.queue_name, length(flow.flow_slug) + 2) = lower(flow.flow_slug) || '__')
    ) own
    order by 1
  loop
    -- Never drop a queue another flow still routes to.
    continue when exists (select 1 from pgflow.steps s where s.queue_name = own_queue and s.flow_slug <> flow.flow_slug);
    if exists (select 1 from pgmq.list_queues() q where q.queue_name = own_queue) then
      perform pgmq.drop_queue(own_queue);
    end if;
  end loop;

  delete from pgflow.step_tasks t where t.flow_slug = flow.flow_slug;
  delete from pgflow.step_states ss where ss.flow_slug = flow.flow_slug;
  delete from pgflow.runs r where r.flow_slug = flow.flow_slug;
  delete from pgflow.deps d where d.flow_slug = flow.flow_slug;
  delete from pgflow.steps s where s.flow_slug = flow.flow_slug;
  delete from pgflow.flows f where f.flow_slug = flow.flow_slug;
end;
$$;
