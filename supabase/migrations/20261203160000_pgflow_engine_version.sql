-- The engine version and the migration record (issue 16, item 3): pgflow.engine_version() says
-- which release built this schema, and workers check it when they start; pgflow.migrations lists
-- the engine migrations applied. This migration records the ones before it (the files apply in
-- order, so they are all here) and itself. Every later migration records itself as its last
-- statement, so the record is the same however the files are applied. Nothing else changes.
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if to_regclass('pgflow.migrations') is not null then
    if exists (select 1 from pgflow.migrations m where m.name = '20261203160000_pgflow_engine_version') then
      raise exception 'pgflow migration 20261203160000_pgflow_engine_version is already applied to this database; nothing was changed'
        using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
    end if;
  end if;
end
$$;

set local lock_timeout = '5s';

do $$
begin
  if to_regclass('pgflow.created_queues') is null then
    raise exception 'pgflow_engine_version needs the earlier pgflow migrations first (pgflow.created_queues is missing)'
      using hint = 'apply the engine''s migrations in order: pgflow migrate, or supabase db push after pgflow install';
  end if;
end
$$;

-- ---- schemas/0015_engine_version.sql
create or replace function pgflow.engine_version()
returns text
language sql
immutable
set search_path = ''
as $$
  select '0.1.0'::text
$$;

create table if not exists pgflow.migrations (
  name text not null,
  applied_at timestamptz not null default now(),
  constraint migrations_pkey primary key (name),
  constraint migrations_name_is_a_migration check (name ~ '^[0-9]{14}_[a-z0-9_]+$')
);

-- ---- schemas/0900_privileges.sql
revoke execute on all functions in schema pgflow from public;

insert into pgflow.migrations (name) values
  ('20261202163423_pgflow_base'),
  ('20261202170000_pgflow_shared_queues'),
  ('20261202180000_pgflow_engine_features'),
  ('20261203100000_pgflow_review_fixes'),
  ('20261203120000_pgflow_lean_reads'),
  ('20261203140000_pgflow_unregistered_code'),
  ('20261203160000_pgflow_engine_version')
on conflict (name) do nothing;

commit;
