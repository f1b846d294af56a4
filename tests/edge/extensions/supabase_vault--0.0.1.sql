-- TEST-ONLY stand-in for Supabase Vault (installed by tests/edge/cluster.ts): Vault's names
-- (vault.secrets, vault.decrypted_secrets, vault.create_secret), no encryption at all.
create schema if not exists vault;

create table vault.secrets (
  id uuid primary key default gen_random_uuid(),
  name text unique,
  description text not null default '',
  secret text not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

create view vault.decrypted_secrets as
  select s.id, s.name, s.description, s.secret, s.secret as decrypted_secret, s.created_at, s.updated_at
  from vault.secrets s;

create function vault.create_secret(
  new_secret text,
  new_name text default null,
  new_description text default ''
)
returns uuid
language sql
volatile
set search_path = ''
as $$
  insert into vault.secrets (secret, name, description)
  values (new_secret, new_name, new_description)
  returning id
$$;

revoke all on schema vault from public;
