-- The queues pgflow created for one flow's own use: a plain flow's default queue or a private step
-- queue (withStepQueues). Deletion drops a queue only when it is listed here for the deleted flow,
-- so an application's queue, or one pgflow found already there, is never dropped. Shared queues
-- have their own record (pgflow.shared_queues) and are never dropped with a flow.
create table if not exists pgflow.created_queues (
  queue_name text not null,
  flow_slug text not null,
  created_at timestamptz not null default now(),
  constraint created_queues_pkey primary key (queue_name),
  constraint created_queues_flow_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint created_queues_name_length check (length(queue_name) between 1 and 47)
);

create index if not exists created_queues_flow_idx on pgflow.created_queues (flow_slug);
