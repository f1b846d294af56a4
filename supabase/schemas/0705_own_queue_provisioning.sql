-- A flow's own queues (its default queue in flow mode, its private step queues in step mode) are
-- created by pgflow and recorded in pgflow.created_queues. A name PGMQ already lists, under any
-- spelling, is refused with an error that names it: PGMQ keeps 'Billing' and 'billing' as two
-- meta rows over one table pair, so adopting either would mix an application's messages with the
-- flow's, and dropping it with the flow would destroy the application's queue.
create or replace function pgflow._provision_own_queue(p_queue text, p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  owner_flow text;
  spellings text[];
begin
  -- The same lock shared-queue declaration takes on a name, so the two never race for one.
  perform pg_advisory_xact_lock(pgflow._queue_lock_key(p_queue));
  select c.flow_slug into owner_flow from pgflow.created_queues c where c.queue_name = p_queue;
  if owner_flow is not null and owner_flow <> p_flow_slug then
    raise exception 'flow %: queue % belongs to flow %', p_flow_slug, p_queue, owner_flow
      using errcode = '55000', hint = 'use another flow slug';
  end if;
  -- Only a default queue can be: private names contain '__', which shared names may not.
  if exists (select 1 from pgflow.shared_queues s where s.queue_name = p_queue) then
    raise exception 'flow %: a plain flow polls the queue named after its slug, and % is a shared queue declared with routeFlow()', p_flow_slug, p_queue
      using errcode = '55000',
        hint = format('give the flow another slug (e.g. %s_v2), or route its steps with routeFlow(flow, { queues: { ... } }) (they may use the shared queue %s)', p_flow_slug, p_queue);
  end if;

  select array_agg(q.queue_name::text order by q.queue_name) into spellings
  from pgmq.list_queues() q where lower(q.queue_name) = p_queue;
  if owner_flow is not null and spellings = array[p_queue] then
    return;  -- pgflow's own queue, already there
  end if;
  if spellings is not null then
    raise exception 'flow %: queue % already exists and pgflow did not create it for this flow; it will not adopt it',
      p_flow_slug, array_to_string(spellings, ', ')
      using errcode = '55000',
        hint = 'an application''s queue keeps its name: use another flow slug, or route the steps to shared queues with routeFlow()';
  end if;
  perform pgmq.create(p_queue);
  -- Re-created after someone dropped it: the record is already there.
  insert into pgflow.created_queues (queue_name, flow_slug) values (p_queue, p_flow_slug)
  on conflict (queue_name) do nothing;
end;
$$;
