-- The support set of a worker: the exact (flow, step) pairs routed to one queue among the concrete
-- flows the worker was given, read from persisted routes (never from the worker's own claims).
create or replace function pgflow.queue_support_set(queue_name text, flow_slugs text[])
returns table (flow_slug text, step_slug text)
language sql
stable
set search_path = ''
as $$
  select s.flow_slug, s.step_slug
  from pgflow.steps s
  where s.queue_name = queue_support_set.queue_name and s.flow_slug = any (queue_support_set.flow_slugs)
  order by s.flow_slug, s.step_index
$$;
