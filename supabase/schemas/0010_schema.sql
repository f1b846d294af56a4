-- The pgflow schema. PGMQ comes from the extension where the server has it; on servers without it
-- the PGMQ-compatible SQL (local/pgmq.sql) is installed beforehand, so an existing pgmq schema is
-- never touched here.
do $$
begin
  if not exists (select 1 from pg_namespace where nspname = 'pgmq') then
    create extension if not exists pgmq;
  end if;
end
$$;

create schema if not exists pgflow;

-- Functions are granted explicitly; nothing in pgflow is callable by PUBLIC by default.
alter default privileges in schema pgflow revoke execute on functions from public;
