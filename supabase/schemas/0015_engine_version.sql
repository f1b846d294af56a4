-- Which engine release this database runs, and which of its migrations built it.
--
-- pgflow.engine_version() is the version of @pgflow/shared whose migrations built this schema; a
-- release that changes the schema sets it again in its last migration. A worker compares it with
-- the version it was built for when it starts, and refuses to start on a mismatch, naming both
-- versions and the command that fixes it.
create or replace function pgflow.engine_version()
returns text
language sql
immutable
set search_path = ''
as $$
  select '0.1.0'::text
$$;

-- The engine migrations applied here, by the name the engine ships them under (file name without
-- `.sql`; `pgflow install` copies them into a project under new timestamps, the name here stays the
-- engine's). Every migration records itself, so the list is the same however the files were
-- applied (supabase db push, psql -f, pgflow migrate); `pgflow migrate` reads it to apply only
-- what is missing, and refuses a list with a gap or a name it does not ship.
create table if not exists pgflow.migrations (
  name text not null,
  applied_at timestamptz not null default now(),
  constraint migrations_pkey primary key (name),
  constraint migrations_name_is_a_migration check (name ~ '^[0-9]{14}_[a-z0-9_]+$')
);
