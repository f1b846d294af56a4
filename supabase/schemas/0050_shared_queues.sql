-- Shared-queue metadata and engine settings (the shared-queue maintenance upgrade).

-- The one pgflow-owned record that a queue name was declared shared (through routeFlow). A queue
-- PGMQ lists without a row here is not pgflow's to share: an external queue, a flow's default
-- queue or a private step queue.
create table if not exists pgflow.shared_queues (
  queue_name text not null,
  declared_by_flow text not null,
  declared_at timestamptz not null default now(),
  constraint shared_queues_pkey primary key (queue_name),
  constraint shared_queues_name_is_canonical check (pgflow.is_valid_queue_name(queue_name))
);

-- Engine settings an operator sets on purpose. 'local_development' = true lets a changed flow be
-- recompiled in place (deleting that flow's runs); it is never inferred, and absent means production.
-- 'worker_retention' is how long a stopped or silent worker's row is kept (pgflow.worker_retention()).
create table if not exists pgflow.settings (
  key text not null,
  value jsonb not null,
  updated_at timestamptz not null default now(),
  constraint settings_pkey primary key (key),
  constraint settings_key_known check (key in ('local_development', 'worker_retention'))
);

create or replace function pgflow.is_local_development()
returns boolean
language sql
stable
set search_path = ''
as $$
  select coalesce((select s.value = 'true'::jsonb from pgflow.settings s where s.key = 'local_development'), false)
$$;

-- Marks this database as a local development database (or not). Only for databases that hold no
-- production data: a changed flow definition then replaces the stored one and its runs.
create or replace function pgflow.set_local_development(enabled boolean)
returns void
language sql
volatile
set search_path = ''
as $$
  insert into pgflow.settings (key, value) values ('local_development', to_jsonb(coalesce(enabled, false)))
  on conflict (key) do update set value = excluded.value, updated_at = now()
$$;
