-- Workers and the functions that host them. A worker polls exactly one queue. worker_functions
-- carries the enable flag the deploy fence and the keep-alive respect. Function names are checked
-- where they are stored: the keep-alive joins them into a URL path.

-- A support set as an object keyed by flow || chr(31) || step (slugs never hold chr(31)): a key
-- lookup is a binary search, so membership costs the same for 1 or 1,000 pairs. Entries that are
-- not [string, string] pairs become the key '', which no task can match.
create or replace function pgflow._support_keys(p_supported jsonb)
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select coalesce(jsonb_object_agg(
           case when jsonb_typeof(e) = 'array' then coalesce(e ->> 0, '') || chr(31) || coalesce(e ->> 1, '') else '' end,
           true), '{}'::jsonb)
  from jsonb_array_elements(case when jsonb_typeof(p_supported) = 'array' then p_supported else '[]'::jsonb end) e
$$;

create table if not exists pgflow.workers (
  worker_id uuid not null,
  queue_name text not null,
  function_name text not null,
  started_at timestamptz not null default now(),
  last_heartbeat_at timestamptz not null default now(),
  deprecated_at timestamptz,
  stopped_at timestamptz,
  -- The exact (flow, step) pairs the worker has handlers for, as [[flow, step], ...]: what the
  -- coverage check compares with the routes.
  supported jsonb not null default '[]'::jsonb,
  -- The same pairs as an object keyed by flow || chr(31) || step, kept by Postgres whenever
  -- `supported` is written, so a claim against the registered set is a key lookup instead of
  -- unpacking the pairs per batch.
  supported_keys jsonb generated always as (pgflow._support_keys(supported)) stored,
  -- The one visibility (timeout + 2 s) every step of `supported` had at registration, NULL when
  -- they differ: read_and_claim reads with it, so the messages it claims need no set_vt. Only a
  -- hint: each claim still checks every claimed message against its step's timeout now.
  claim_visibility integer,
  constraint workers_pkey primary key (worker_id),
  constraint workers_function_name_is_valid check (pgflow.is_valid_function_name(function_name))
);

create index if not exists workers_queue_heartbeat_idx on pgflow.workers (queue_name, last_heartbeat_at);
create index if not exists workers_function_idx on pgflow.workers (function_name);
-- Every worker start adds a row (an Edge isolate lives a few minutes), and old rows go only after
-- the retention (pgflow.worker_retention()), so the hot reads (the keep-alive every few seconds,
-- coverage, fence status) must not scan the history: they read the recently seen workers by
-- heartbeat range (pgflow._recent_workers), and pruning reads the oldest by the same index.
create index if not exists workers_heartbeat_idx on pgflow.workers (last_heartbeat_at);

create table if not exists pgflow.worker_functions (
  function_name text not null,
  enabled boolean not null default true,
  debounce interval not null default '6 seconds',
  last_invoked_at timestamptz,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint worker_functions_pkey primary key (function_name),
  constraint worker_functions_name_is_valid check (pgflow.is_valid_function_name(function_name)),
  constraint worker_functions_debounce_range check (debounce >= '1 second')
);
