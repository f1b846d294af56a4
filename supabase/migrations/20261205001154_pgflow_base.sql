-- pgflow_base: the engine of @pgflow/shared 0.1.0, every file of supabase/schemas/ in order.
-- Written by `deno task migration:baseline` (local/new_migration.ts): change the schema files,
-- not this file. Later releases add one migration each (docs/upgrade.md).
-- One transaction: applied whole or not at all, however it is run (psql -f, supabase db push,
-- pgflow migrate).
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if to_regclass('pgflow.migrations') is not null then
    if exists (select 1 from pgflow.migrations m where m.name = '20261205001154_pgflow_base') then
      raise exception 'pgflow migration 20261205001154_pgflow_base is already applied to this database; nothing was changed'
        using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
    end if;
  end if;
end
$$;

-- ---- schemas/0010_schema.sql
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

-- ---- schemas/0015_engine_version.sql
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

-- ---- schemas/0020_names.sql
-- Slug and queue-name rules. The TypeScript DSL mirrors these exactly (src/dsl, src/routing).

-- Letters, digits and single underscores, starting with a letter, no leading or trailing '_',
-- no '__', at most 128 characters, and not the reserved word 'run'.
create or replace function pgflow.is_valid_slug(slug text)
returns boolean
language sql
immutable
set search_path = ''
as $$
  select slug is not null
    and length(slug) <= 128
    and slug ~ '^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*$'
    and slug <> 'run'
$$;

-- Explicit (shared) queue names: canonical lowercase, no '__' (generated private names contain
-- '__', so the two can never collide), at most 47 characters (PGMQ's limit).
create or replace function pgflow.is_valid_queue_name(queue_name text)
returns boolean
language sql
immutable
set search_path = ''
as $$
  select queue_name is not null
    and length(queue_name) <= 47
    and queue_name ~ '^[a-z][a-z0-9_]*$'
    and position('__' in queue_name) = 0
$$;

-- The private queue of one step (withStepQueues): lower(flow__step) when it fits in 47 characters,
-- else lower(flow__<index>); an error when even that does not fit.
create or replace function pgflow.private_queue_name(flow_slug text, step_slug text, step_index integer)
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  by_slug text := lower(flow_slug || '__' || step_slug);
  by_index text := lower(flow_slug || '__' || step_index::text);
begin
  if length(by_slug) <= 47 then
    return by_slug;
  elsif length(by_index) <= 47 then
    return by_index;
  end if;
  raise exception 'private queue name for step %.% does not fit in 47 characters: %', flow_slug, step_slug, by_index
    using errcode = '22023', hint = 'use a flow slug of at most ' || (45 - length(step_index::text)) || ' characters, or route the step to a shared queue';
end;
$$;

-- Worker function names (Supabase Edge Function names): 1-128 letters, digits, '_' or '-', the same
-- rule as the worker's functionName option (src/worker/config.ts). The keep-alive puts the name
-- into a URL path (/functions/v1/<name>), so nothing else ('/', '.', '?', '%', spaces) may appear.
create or replace function pgflow.is_valid_function_name(function_name text)
returns boolean
language sql
immutable
set search_path = ''
as $$
  select function_name is not null and function_name ~ '^[A-Za-z0-9_-]{1,128}$'
$$;

-- ---- schemas/0025_option_bounds.sql
-- The accepted range of every numeric flow and step option: integers, both ends included, durations
-- in seconds. The TypeScript DSL validates against the same table (OPTION_BOUNDS in
-- src/dsl/options.ts); both are tested against tests/fixtures/option_bounds.json.
--
-- The maxima keep every value SQL derives from an option far inside integer: a claim hides a
-- message for timeout + 2 s, stalled recovery waits timeout + 30 s, a retry waits
-- base_delay * 2^(attempt - 1) (capped). Without them one flow's timeout near 2^31 made every claim
-- batch on its queue fail, and stalled recovery fail for the whole database.
create or replace function pgflow.option_bounds()
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select '{
    "maxAttempts": {"min": 1, "max": 1000},
    "baseDelay": {"min": 1, "max": 31536000},
    "timeout": {"min": 3, "max": 31536000},
    "startDelay": {"min": 0, "max": 31536000}
  }'::jsonb
$$;

-- Whether a value is inside its option's bounds; NULL (an unset step option) is. The table checks
-- call this, so a value written directly into pgflow.flows or pgflow.steps is held to the same
-- table as the definition functions.
create or replace function pgflow.option_in_bounds(option_name text, option_value integer)
returns boolean
language sql
immutable
set search_path = ''
as $$
  select option_value is null
    or (option_value >= (pgflow.option_bounds() -> option_name ->> 'min')::integer
        and option_value <= (pgflow.option_bounds() -> option_name ->> 'max')::integer)
$$;

-- Raises, naming the option (as the DSL spells it and as SQL does) and the value, when a value is
-- outside its bounds, or NULL where a value is required. p_where names the flow or step.
create or replace function pgflow._check_option(
  p_where text, p_option text, p_sql_name text, p_value integer, p_required boolean
)
returns void
language plpgsql
immutable
set search_path = ''
as $$
declare
  b jsonb := pgflow.option_bounds() -> p_option;
begin
  if (p_value is null and p_required) or not pgflow.option_in_bounds(p_option, p_value) then
    raise exception '%: % (%) must be an integer between % and %, got %', p_where, p_option, p_sql_name,
      b ->> 'min', b ->> 'max', coalesce(p_value::text, 'NULL')
      using errcode = '22023',
        hint = format('%s is %s from %s to %s', p_option,
                      case when p_option = 'maxAttempts' then 'a count' else 'a number of seconds' end,
                      b ->> 'min', b ->> 'max');
  end if;
end;
$$;

-- What an unset flow option is stored as (a step's unset maxAttempts, baseDelay and timeout inherit
-- the flow's; its startDelay is 0). The one place these defaults are written: the flows table,
-- create_flow and the startup compiler read them here.
create or replace function pgflow.flow_option_default(option_name text)
returns integer
language sql
immutable
set search_path = ''
as $$
  select case option_name when 'maxAttempts' then 3 when 'baseDelay' then 1 when 'timeout' then 60 end
$$;

-- ---- schemas/0030_definitions.sql
-- Flow definitions: flows, their steps and the dependencies between steps. The shape (steps, order,
-- dependencies, types, conditions) is kept apart from the route (steps.queue_name) and from the
-- runtime-tunable options (opt_*), which stay inside pgflow.option_bounds().

create table if not exists pgflow.flows (
  flow_slug text not null,
  opt_max_attempts integer not null default pgflow.flow_option_default('maxAttempts'),
  opt_base_delay integer not null default pgflow.flow_option_default('baseDelay'),
  opt_timeout integer not null default pgflow.flow_option_default('timeout'),
  queue_mode text not null default 'flow',
  -- The stable name callers may start this version through (pgflow.aliases), or NULL.
  alias text,
  created_at timestamptz not null default now(),
  constraint flows_pkey primary key (flow_slug),
  constraint flows_slug_is_valid check (pgflow.is_valid_slug(flow_slug)),
  constraint flows_max_attempts_range check (pgflow.option_in_bounds('maxAttempts', opt_max_attempts)),
  constraint flows_base_delay_range check (pgflow.option_in_bounds('baseDelay', opt_base_delay)),
  constraint flows_timeout_range check (pgflow.option_in_bounds('timeout', opt_timeout)),
  constraint flows_queue_mode_known check (queue_mode in ('flow', 'step', 'routed')),
  constraint flows_alias_is_valid check (alias is null or pgflow.is_valid_slug(alias))
);

-- Flow slugs are unique case-insensitively: 'Triage' and 'triage' would share a default queue.
create unique index if not exists flows_slug_lower_key on pgflow.flows (lower(flow_slug));

create table if not exists pgflow.steps (
  flow_slug text not null,
  step_slug text not null,
  step_index integer not null,
  step_type text not null default 'single',
  deps_count integer not null default 0,
  opt_max_attempts integer,
  opt_base_delay integer,
  opt_timeout integer,
  opt_start_delay integer not null default 0,
  required_input_pattern jsonb,
  forbidden_input_pattern jsonb,
  when_unmet text not null default 'skip',
  when_exhausted text not null default 'fail',
  -- The route: the queue this step's tasks are sent to. Tasks snapshot it when they are created.
  queue_name text not null,
  -- Flow control (0255_limits.sql): the step's priority among tasks waiting for capacity; the
  -- scope of its concurrency limit (NULL: unlimited; the limit itself is pgflow.concurrency_limits'
  -- row for the scope, so it changes without a new version); the JSON path giving each task's key
  -- within the scope (NULL: one key for all), read from the run input ('run') or the step's own
  -- input ('input').
  priority integer not null default 0,
  concurrency_scope text,
  concurrency_key jsonpath,
  concurrency_key_from text,
  -- Its rate limit (0262_rate_limits.sql): the scope (NULL: none; the limit and interval are
  -- pgflow.rate_limits' row for the scope, as for concurrency) and the key path, read as above.
  rate_scope text,
  rate_key jsonpath,
  rate_key_from text,
  -- What does the step's work: 'task' steps run a handler; the other kinds complete from SQL and
  -- never have a message: 'event' and 'sleep' wait for an event or a time (0280_events.sql),
  -- 'flow' for child runs (0290_child_flows.sql).
  kind text not null default 'task',
  created_at timestamptz not null default now(),
  constraint steps_pkey primary key (flow_slug, step_slug),
  constraint steps_flow_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint steps_index_key unique (flow_slug, step_index),
  constraint steps_slug_is_valid check (pgflow.is_valid_slug(step_slug)),
  constraint steps_index_range check (step_index >= 0),
  constraint steps_type_known check (step_type in ('single', 'map')),
  constraint steps_kind_known check (kind in ('task', 'event', 'sleep', 'flow')),
  constraint steps_deps_count_range check (deps_count >= 0),
  constraint steps_max_attempts_range check (pgflow.option_in_bounds('maxAttempts', opt_max_attempts)),
  constraint steps_base_delay_range check (pgflow.option_in_bounds('baseDelay', opt_base_delay)),
  constraint steps_timeout_range check (pgflow.option_in_bounds('timeout', opt_timeout)),
  constraint steps_start_delay_range check (pgflow.option_in_bounds('startDelay', opt_start_delay)),
  constraint steps_when_unmet_known check (when_unmet in ('fail', 'skip', 'skip-cascade')),
  constraint steps_when_exhausted_known check (when_exhausted in ('fail', 'skip', 'skip-cascade')),
  constraint steps_map_single_dep check (step_type <> 'map' or deps_count <= 1),
  constraint steps_queue_name_length check (length(queue_name) between 1 and 47),
  constraint steps_priority_range check (priority between -1000 and 1000),
  constraint steps_concurrency_key_has_scope check (concurrency_key is null or concurrency_scope is not null),
  constraint steps_concurrency_key_from_known check (
    (concurrency_key is null and concurrency_key_from is null)
    or (concurrency_key is not null and concurrency_key_from in ('run', 'input'))),
  constraint steps_rate_key_has_scope check (rate_key is null or rate_scope is not null),
  constraint steps_rate_key_from_known check (
    (rate_key is null and rate_key_from is null)
    or (rate_key is not null and rate_key_from in ('run', 'input')))
);

create unique index if not exists steps_slug_lower_key on pgflow.steps (flow_slug, lower(step_slug));
create index if not exists steps_queue_name_idx on pgflow.steps (queue_name);

create table if not exists pgflow.deps (
  flow_slug text not null,
  dep_slug text not null,
  step_slug text not null,
  created_at timestamptz not null default now(),
  constraint deps_pkey primary key (flow_slug, dep_slug, step_slug),
  constraint deps_dep_fkey foreign key (flow_slug, dep_slug) references pgflow.steps (flow_slug, step_slug),
  constraint deps_step_fkey foreign key (flow_slug, step_slug) references pgflow.steps (flow_slug, step_slug),
  constraint deps_not_self check (dep_slug <> step_slug)
);

create index if not exists deps_step_idx on pgflow.deps (flow_slug, step_slug);

-- Aliases: a stable name that points at exactly one concrete version (a flow carrying that alias).
-- Created by the first compile of a flow with the alias; only pgflow.activate_alias moves it, and
-- only to a flow that carries it. No foreign key to flows: a local-development recompile deletes
-- and recreates the flow it points at. Deleting the flow it points at deletes it too when no other
-- version carries it, and is refused otherwise (pgflow._release_aliases); start_flow still names a
-- missing target rather than fail obscurely.
create table if not exists pgflow.aliases (
  alias text not null,
  flow_slug text not null,
  updated_at timestamptz not null default now(),
  constraint aliases_pkey primary key (alias),
  constraint aliases_alias_is_valid check (pgflow.is_valid_slug(alias))
);

-- Every move of an alias: who, when, from, to, and the target's pairs no live worker served.
create table if not exists pgflow.alias_activations (
  activation_id bigint generated always as identity,
  alias text not null,
  from_slug text not null,
  to_slug text not null,
  activated_by text not null default current_user,
  activated_at timestamptz not null default now(),
  forced boolean not null default false,
  uncovered jsonb not null default '[]'::jsonb,
  constraint alias_activations_pkey primary key (activation_id)
);
create index if not exists alias_activations_alias_idx on pgflow.alias_activations (alias, activated_at);

-- ---- schemas/0035_workers.sql
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

-- ---- schemas/0040_runtime.sql
-- Runtime state: runs, the state of each step in a run, and tasks. Every task stores a snapshot of
-- the queue its message was sent to; with the message id it is the task's message identity.

create table if not exists pgflow.runs (
  run_id uuid not null default gen_random_uuid(),
  flow_slug text not null,
  status text not null default 'started',
  input jsonb not null,
  output jsonb,
  remaining_steps integer not null default 0,
  error_message text,
  started_at timestamptz not null default now(),
  completed_at timestamptz,
  failed_at timestamptz,
  cancelled_at timestamptz,
  -- What the operator gave as the reason (pgflow.cancel_run), or NULL.
  cancel_reason text,
  -- The run this one retries or resumes (pgflow.retry_run, resume_run), as lineage only: no
  -- foreign key, so the source can be pruned before its restarts.
  restart_of_run_id uuid,
  restart_mode text,
  -- The alias the run was started through (start_flow with an alias), NULL when started by its
  -- concrete slug.
  started_as text,
  -- Added to each step's priority on the run's tasks that wait for capacity (docs/flow-control.md):
  -- a higher one is released first. Set at start (start_flow's priority), kept by a retry or resume.
  priority integer not null default 0,
  -- The W3C trace context the run was started in (start_flow's traceparent), NULL when untraced:
  -- a run outlives any process, so every attempt's and step's span finds its trace here
  -- (docs/telemetry.md). Kept by a retry or resume, so a restart stays in the source's trace.
  traceparent text,
  constraint runs_pkey primary key (run_id),
  constraint runs_flow_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint runs_status_known check (status in ('started', 'completed', 'failed', 'cancelled')),
  constraint runs_restart_mode_known check (restart_mode in ('retry', 'resume')),
  constraint runs_restart_has_source check ((restart_mode is null) = (restart_of_run_id is null)),
  constraint runs_remaining_steps_range check (remaining_steps >= 0),
  constraint runs_priority_range check (priority between -1000 and 1000),
  constraint runs_traceparent_format check (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$')
);

create index if not exists runs_flow_status_idx on pgflow.runs (flow_slug, status);
-- Newest runs first (the dashboard's search, list_runs, runs started since a time) read the end
-- of this index instead of sorting every run kept: with a million runs of history a sort costs
-- seconds. started_at only grows, so its entries go to the index's right edge; each run adds two
-- (start_flow's insert, and its status change, never a HOT update).
create index if not exists runs_started_at_idx on pgflow.runs (started_at);
-- The restarts of a run (its retries and resumes), for the run view's lineage. Partial: a run that
-- is not a restart, i.e. nearly every run start_flow inserts, adds no entry.
create index if not exists runs_restart_of_idx on pgflow.runs (restart_of_run_id)
  where restart_of_run_id is not null;

create table if not exists pgflow.step_states (
  run_id uuid not null,
  flow_slug text not null,
  step_slug text not null,
  status text not null default 'created',
  remaining_deps integer not null default 0,
  remaining_tasks integer,
  initial_tasks integer,
  -- The step's output once completed: a single step's task output, a map step's outputs in index
  -- order. Stored exactly: 0, false, "" and null stay distinct.
  output jsonb,
  skip_reason text,
  error_message text,
  created_at timestamptz not null default now(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  skipped_at timestamptz,
  cancelled_at timestamptz,
  -- Completed by pgflow.resume_run from the source run's result, not run again.
  reused boolean not null default false,
  constraint step_states_pkey primary key (run_id, step_slug),
  constraint step_states_run_fkey foreign key (run_id) references pgflow.runs (run_id),
  constraint step_states_step_fkey foreign key (flow_slug, step_slug) references pgflow.steps (flow_slug, step_slug),
  constraint step_states_status_known check (status in ('created', 'started', 'completed', 'failed', 'skipped', 'cancelled')),
  constraint step_states_remaining_deps_range check (remaining_deps >= 0),
  constraint step_states_remaining_tasks_range check (remaining_tasks is null or remaining_tasks >= 0)
);

-- The latest failed steps (the dashboard's Recent failures) without reading every failed step kept.
-- Partial: a step that completes never enters it, so the hot path pays nothing.
create index if not exists step_states_failed_idx on pgflow.step_states (failed_at desc nulls last)
  where status = 'failed';

create table if not exists pgflow.step_tasks (
  run_id uuid not null,
  flow_slug text not null,
  step_slug text not null,
  task_index integer not null default 0,
  status text not null default 'queued',
  -- Snapshot of the step's route when the task was created; never changes afterwards.
  queue_name text not null,
  message_id bigint,
  -- A map task's element, copied out of the array it maps over when the task is created (one pass
  -- over the array), NULL for a single step's task. Reading element i from the array at each claim
  -- decompressed the whole array per task: a 100,000-element map spent minutes in its claims.
  input jsonb,
  attempts_count integer not null default 0,
  -- Attempts that did not count toward maxAttempts: deferred by the handler (Retry-After) or
  -- interrupted by its worker's shutdown (0515_uncounted_attempts.sql). attempts_count stays the
  -- number of claims, so each claim keeps its own attempt number (reports and history name it);
  -- what maxAttempts and the backoff count is attempts_count - uncounted_attempts.
  uncounted_attempts integer not null default 0,
  output jsonb,
  error_message text,
  last_worker_id uuid,
  queued_at timestamptz not null default now(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  -- Flow control (0260_flow_control.sql). A task of a step with a concurrency limit names the
  -- limit's scope and the key its input gave (computed once, when the task is created); it holds
  -- one unit of that (scope, key)'s capacity while it is queued or started, and waits without a
  -- message ('waiting') until a unit is free. priority is the run's plus the step's, and orders
  -- the waiting tasks of one (scope, key). All NULL / 0 for a task of an unlimited step.
  priority integer not null default 0,
  limit_scope text,
  limit_key text,
  -- A task of a step with a rate limit (0262_rate_limits.sql) names its scope and key the same
  -- way. It is created as any other; a claim that finds its key's window of start times full
  -- sends it back to 'waiting' (its message archived) with not_before, the earliest time a start
  -- may fit, and a release after that time sends a new message. NULL for an unlimited step.
  rate_scope text,
  rate_key text,
  not_before timestamptz,
  constraint step_tasks_pkey primary key (run_id, step_slug, task_index),
  -- The step state's key names the step: its own foreign key (step_states_step_fkey) holds the
  -- step's definition, so a task needs none to the steps. One would check and lock the step's
  -- definition row on every task insert: a row every run of the flow shares, locked anew (a WAL
  -- record, and a multixact while another transaction holds it) by each chain hop's transaction.
  constraint step_tasks_step_state_fkey foreign key (run_id, step_slug) references pgflow.step_states (run_id, step_slug),
  constraint step_tasks_status_known check (status in ('waiting', 'queued', 'started', 'completed', 'failed', 'cancelled')),
  constraint step_tasks_task_index_range check (task_index >= 0),
  -- A waiting task has no message: it is sent when the task is released.
  constraint step_tasks_waiting_has_no_message check (status <> 'waiting' or message_id is null),
  constraint step_tasks_limit_key_has_scope check (limit_key is null or limit_scope is not null),
  constraint step_tasks_rate_key_has_scope check (rate_key is null or rate_scope is not null),
  constraint step_tasks_not_before_is_rate_limited check (not_before is null or rate_scope is not null),
  constraint step_tasks_attempts_range check (attempts_count >= 0),
  constraint step_tasks_uncounted_range check (uncounted_attempts between 0 and attempts_count)
);

-- A message id means nothing without its queue: (queue_name, message_id) identifies one task.
create unique index if not exists step_tasks_message_key on pgflow.step_tasks (queue_name, message_id)
  where message_id is not null;
-- Stalled recovery scans started tasks.
create index if not exists step_tasks_started_idx on pgflow.step_tasks (started_at)
  where status = 'started';
-- The waiting tasks of one (scope, key), in release order. Partial: with no task waiting it is
-- empty, and a task without a concurrency scope (a task of an unlimited step waiting for its turn
-- on a shared queue, 0258_fair_window.sql, or for a rate limit alone) never enters it: a parked
-- backlog would otherwise grow it by an entry per task, and a release of turns could be planned
-- through it (limit_scope is null) instead of its own index.
create index if not exists step_tasks_waiting_idx
  on pgflow.step_tasks (limit_scope, limit_key, priority desc, queued_at)
  where status = 'waiting' and limit_scope is not null;
-- The tasks holding capacity of one (scope, key), counted under its lock on every release.
-- Partial: a task of an unlimited step never enters it.
create index if not exists step_tasks_holding_idx on pgflow.step_tasks (limit_scope, limit_key)
  where limit_scope is not null and status in ('queued', 'started');
-- The waiting tasks a rate limit holds back, by when they may go (the periodic release reads the
-- due ones), and the rate-limited tasks released but not yet started, counted per key so a release
-- does not send more than the key's window has room for. Partial: only rate-limited tasks enter.
create index if not exists step_tasks_rate_waiting_idx on pgflow.step_tasks (not_before)
  where status = 'waiting' and not_before is not null;
create index if not exists step_tasks_rate_queued_idx on pgflow.step_tasks (rate_scope, rate_key)
  where rate_scope is not null and status = 'queued';
-- No (run_id, status) index: every lookup of a run's tasks by status names the run, which the
-- primary key's leading column finds, and each index is one more entry for every task update (none
-- of which is HOT: each changes message_id, status or started_at).
--
-- last_worker_id names the worker that claimed the task last, as history: no index and no foreign
-- key. Both cost every claim (an index entry, and a lookup of the worker's row) and every
-- completion (an index entry), and the only questions asked by worker (does a worker hold a
-- started task; how many started tasks do a function's workers hold) are about started tasks,
-- which step_tasks_started_idx finds. A pruned worker's id stays on the tasks it ran.

-- Attempt history: one row per attempt of a task that ended other than by completing it (a handler
-- error, stalled recovery taking it back, its run cancelled while it ran, a handler asking to be
-- retried later (deferred), its worker shutting down under it (interrupted)). The attempt that
-- completed a task is the task row itself (status, attempts_count, started_at, completed_at,
-- last_worker_id), so the completion path writes nothing here. Never inputs, outputs or bodies:
-- the error's text and a bounded stack trace. Deleted with its task (pruning, delete_flow).
create table if not exists pgflow.task_attempts (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  attempt integer not null,
  worker_id uuid,
  started_at timestamptz,
  ended_at timestamptz not null default clock_timestamp(),
  outcome text not null,
  error_message text,
  error_stack text,
  constraint task_attempts_pkey primary key (run_id, step_slug, task_index, attempt),
  constraint task_attempts_task_fkey foreign key (run_id, step_slug, task_index)
    references pgflow.step_tasks (run_id, step_slug, task_index) on delete cascade,
  constraint task_attempts_outcome_known check (outcome in ('failed', 'stalled', 'cancelled', 'deferred', 'interrupted')),
  constraint task_attempts_attempt_range check (attempt >= 1),
  constraint task_attempts_error_bounded check (length(error_message) <= 2000 and length(error_stack) <= 4000)
);

-- ---- schemas/0045_listeners.sql
-- Who is waiting for a notification, so that a transaction notifies only when someone is.
--
-- Postgres serialises every committing transaction that sent a NOTIFY behind one lock for the
-- whole server (the notification queue's, held across the commit's WAL flush), so a NOTIFY on
-- every completion makes concurrent workers commit one at a time. Yet under load nobody waits:
-- busy workers read again at once, and most runs have no watcher. So a session that waits for a
-- channel says so here (pgflow.listen_start), and pgflow._announce sends a channel's notification
-- only while some session waits for it.
--
-- The race this must not lose: a sender looks here before the waiter's row is visible and so
-- does not notify, but commits only after the waiter's next read, which then misses the work;
-- the waiter would sleep through it. The barrier closes it: a sender holds a shared advisory lock
-- on the channel's bucket from before it looks until its transaction ends, and a waiter, after
-- its row is committed, takes that lock exclusively for an instant (pgflow.listen_barrier).
-- Every sender that looked too early has then committed, so a read made after the barrier sees
-- its work. A sender that cannot take the shared lock (a barrier holds it for that instant, or
-- anyone else holds it) notifies anyway: a notification too many is never wrong.
--
-- Unlogged: the rows describe live sessions, which a crash ends anyway (the table is emptied on
-- crash recovery, and every listener registers again when it reconnects), and writing them costs
-- no WAL flush.
create unlogged table if not exists pgflow.listeners (
  channel text not null,
  -- The backend of the waiting session; rows of backends that have ended are removed by the
  -- next listen_start.
  pid integer not null,
  since timestamptz not null default now(),
  constraint listeners_pkey primary key (channel, pid)
);

-- Sends p_payload on p_channel (at commit, like pg_notify) if a session waits for it, as
-- pgflow._notify_needed decides (0090_inline_helpers.sql: the barrier's lock, then the listeners).
-- The run-event trigger (pgflow._run_changed, 0850_run_events.sql) decides the same way.
create or replace function pgflow._announce(p_channel text, p_payload text)
returns void
language plpgsql
volatile
-- Runs inside whatever changed a run or sent a message, as whichever role did; the listeners
-- table is readable by the owner only (it names the runs being watched).
security definer
set search_path = ''
as $$
begin
  if (select n from pgflow._notify_needed(p_channel) n) then
    perform pg_notify(p_channel, p_payload);
  end if;
end;
$$;

-- The channels pgflow notifies: a queue's work (pgflow_queue:<queue>) and a run's changes
-- (pgflow_run:<run id>), within Postgres's 63-byte limit on channel names.
create or replace function pgflow._check_listen_channels(p_channels text[])
returns void
language plpgsql
immutable
set search_path = ''
as $$
declare
  bad text;
begin
  select c into bad from unnest(p_channels) c
  where c is null or c !~ '^pgflow_(queue|run):.' or octet_length(c) > 63
  limit 1;
  if bad is not null or p_channels is null then
    raise exception 'not a pgflow notification channel: %', coalesce(quote_literal(bad), 'NULL')
      using errcode = '22023',
            hint = 'Channels are pgflow_queue:<queue> or pgflow_run:<run id>, at most 63 bytes.';
  end if;
end;
$$;

-- Registers the calling session as waiting for notifications on p_channels; the session LISTENs
-- on them itself. Then call pgflow.listen_barrier, in a later transaction, before reading what the
-- notifications would announce.
create or replace function pgflow.listen_start(p_channels text[])
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform pgflow._check_listen_channels(p_channels);
  -- Rows left by sessions that ended without listen_stop (a crash, a lost connection) would
  -- only make senders notify for nobody; they go here rather than on the senders' path, once per
  -- session (a client watching many runs calls this for each), in one pass over the backends.
  if current_setting('pgflow.listeners_swept', true) is distinct from 'yes' then
    delete from pgflow.listeners l
    where l.pid not in (select a.pid from pg_stat_get_activity(null) a where a.pid is not null);
    perform set_config('pgflow.listeners_swept', 'yes', false);
  end if;
  insert into pgflow.listeners (channel, pid)
  select distinct c, pg_backend_pid() from unnest(p_channels) c
  on conflict on constraint listeners_pkey do nothing;
end;
$$;

-- The calling session no longer waits for p_channels.
create or replace function pgflow.listen_stop(p_channels text[])
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform pgflow._check_listen_channels(p_channels);
  delete from pgflow.listeners l where l.pid = pg_backend_pid() and l.channel = any (p_channels);
end;
$$;

-- Waits until every sender that may have missed this session's listen_start has committed: true
-- then, and a read made from now on sees all the work no notification will announce. False when a
-- channel's bucket stayed taken for about 20 ms (a long transaction that sent work, or a lock
-- held by someone else): call it again later, and read again when it returns true. Never waits
-- for the lock itself: a waiting exclusive request would hold back every sender queued behind it.
create or replace function pgflow.listen_barrier(p_channels text[])
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  bucket integer;
  tries integer;
  -- A sender holds the lock for the rest of its transaction: a few milliseconds, unless it is a
  -- long one. 20 tries 1 ms apart wait out the short ones and give up on the rest.
  max_tries constant integer := 20;
  pause_seconds constant float8 := 0.001;
begin
  perform pgflow._check_listen_channels(p_channels);
  for bucket in select distinct pgflow._listen_bucket(c) from unnest(p_channels) c order by 1 loop
    tries := 0;
    while not pg_try_advisory_lock(pgflow._listen_lock_class(), bucket) loop
      tries := tries + 1;
      if tries > max_tries then
        return false;
      end if;
      perform pg_sleep(pause_seconds);
    end loop;
    perform pg_advisory_unlock(pgflow._listen_lock_class(), bucket);
  end loop;
  return true;
end;
$$;

-- ---- schemas/0050_shared_queues.sql
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

-- ---- schemas/0055_created_queues.sql
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

-- ---- schemas/0060_deploy_fences.sql
-- The deploy fence: replacing a complete set of worker functions in place. A fence records each
-- function's enabled flag before disabling it, so ending the fence restores exactly what was there
-- (a function an operator had disabled on purpose stays disabled).

create table if not exists pgflow.deploy_fences (
  fence_id bigint generated always as identity,
  note text,
  started_at timestamptz not null default now(),
  ended_at timestamptz,
  constraint deploy_fences_pkey primary key (fence_id)
);

create table if not exists pgflow.deploy_fence_functions (
  fence_id bigint not null,
  function_name text not null,
  was_enabled boolean not null,
  constraint deploy_fence_functions_pkey primary key (fence_id, function_name),
  constraint deploy_fence_functions_fence_fkey foreign key (fence_id) references pgflow.deploy_fences (fence_id),
  constraint deploy_fence_functions_function_fkey foreign key (function_name) references pgflow.worker_functions (function_name)
);

-- ---- schemas/0080_integrations.sql
-- Optional integrations: Supabase Realtime (realtime.send), pg_net (net.http_post), Vault
-- (vault.decrypted_secrets) and pg_cron (cron.schedule). The engine calls them where they are
-- installed, from functions that run with their owner's rights (the run-event triggers fire inside
-- the security definer start_flow; ensure_workers and schedule_maintenance run as the owner or as
-- pg_cron). So "a schema of that name exists" is not enough: on a database without the
-- integration, any role allowed to create a schema could plant a function of that name and have
-- the engine's owner run it (a planted realtime.send ran `alter role ... superuser` through the
-- next start_flow). An integration is used only when the object found is the real one:
--
-- - pg_net, Vault and pg_cron are extensions: the object must be a member of that extension
--   (pg_depend). Only a superuser, or the installer of a trusted extension, can make an object a
--   member, and the extension's name is the one its control file on the server gives.
-- - Realtime is not an extension: Supabase's Realtime service creates realtime.send, owned by
--   supabase_realtime_admin (older projects: supabase_admin). The function must be owned by a
--   superuser or by one of those two platform roles; a role that may only create schemas can make
--   neither, and cannot hand a function it created to them.
--
-- Every check reads the catalogs at call time (a project that adds an integration later needs no
-- migration) and nothing is cached in settings: a setting can be set by any session, so it could
-- vouch for a planted function.
create or replace function pgflow._extension_member(p_class regclass, p_object oid, p_extension text)
returns boolean
language sql
stable
set search_path = ''
as $$
  select exists (
    select 1
    from pg_catalog.pg_depend d
    join pg_catalog.pg_extension e on e.oid = d.refobjid
    where d.classid = p_class and d.objid = p_object
      and d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass and d.deptype = 'e'
      and e.extname = p_extension)
$$;

-- Whether an optional integration is present and really the one it claims to be: 'realtime'
-- (realtime.send(jsonb, text, text, boolean)), 'pg_net' (every net.http_post), 'vault'
-- (vault.decrypted_secrets) or 'pg_cron' (cron.schedule(text, text, text)).
create or replace function pgflow._trusted_integration(p_name text)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
declare
  target oid;
begin
  case p_name
  when 'realtime' then
    target := pg_catalog.to_regprocedure('realtime.send(jsonb, text, text, boolean)');
    return target is not null and exists (
      select 1 from pg_catalog.pg_proc p join pg_catalog.pg_roles r on r.oid = p.proowner
      where p.oid = target
        and (r.rolsuper or r.rolname in ('supabase_realtime_admin', 'supabase_admin')));
  when 'pg_net' then
    -- The call names its arguments, so any overload could be chosen: all of them must be pg_net's.
    return coalesce((
      select pg_catalog.bool_and(pgflow._extension_member('pg_catalog.pg_proc', p.oid, 'pg_net'))
      from pg_catalog.pg_proc p
      where p.pronamespace = pg_catalog.to_regnamespace('net') and p.proname = 'http_post'), false);
  when 'vault' then
    target := pg_catalog.to_regclass('vault.decrypted_secrets');
    return target is not null and pgflow._extension_member('pg_catalog.pg_class', target, 'supabase_vault');
  when 'pg_cron' then
    target := pg_catalog.to_regprocedure('cron.schedule(text, text, text)');
    return target is not null and pgflow._extension_member('pg_catalog.pg_proc', target, 'pg_cron');
  else
    raise exception 'unknown integration %', p_name using errcode = '22023';
  end case;
end;
$$;

-- ---- schemas/0090_inline_helpers.sql
-- Internal helpers that Postgres inlines, and the engine's named constants.
--
-- The policy (docs/design.md, Internal helpers). Every pgflow function pins search_path = '', so
-- that no caller's search_path can redirect a name in it: every function except the ones in this
-- file. A function with a setting of its own (set search_path) is never inlined: each call
-- changes the setting and restores it and, for a SQL function, plans its body again, which on a
-- task's path costs more than the body's own work. So a piece of logic that several functions
-- share is written once, here, and called where it is needed instead of being copied by hand,
-- and every function in this file:
--   - is language sql, one SELECT, without set search_path or any other setting, so that Postgres
--     replaces each call by the body when it plans the calling statement;
--   - names every table and function with its schema (pgflow., pg_catalog.), so that it means the
--     same under any search_path;
--   - is not security definer and is granted to no role (0900_privileges.sql revokes PUBLIC's
--     execute): it runs with the rights of the function that calls it;
--   - is called only by functions that pin search_path = '' (so the operators and types it does
--     not qualify are pg_catalog's) and that run as the owner (Postgres inlines a function only
--     for a role that may execute it), never by a function that another role runs with its own
--     rights, a default expression, a view or a client;
--   - keeps a shape that Postgres inlines: stable (see below), not strict; a scalar helper is one
--     expression without a subquery; a helper that reads tables returns a set (returns setof) and
--     is used in FROM or as a scalar subquery.
-- Stable, even for a constant: Postgres runs an immutable function whose arguments are constants
-- while it plans the caller (for a SQL function that means parsing and planning its body, about
-- 50 µs per plan), where it inlines a stable one (about 5 µs), and folds the result to its value
-- all the same. So no helper is ever called while a task runs, at plan time or at run time.
-- tests/sql/inline_helpers_test.ts checks all of this over the catalog, and that a task's path
-- calls no helper (Postgres's function statistics count none).
--
-- The constants are helpers without arguments: a number with a reason lives in one place, and
-- costs nothing where it is used.

-- Liveness ---------------------------------------------------------------------------------------

-- How recent a worker's heartbeat must be for it to count as live. Workers heartbeat every 5 s by
-- default (heartbeatIntervalMs): six missed heartbeats in a row mean its isolate is gone.
create or replace function pgflow._live_window()
returns interval
language sql
stable
as $$
  select interval '30 seconds'
$$;

-- A worker seen since p_since: its heartbeat is newer and it has not stopped. A deprecated worker
-- is still seen (it drains what it holds): the deploy fence waits for it, and the coverage check
-- does not count its tasks as stale.
create or replace function pgflow._worker_seen(w pgflow.workers, p_since timestamptz)
returns boolean
language sql
stable
as $$
  select w.last_heartbeat_at > p_since and w.stopped_at is null
$$;

-- A live worker: seen since p_since and not deprecated, so it takes new work. p_since is
-- clock_timestamp() - pgflow._live_window() unless an operator asks with another window.
create or replace function pgflow._worker_live(w pgflow.workers, p_since timestamptz)
returns boolean
language sql
stable
as $$
  select pgflow._worker_seen(w, p_since) and w.deprecated_at is null
$$;

-- The claim ------------------------------------------------------------------------------------

-- A support set's key of a (flow, step) pair (pgflow.workers.supported_keys): slugs never hold
-- chr(31), so two pairs never share a key.
create or replace function pgflow._pair_key(p_flow_slug text, p_step_slug text)
returns text
language sql
stable
as $$
  select p_flow_slug || pg_catalog.chr(31) || p_step_slug
$$;

-- Seconds a claimed message stays hidden beyond its step's effective timeout: a handler that runs
-- its whole timeout still reports before another worker can read the message again.
create or replace function pgflow._claim_margin()
returns integer
language sql
stable
as $$
  select 2
$$;

-- Seconds past its step's effective timeout after which a started task counts as stalled: a
-- handler stopped by its timeout reports within this, however late its batch of completions
-- goes out, so stalled recovery never takes back an attempt that is still reporting.
create or replace function pgflow._stalled_margin()
returns integer
language sql
stable
as $$
  select 30
$$;

-- The deepest read past another worker's backlog (docs/design.md, Claim table; next_read_qty):
-- such a read reads, and gives back, every message on its way, so its cost is bounded here; the
-- figures behind it are in docs/routing.md, Reading past a busy worker's backlog.
create or replace function pgflow._read_past_max()
returns integer
language sql
stable
as $$
  select 2000
$$;

-- A read that took longer than this may have been planned on statistics that say its queue is
-- empty (0405_queue_statistics.sql): a read of 10 visible messages takes well under a
-- millisecond, so only then are the statistics looked at.
create or replace function pgflow._slow_read()
returns interval
language sql
stable
as $$
  select interval '3 milliseconds'
$$;

-- A read that waited longer than this for messages stamps the tasks it claimed again with the time
-- they really started (read_and_claim): under it, the difference does not matter to stalled
-- recovery (seconds) and the extra statement is not worth its cost.
create or replace function pgflow._late_start()
returns interval
language sql
stable
as $$
  select interval '500 milliseconds'
$$;

-- Inputs and outputs -----------------------------------------------------------------------------

-- The object of a step's completed dependency outputs, keyed by dependency; skipped dependencies
-- are absent. A dependent task's input, and what a dependent step's condition is checked on.
create or replace function pgflow._dependency_outputs(p_run_id uuid, p_flow_slug text, p_step_slug text)
returns setof jsonb
language sql
stable
as $$
  select coalesce(pg_catalog.jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
  from pgflow.deps d
  join pgflow.step_states ss on ss.run_id = p_run_id and ss.step_slug = d.dep_slug
  where d.flow_slug = p_flow_slug and d.step_slug = p_step_slug and ss.status = 'completed'
$$;

-- The input of a task: a root step's is the run input, a dependent step's the object of its
-- completed dependencies' outputs (pgflow._dependency_outputs), and a map task's the element at
-- its index of the array it maps over (the run input, or its one dependency's output), copied onto
-- the task row when the task was created (step_tasks.input).
create or replace function pgflow._task_input(
  p_run_id uuid, p_flow_slug text, p_step_slug text, p_task_index integer
)
returns setof jsonb
language sql
stable
as $$
  select case
           when s.step_type = 'map' then
             (select t.input from pgflow.step_tasks t
              where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index)
           when s.deps_count = 0 then r.input
           else (select o from pgflow._dependency_outputs(p_run_id, p_flow_slug, p_step_slug) o)
         end
  from pgflow.steps s
  join pgflow.runs r on r.run_id = p_run_id
  where s.flow_slug = p_flow_slug and s.step_slug = p_step_slug
$$;

-- A completed run's output: the outputs of its completed leaf steps (steps nothing depends on),
-- keyed by step slug; skipped leaves are absent.
create or replace function pgflow._run_output(p_run_id uuid)
returns setof jsonb
language sql
stable
as $$
  select coalesce(pg_catalog.jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
  from pgflow.step_states ss
  where ss.run_id = p_run_id and ss.status = 'completed'
    and not exists (select 1 from pgflow.deps d
                    where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
$$;

-- Notifications and locks -------------------------------------------------------------------------

-- The class of the listeners' barrier locks (0045_listeners.sql): pgflow's own id, the bytes
-- 'pgfw', in the two-key form of advisory locks, so it shares no key with any single-key lock.
create or replace function pgflow._listen_lock_class()
returns integer
language sql
stable
as $$
  select 1885824631
$$;

-- The barrier lock's second key for a channel: one of 256 buckets. Buckets, not one key per
-- channel: a transaction that starts ten thousand runs touches ten thousand run channels, and one
-- lock each would exhaust the server's lock table; two channels sharing a bucket only make a
-- barrier wait for one more sender.
create or replace function pgflow._listen_bucket(p_channel text)
returns integer
language sql
stable
as $$
  select pg_catalog.hashtext(p_channel) & 255
$$;

-- Whether a notification on p_channel must be sent (0045_listeners.sql): the sender first takes
-- the channel's barrier lock shared, for the rest of its transaction, and then looks for a waiter;
-- a sender that cannot take the lock (a barrier holds it for an instant) notifies anyway. The
-- order is the protocol: looking first could miss a waiter whose barrier has already passed.
-- Stable, although it takes a lock, because Postgres inlines no volatile set-returning function:
-- its one side effect is the lock every caller must take, and each call takes it.
create or replace function pgflow._notify_needed(p_channel text)
returns setof boolean
language sql
stable
as $$
  select not pg_catalog.pg_try_advisory_xact_lock_shared(pgflow._listen_lock_class(),
                                                         pgflow._listen_bucket(p_channel))
         or exists (select 1 from pgflow.listeners l where l.channel = p_channel)
$$;

-- The transaction locks that serialise decisions about one name (pg_advisory_xact_lock), each
-- keyed by a prefix of its own so that no two kinds can take each other's key:
-- the namespace of flow slugs and aliases (pgflow._lock_names),
create or replace function pgflow._names_lock_key()
returns integer
language sql
stable
as $$
  select pg_catalog.hashtext('pgflow.names')
$$;

-- one queue name, declared shared or created for a flow (0700, 0705),
create or replace function pgflow._queue_lock_key(p_queue text)
returns integer
language sql
stable
as $$
  select pg_catalog.hashtext('pgflow.queue:' || p_queue)
$$;

-- and one flow slug, compiled or deleted (0720, 0730), under any spelling. (The statistics
-- refresh's try lock, 'pgflow.analyze:' || queue, is written in 0405_queue_statistics.sql: a role
-- may be granted that function alone.)
create or replace function pgflow._flow_lock_key(p_flow_slug text)
returns integer
language sql
stable
as $$
  select pg_catalog.hashtext('pgflow.flow:' || pg_catalog.lower(p_flow_slug))
$$;

-- ---- schemas/0100_create_flow.sql
-- Definition functions the startup compiler builds on. Both are idempotent for identical input and
-- refuse a different definition under an existing slug instead of silently changing it.

-- Flow slugs and aliases share one namespace, because start_flow resolves an alias before a slug:
-- a flow named like an alias it does not carry could never be started by its slug. Whoever checks
-- that namespace before adding a name to it (create_flow, _register_alias) first takes this
-- transaction lock, so two transactions adding the same name one as a slug, one as an alias,
-- cannot both pass their check. Taken before any queue lock of the same transaction.
create or replace function pgflow._lock_names()
returns void
language sql
volatile
set search_path = ''
as $$
  select pg_advisory_xact_lock(pgflow._names_lock_key())
$$;

-- alias: the stable name this version carries (pgflow.aliases), recorded with it: the first
-- version with an alias creates the alias pointing at it (see _register_alias).
create or replace function pgflow.create_flow(
  flow_slug text,
  max_attempts integer default null,
  base_delay integer default null,
  timeout integer default null,
  queue_mode text default 'flow',
  alias text default null
)
returns pgflow.flows
language plpgsql
volatile
set search_path = ''
as $$
declare
  existing pgflow.flows;
  created pgflow.flows;
  taken record;
begin
  if not pgflow.is_valid_slug(flow_slug) then
    raise exception 'invalid flow slug %', coalesce(quote_literal(flow_slug), 'NULL')
      using errcode = '22023',
        hint = 'use letters, digits and single underscores, starting with a letter, at most 128 characters, not "run"';
  end if;
  -- Unset (or NULL) options take the flow defaults.
  max_attempts := coalesce(max_attempts, pgflow.flow_option_default('maxAttempts'));
  base_delay := coalesce(base_delay, pgflow.flow_option_default('baseDelay'));
  timeout := coalesce(timeout, pgflow.flow_option_default('timeout'));
  perform pgflow._check_option('flow ' || flow_slug, 'maxAttempts', 'max_attempts', max_attempts, true);
  perform pgflow._check_option('flow ' || flow_slug, 'baseDelay', 'base_delay', base_delay, true);
  perform pgflow._check_option('flow ' || flow_slug, 'timeout', 'timeout', timeout, true);
  if queue_mode is null or queue_mode not in ('flow', 'step', 'routed') then
    raise exception 'flow %: queue_mode must be flow, step or routed, got %', flow_slug, coalesce(queue_mode, 'NULL')
      using errcode = '22023';
  end if;

  if create_flow.alias is not null and not pgflow.is_valid_slug(create_flow.alias) then
    raise exception 'flow %: invalid alias %', flow_slug, quote_literal(create_flow.alias)
      using errcode = '22023', hint = 'use letters, digits and single underscores, starting with a letter';
  end if;

  select * into existing from pgflow.flows f where lower(f.flow_slug) = lower(create_flow.flow_slug);
  if found then
    if existing.flow_slug = create_flow.flow_slug
       and existing.opt_max_attempts = max_attempts and existing.opt_base_delay = base_delay
       and existing.opt_timeout = timeout and existing.queue_mode = create_flow.queue_mode
       and existing.alias is not distinct from create_flow.alias then
      return existing;
    end if;
    raise exception 'flow % already exists with a different definition (existing: slug %, max_attempts %, base_delay %, timeout %, queue_mode %, alias %)',
      flow_slug, existing.flow_slug, existing.opt_max_attempts, existing.opt_base_delay, existing.opt_timeout,
      existing.queue_mode, coalesce(existing.alias, 'none')
      using errcode = '23505', hint = 'use a new concrete slug for a new version (for example ' || flow_slug || '_v2)';
  end if;

  -- start_flow resolves an alias before a slug: a new flow may not take the name of an alias,
  -- unless it carries that alias itself (a version named like its alias, which the alias may
  -- point away from).
  perform pgflow._lock_names();
  select a.alias, a.flow_slug into taken from pgflow.aliases a
  where lower(a.alias) = lower(create_flow.flow_slug) and a.alias is distinct from create_flow.alias;
  if found then
    raise exception 'flow %: an alias of that name exists (alias % points at flow %); it would start that flow instead',
      flow_slug, taken.alias, taken.flow_slug
      using errcode = '23505',
        hint = 'use another concrete slug, e.g. with a version suffix (' || flow_slug || '_v2), or give this flow that alias';
  end if;

  insert into pgflow.flows (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout, queue_mode, alias)
  values (flow_slug, max_attempts, base_delay, timeout, queue_mode, create_flow.alias)
  returning * into created;
  perform pgflow._register_alias(flow_slug, create_flow.alias);

  -- A plain flow's steps all share the flow's default queue. pgflow creates it and records that it
  -- did; a name that is already taken (an application's queue under any spelling, a declared
  -- shared queue) is refused rather than adopted, so deleting the flow can never drop it.
  if queue_mode = 'flow' then
    perform pgflow._provision_own_queue(lower(flow_slug), flow_slug);
  end if;
  return created;
end;
$$;

-- ---- schemas/0110_add_step.sql
create or replace function pgflow.add_step(
  flow_slug text,
  step_slug text,
  deps_slugs text[] default '{}',
  max_attempts integer default null,
  base_delay integer default null,
  timeout integer default null,
  start_delay integer default 0,
  step_type text default 'single',
  required_input_pattern jsonb default null,
  forbidden_input_pattern jsonb default null,
  when_unmet text default 'skip',
  when_exhausted text default 'fail',
  queue_name text default null
)
returns pgflow.steps
language plpgsql
volatile
set search_path = ''
as $$
declare
  flow pgflow.flows;
  existing pgflow.steps;
  created pgflow.steps;
  resolved_queue text;
  next_index integer;
  unknown_deps text[];
  deps text[] := coalesce(deps_slugs, '{}');
begin
  select * into flow from pgflow.flows f where f.flow_slug = add_step.flow_slug for update;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(flow_slug), 'NULL')
      using errcode = '22023', hint = 'create it with pgflow.create_flow first';
  end if;
  if not pgflow.is_valid_slug(step_slug) then
    raise exception 'invalid step slug % in flow %', coalesce(quote_literal(step_slug), 'NULL'), flow_slug
      using errcode = '22023',
        hint = 'use letters, digits and single underscores, starting with a letter, at most 128 characters, not "run"';
  end if;
  perform pgflow._check_option(format('step %s.%s', flow_slug, step_slug), 'maxAttempts', 'max_attempts', max_attempts, false);
  perform pgflow._check_option(format('step %s.%s', flow_slug, step_slug), 'baseDelay', 'base_delay', base_delay, false);
  perform pgflow._check_option(format('step %s.%s', flow_slug, step_slug), 'timeout', 'timeout', timeout, false);
  perform pgflow._check_option(format('step %s.%s', flow_slug, step_slug), 'startDelay', 'start_delay', start_delay, true);
  if step_type is null or step_type not in ('single', 'map') then
    raise exception 'step %.%: step_type must be single or map, got %', flow_slug, step_slug, coalesce(step_type, 'NULL')
      using errcode = '22023';
  end if;
  if step_type = 'map' and cardinality(deps) > 1 then
    raise exception 'map step %.% depends on % steps; a map step maps over at most one dependency',
      flow_slug, step_slug, cardinality(deps) using errcode = '22023';
  end if;
  if when_unmet not in ('fail', 'skip', 'skip-cascade') or when_exhausted not in ('fail', 'skip', 'skip-cascade') then
    raise exception 'step %.%: when_unmet and when_exhausted must be fail, skip or skip-cascade', flow_slug, step_slug
      using errcode = '22023';
  end if;
  if (select count(distinct d) from unnest(deps) d) <> cardinality(deps) then
    raise exception 'step %.% lists a dependency twice: %', flow_slug, step_slug, deps using errcode = '22023';
  end if;

  -- Resolve the route. flow mode: the flow's default queue. step mode: the generated private queue.
  -- routed mode: the explicit queue name, which must be canonical.
  select coalesce(max(s.step_index) + 1, 0) into next_index from pgflow.steps s where s.flow_slug = flow.flow_slug;
  select * into existing from pgflow.steps s
  where s.flow_slug = flow.flow_slug and lower(s.step_slug) = lower(add_step.step_slug);
  if flow.queue_mode = 'flow' then
    resolved_queue := lower(flow.flow_slug);
    if queue_name is not null and queue_name <> resolved_queue then
      raise exception 'step %.%: a flow-mode step runs on the flow queue %, not %', flow_slug, step_slug, resolved_queue, queue_name
        using errcode = '22023', hint = 'leave queue_name out, or create the flow with queue_mode routed';
    end if;
  elsif flow.queue_mode = 'step' then
    resolved_queue := pgflow.private_queue_name(flow.flow_slug, step_slug, coalesce(existing.step_index, next_index));
    if queue_name is not null and queue_name <> resolved_queue then
      raise exception 'step %.%: its private queue is %, not %', flow_slug, step_slug, resolved_queue, queue_name
        using errcode = '22023';
    end if;
  else
    if not pgflow.is_valid_queue_name(queue_name) then
      raise exception 'step %.%: invalid queue name %', flow_slug, step_slug, coalesce(quote_literal(queue_name), 'NULL')
        using errcode = '22023',
          hint = 'use lowercase letters, digits and single underscores, starting with a letter, at most 47 characters';
    end if;
    resolved_queue := queue_name;
  end if;

  if existing.step_slug is not null then
    if existing.step_slug = add_step.step_slug
       and existing.step_type = add_step.step_type
       and existing.opt_max_attempts is not distinct from max_attempts
       and existing.opt_base_delay is not distinct from base_delay
       and existing.opt_timeout is not distinct from timeout
       and existing.opt_start_delay = start_delay
       and existing.required_input_pattern is not distinct from add_step.required_input_pattern
       and existing.forbidden_input_pattern is not distinct from add_step.forbidden_input_pattern
       and existing.when_unmet = add_step.when_unmet
       and existing.when_exhausted = add_step.when_exhausted
       and existing.queue_name = resolved_queue
       and (select coalesce(array_agg(d.dep_slug order by d.dep_slug), '{}') from pgflow.deps d
            where d.flow_slug = flow.flow_slug and d.step_slug = existing.step_slug)
           = (select coalesce(array_agg(x order by x), '{}') from unnest(deps) x) then
      return existing;
    end if;
    raise exception 'step %.% already exists with a different definition', flow_slug, existing.step_slug
      using errcode = '23505', hint = 'use a new concrete flow slug for a changed flow';
  end if;

  select array_agg(d) into unknown_deps from unnest(deps) d
  where not exists (select 1 from pgflow.steps s where s.flow_slug = flow.flow_slug and s.step_slug = d);
  if unknown_deps is not null then
    raise exception 'step %.% depends on unknown step(s) %', flow_slug, step_slug, unknown_deps
      using errcode = '22023', hint = 'add dependencies before the steps that use them';
  end if;

  -- routed: declare or reuse a shared queue. flow and step mode: the flow's own queue, which pgflow
  -- creates and records, and which must not already exist as anything else (never adopted).
  if flow.queue_mode = 'routed' then
    perform pgflow._provision_shared_queue(resolved_queue, flow.flow_slug);
  else
    perform pgflow._provision_own_queue(resolved_queue, flow.flow_slug);
  end if;

  insert into pgflow.steps (
    flow_slug, step_slug, step_index, step_type, deps_count, opt_max_attempts, opt_base_delay,
    opt_timeout, opt_start_delay, required_input_pattern, forbidden_input_pattern, when_unmet,
    when_exhausted, queue_name
  ) values (
    flow.flow_slug, step_slug, next_index, step_type, cardinality(deps), max_attempts, base_delay,
    timeout, start_delay, required_input_pattern, forbidden_input_pattern, when_unmet,
    when_exhausted, resolved_queue
  ) returning * into created;

  insert into pgflow.deps (flow_slug, dep_slug, step_slug)
  select flow.flow_slug, d, step_slug from unnest(deps) d;
  -- A queue a second flow now routes to takes turns between them (0258_fair_window.sql).
  perform pgflow._sync_queue_cursor(resolved_queue);
  return created;
end;
$$;

-- ---- schemas/0200_messages.sql
-- Sending and archiving task messages. Only PGMQ's public functions are used, and every call names
-- the queue from the task's snapshot: a flow slug never stands in for a queue.

-- Archives the messages of the run's tasks that match the given statuses, one archive call per queue.
create or replace function pgflow._archive_task_messages(p_run_id uuid, p_statuses text[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
begin
  for grp in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as ids
    from pgflow.step_tasks t
    where t.run_id = p_run_id and t.status = any (p_statuses) and t.message_id is not null
    group by t.queue_name
  loop
    perform pgmq.archive(grp.queue_name, grp.ids);
  end loop;
end;
$$;

-- Batched visibility change through pgmq.set_vt; returns the messages it changed.
create or replace function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], offsets integer[])
returns table (msg_id bigint, vt timestamptz)
language plpgsql
volatile
set search_path = ''
as $$
begin
  if cardinality(msg_ids) is distinct from cardinality(offsets) then
    raise exception 'set_vt_batch: % message ids but % offsets', cardinality(msg_ids), cardinality(offsets)
      using errcode = '22023', hint = 'pass one offset per message id';
  end if;
  return query
  select m.msg_id, m.vt
  from unnest(msg_ids, offsets) as u(id, off)
  cross join lateral pgmq.set_vt(set_vt_batch.queue_name, u.id, u.off) as m;
end;
$$;

-- Archives the messages of one step's tasks that match the given statuses, one call per queue.
create or replace function pgflow._archive_step_messages(p_run_id uuid, p_step_slug text, p_statuses text[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
begin
  for grp in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as ids
    from pgflow.step_tasks t
    where t.run_id = p_run_id and t.step_slug = p_step_slug and t.status = any (p_statuses)
      and t.message_id is not null
    group by t.queue_name
  loop
    perform pgmq.archive(grp.queue_name, grp.ids);
  end loop;
end;
$$;

-- ---- schemas/0250_run_progress.sql
-- How a run moves forward: the messages of started steps' tasks are sent, steps become ready,
-- start, complete, are skipped or fail the run, and the run completes. Every function here is
-- called with the run's lock held (start_flow, the completion and failure paths, stalled recovery).
--
-- Status times (started_at, completed_at, failed_at, skipped_at of steps and runs) are
-- clock_timestamp(), read while the run's lock is held, not now(): now() is when the transaction
-- began, and a transaction that waited for a run's lock would stamp its changes earlier than
-- changes another transaction committed on that run meanwhile. A client orders a run's events by
-- these times (src/client/diff.ts), so a dependent could appear to start before the dependency
-- that released it completed. Under the lock, every later change of a run gets a later time.

-- Creates the tasks of steps just started (p_steps, with p_counts tasks each; with p_skip_existing,
-- but for the indexes that already have a task) and sends one message per task, batched per (queue, delay) in send_batch calls of at most 1,000; each task is inserted
-- with its queue snapshot and message id in the same transaction, and channel pgflow_queue:<queue>
-- is notified for every queue that got messages visible at once. A task of a step with a
-- concurrency limit is inserted waiting instead, and released at commit (0260_flow_control.sql).
-- A task of a rate-limited step carries its rate scope and key (0262_rate_limits.sql).
create or replace function pgflow._send_task_messages(
  p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[], p_skip_existing boolean default false,
  p_sources jsonb[] default null
)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
  ids bigint[];
  batch_size constant integer := 1000;
  one_queue text;
  one_delay integer;
  one_id bigint;
  one_limited boolean;
  room integer;
  cur bigint;
  one_msg jsonb;
  slice_end integer;
  -- PGMQ 1.5+ has send(queue, msg, headers, timestamptz) and send_batch(queue, msgs, headers,
  -- timestamptz), which its integer-delay forms reach through SQL wrappers planned on every call
  -- (about 0.05 ms a call, in every start and chain hop: bench/results.md, round 32). The same
  -- visibility either way; the catalog lookup keeps PGMQ before 1.5, which has neither, working.
  direct_send constant boolean :=
    to_regprocedure('pgmq.send(text,jsonb,jsonb,timestamp with time zone)') is not null;
begin
  -- One task of one step (a flow's root step, a chain's next step): one send and one insert,
  -- without the grouping below, which costs a start_flow about a fifth of its time. The same
  -- rows, message and notification as the general path.
  if cardinality(p_steps) = 1 and p_counts[1] = 1 and not p_skip_existing then
    -- Whether the queue is shared (it has a cursor, 0258_fair_window.sql) is read in this same
    -- statement: a flow alone on its queue runs no statement more for fairness.
    select s.queue_name, s.opt_start_delay, s.concurrency_scope is not null or s.rate_scope is not null,
           (select c.claimed_msg_id from pgflow.queue_cursors c where c.queue_name = s.queue_name)
    into one_queue, one_delay, one_limited, cur
    from pgflow.steps s where s.flow_slug = p_flow_slug and s.step_slug = p_steps[1];
  end if;
  -- A shared queue in window mode, or a transaction past its window (0258_fair_window.sql): the
  -- task waits for its turn, and the queue is announced so a reader's claim releases it.
  if one_limited is false and one_delay = 0 and cur is not null then
    select w.room, w.cursor into room, cur from pgflow._window_room(one_queue, 1) w;
  end if;
  if room = 0 then
    insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status, priority, input)
    select p_run_id, p_flow_slug, p_steps[1], 0, one_queue, 'waiting', r.priority + s.priority, p_sources[1] -> 0
    from pgflow.runs r, pgflow.steps s
    where r.run_id = p_run_id and s.flow_slug = p_flow_slug and s.step_slug = p_steps[1];
    perform pgflow._announce('pgflow_queue:' || one_queue, '');
    return;
  end if;
  if one_limited is false then
    one_msg := jsonb_build_object('flow_slug', p_flow_slug, 'run_id', p_run_id,
                                  'step_slug', p_steps[1], 'task_index', 0);
    if direct_send then
      select pgmq.send(one_queue, one_msg, null::jsonb, clock_timestamp() + make_interval(secs => one_delay))
      into one_id;
    else
      select pgmq.send(one_queue, one_msg, one_delay) into one_id;
    end if;
    insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, message_id, input)
    values (p_run_id, p_flow_slug, p_steps[1], 0, one_queue, one_id, p_sources[1] -> 0);
    if cur is not null then
      perform pgflow._note_depth(one_queue, cur, one_id);
    end if;
    if one_delay = 0 then
      perform pgflow._announce('pgflow_queue:' || one_queue, '');
    end if;
    return;
  end if;
  -- The tasks of steps with a concurrency limit are created waiting, without a message, with
  -- their priority and their key; the release at commit sends what capacity allows
  -- (0260_flow_control.sql). The key is read once, here, from the run input or the task's input.
  -- A map task's element is kept on its row as in the general path below.
  insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status, priority,
                                 limit_scope, limit_key, rate_scope, rate_key, input)
  select p_run_id, p_flow_slug, s.step_slug, i, s.queue_name, 'waiting', r.priority + s.priority,
         s.concurrency_scope,
         pgflow._task_limit_key(s.concurrency_key, s.concurrency_key_from, s.step_type, r.input, x.input,
                                p_run_id, p_flow_slug, s.step_slug, i),
         s.rate_scope,
         case when s.rate_scope is not null then
           pgflow._task_limit_key(s.rate_key, s.rate_key_from, s.step_type, r.input, x.input,
                                  p_run_id, p_flow_slug, s.step_slug, i) end,
         x.input
  from unnest(p_steps, p_counts, p_sources) as n(step_slug, task_count, source)
  join pgflow.steps s on s.flow_slug = p_flow_slug and s.step_slug = n.step_slug
  join pgflow.runs r on r.run_id = p_run_id
  cross join lateral (
    select g.i, null::jsonb from generate_series(0, n.task_count - 1) as g(i) where n.source is null
    union all
    select (e.ord - 1)::integer, e.value
    from jsonb_array_elements(n.source) with ordinality as e(value, ord) where n.source is not null
  ) as x(i, input)
  where s.concurrency_scope is not null
    and (not p_skip_existing
         or not exists (select 1 from pgflow.step_tasks t
                        where t.run_id = p_run_id and t.step_slug = s.step_slug and t.task_index = i));
  for grp in
    select s.queue_name, s.opt_start_delay as delay,
           array_agg(s.step_slug order by s.step_slug, i) as steps,
           array_agg(i order by s.step_slug, i) as idxs,
           array_agg(x.input order by s.step_slug, i) as inputs,
           -- A rate-limited task is sent at once like any other, with its scope, key and
           -- priority: its window is checked when it is claimed (0262_rate_limits.sql).
           array_agg(s.rate_scope order by s.step_slug, i) as rate_scopes,
           -- A task waiting for its queue's turn (0258_fair_window.sql) is ordered by priority.
           array_agg(s.priority order by s.step_slug, i) as step_prios,
           array_agg(case when s.rate_scope is not null then
                       (select r.priority from pgflow.runs r where r.run_id = p_run_id) + s.priority
                     else 0 end order by s.step_slug, i) as priorities,
           array_agg(case when s.rate_scope is not null then
                       pgflow._task_limit_key(s.rate_key, s.rate_key_from, s.step_type,
                                              (select r.input from pgflow.runs r where r.run_id = p_run_id),
                                              x.input, p_run_id, p_flow_slug, s.step_slug, i) end
                     order by s.step_slug, i) as rate_keys,
           -- The body is informational only: the claim reads ids, never bodies.
           array_agg(jsonb_build_object('flow_slug', p_flow_slug, 'run_id', p_run_id,
                                        'step_slug', s.step_slug, 'task_index', i)
                     order by s.step_slug, i) as msgs
    -- p_sources, when given, holds each map step's array (NULL for a single step); unnest pads a
    -- missing p_sources with NULLs.
    from unnest(p_steps, p_counts, p_sources) as n(step_slug, task_count, source)
    join pgflow.steps s on s.flow_slug = p_flow_slug and s.step_slug = n.step_slug
    -- A map's elements in one pass over its array (jsonb_array_elements decompresses it once).
    cross join lateral (
      select g.i, null::jsonb from generate_series(0, n.task_count - 1) as g(i) where n.source is null
      union all
      select (e.ord - 1)::integer, e.value
      from jsonb_array_elements(n.source) with ordinality as e(value, ord) where n.source is not null
    ) as x(i, input)
    -- A resumed run's map may hold tasks reused from its source run already: those are done.
    where s.concurrency_scope is null
      and (not p_skip_existing
       or not exists (select 1 from pgflow.step_tasks t
                      where t.run_id = p_run_id and t.step_slug = s.step_slug and t.task_index = i))
    -- Rate-limited tasks apart: they never wait for their queue's turn.
    group by s.queue_name, s.opt_start_delay, s.rate_scope is not null
  loop
    -- What the queue's window has room for is sent; the rest waits for its turn
    -- (0258_fair_window.sql). A delayed or rate-limited task is always sent.
    room := cardinality(grp.msgs);
    cur := null;
    if grp.delay = 0 and grp.rate_scopes[1] is null then
      select w.room, w.cursor into room, cur from pgflow._window_room(grp.queue_name, room) w;
      if room < cardinality(grp.msgs) then
        insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status, priority, input)
        select p_run_id, p_flow_slug, u.step_slug, u.task_index, grp.queue_name, 'waiting',
               (select r.priority from pgflow.runs r where r.run_id = p_run_id) + u.priority, u.input
        from unnest(grp.steps[room + 1:], grp.idxs[room + 1:], grp.inputs[room + 1:], grp.step_prios[room + 1:])
          as u(step_slug, task_index, input, priority);
        perform pgflow._announce('pgflow_queue:' || grp.queue_name, '');
      end if;
    end if;
    -- Large maps go out in slices so one statement never carries an unbounded array.
    for slice_start in 1 .. room by batch_size loop
      slice_end := least(slice_start + batch_size - 1, room);
      -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
      if direct_send then
        select array_agg(id order by id) into ids
        from pgmq.send_batch(grp.queue_name, grp.msgs[slice_start:slice_end],
                             null::jsonb[], clock_timestamp() + make_interval(secs => grp.delay)) as id;
      else
        select array_agg(id order by id) into ids
        from pgmq.send_batch(grp.queue_name, grp.msgs[slice_start:slice_end], grp.delay) as id;
      end if;
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, message_id, input,
                                     rate_scope, rate_key, priority)
      select p_run_id, p_flow_slug, u.step_slug, u.task_index, grp.queue_name, u.id, u.input, u.rate_scope, u.rate_key,
             u.priority
      from unnest(grp.steps[slice_start:slice_end],
                  grp.idxs[slice_start:slice_end], ids,
                  grp.inputs[slice_start:slice_end],
                  grp.rate_scopes[slice_start:slice_end],
                  grp.rate_keys[slice_start:slice_end],
                  grp.priorities[slice_start:slice_end])
        as u(step_slug, task_index, id, input, rate_scope, rate_key, priority);
    end loop;
    if cur is not null and room > 0 then
      perform pgflow._note_depth(grp.queue_name, cur, ids[cardinality(ids)]);
    end if;
    -- Wakes the workers waiting on the queue, if any waits (0045_listeners.sql: busy workers read
    -- again anyway, and a NOTIFY would serialise this commit with every other one that sends
    -- one). Sent in this transaction, so it is delivered at commit or never: a worker never wakes
    -- before the messages are visible to its read. A delayed
    -- group is not announced (nothing to read yet); the workers' fallback poll finds it. Equal
    -- notifications of one transaction are folded into one by Postgres.
    if grp.delay = 0 and room > 0 then
      perform pgflow._announce('pgflow_queue:' || grp.queue_name, '');
    end if;
  end loop;
end;
$$;

-- Completes a step with its output, releases its dependents and counts it off the run; completes the
-- run when it was the last step. The caller holds the run's lock.
create or replace function pgflow._complete_step(p_run_id uuid, p_step_slug text, p_output jsonb)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  flow text;
begin
  update pgflow.step_states ss
  set status = 'completed', output = p_output, completed_at = clock_timestamp(), remaining_tasks = 0
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug
  returning ss.flow_slug into flow;

  -- Only dependents that still wait count it: one skipped by a cascade, or taken over by a resume
  -- from its source run, waits for nothing (see complete_tasks).
  update pgflow.step_states ss
  set remaining_deps = ss.remaining_deps - 1
  from pgflow.deps d
  where ss.run_id = p_run_id and d.flow_slug = flow and d.dep_slug = p_step_slug
    and ss.step_slug = d.step_slug and ss.status = 'created';

  perform pgflow._count_off_step(p_run_id);
end;
$$;

-- Counts a finished (completed or skipped) step off its run and completes the run, with its
-- output, when none is left.
create or replace function pgflow._count_off_step(p_run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  remaining integer;
begin
  update pgflow.runs r set remaining_steps = r.remaining_steps - 1
  where r.run_id = p_run_id
  returning r.remaining_steps into remaining;
  if remaining = 0 then
    update pgflow.runs r
    set status = 'completed', completed_at = clock_timestamp(),
        output = (select o from pgflow._run_output(p_run_id) o)
    where r.run_id = p_run_id and r.status = 'started';
  end if;
end;
$$;

-- Skips a step: its outstanding tasks are cancelled and their messages archived, and it is counted
-- off the run. 'skip' releases its dependents (which run without its key); a cascade skips every
-- dependent that has not started, transitively. The caller holds the run's lock.
create or replace function pgflow._skip_step(p_run_id uuid, p_step_slug text, p_reason text, p_cascade boolean)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  flow text;
  dependent text;
begin
  update pgflow.step_states ss
  set status = 'skipped', skip_reason = p_reason, skipped_at = clock_timestamp(), remaining_tasks = 0
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug and ss.status in ('created', 'started')
  returning ss.flow_slug into flow;
  if flow is null then
    return;
  end if;
  -- Waiting tasks first (no message to archive): a release that holds one has committed its
  -- message before the archive below reads the tasks (0260_flow_control.sql). Then messages, then
  -- task rows: a concurrent read_and_claim holds a message row while it claims the task row, so
  -- the opposite order could deadlock with it.
  update pgflow.step_tasks t set status = 'cancelled'
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.status = 'waiting';
  perform pgflow._archive_step_messages(p_run_id, p_step_slug, array['queued', 'started', 'failed']);
  update pgflow.step_tasks t set status = 'cancelled'
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.status in ('queued', 'started');
  perform pgflow._count_off_step(p_run_id);

  if p_cascade then
    for dependent in
      select d.step_slug from pgflow.deps d
      join pgflow.step_states ss on ss.run_id = p_run_id and ss.step_slug = d.step_slug
      where d.flow_slug = flow and d.dep_slug = p_step_slug and ss.status = 'created'
    loop
      perform pgflow._skip_step(p_run_id, dependent, 'dependency_skipped', true);
    end loop;
  else
    update pgflow.step_states ss
    set remaining_deps = ss.remaining_deps - 1
    from pgflow.deps d
    where ss.run_id = p_run_id and d.flow_slug = flow and d.dep_slug = p_step_slug
      and ss.step_slug = d.step_slug and ss.status = 'created';
  end if;
end;
$$;

-- Fails the run: the step (if given) and the run become failed, every outstanding task is cancelled,
-- and the messages of all of them are archived in every queue they touched.
create or replace function pgflow._fail_run(p_run_id uuid, p_step_slug text, p_error text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  update pgflow.step_states ss
  set status = 'failed', failed_at = clock_timestamp(), error_message = p_error
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug;

  update pgflow.runs r
  set status = 'failed', failed_at = clock_timestamp(), error_message = p_error
  where r.run_id = p_run_id;

  -- Waiting tasks first (see _skip_step), then messages, then task rows: a concurrent
  -- read_and_claim holds a message row while it claims the task row, so the opposite order could
  -- deadlock with it. A claim that wins the message starts its task, which is cancelled right
  -- after; its completion is then ignored. pgflow.complete_and_claim, which waits for its queue's
  -- turn lock after its completions, relies on this order too (0410_read_and_claim.sql).
  update pgflow.step_tasks t set status = 'cancelled' where t.run_id = p_run_id and t.status = 'waiting';
  perform pgflow._archive_task_messages(p_run_id, array['queued', 'started', 'failed']);
  update pgflow.step_tasks t
  set status = 'cancelled'
  where t.run_id = p_run_id and t.status in ('queued', 'started');
end;
$$;

-- Starts every step whose dependencies are done: evaluates its condition, creates its tasks and
-- sends their messages. Steps that finish at once (an empty map, a skip) can make further steps
-- ready, so this repeats until nothing changes. The caller holds the run's lock.
--
-- The tasks of the started steps are created at the end, by _send_task_messages, with their
-- message ids: inserted once rather than inserted and then updated (an update in the creating
-- transaction also checks every foreign key again, and touches every index). A pass that fails
-- the run creates them without messages first, so _fail_run cancels them with the rest.
create or replace function pgflow._start_ready_steps(p_run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  run pgflow.runs;
  ready record;
  source jsonb;
  cond_input jsonb;
  task_count integer;
  progressed boolean := true;
  -- The steps started by this call and their task counts, in start order.
  new_steps text[] := '{}';
  new_counts integer[] := '{}';
  -- Each started step's array to map over, NULL for a single step.
  new_sources jsonb[] := '{}';
  fail_step text;
  fail_error text;
  reused_count integer;
  reused_any boolean := false;
  child_outcome text;
  -- Whether a step of this pass did more than note itself as started (skipped, completed, started
  -- children or a wait): only then can a later step of the pass find the run ended or itself
  -- skipped, and only then are they looked up again.
  disturbed boolean := false;
begin
  <<pass>>
  while progressed loop
    progressed := false;
    select * into run from pgflow.runs r where r.run_id = p_run_id;
    exit when run.status <> 'started';
    for ready in
      select ss.step_slug, s.step_type, s.deps_count, s.required_input_pattern, s.forbidden_input_pattern,
             s.when_unmet, s.kind,
             -- A map step has at most one dependency: the one it maps over.
             (select min(d.dep_slug) from pgflow.deps d
              where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug) as map_dep
      from pgflow.step_states ss
      join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
      where ss.run_id = p_run_id and ss.status = 'created' and ss.remaining_deps = 0
      order by s.step_index
    loop
      -- An earlier step of this pass may have failed the run or cascaded a skip onto this one.
      if disturbed then
        exit when (select r.status from pgflow.runs r where r.run_id = p_run_id) <> 'started';
        continue when (select ss.status from pgflow.step_states ss
                       where ss.run_id = p_run_id and ss.step_slug = ready.step_slug) <> 'created';
      end if;

      -- Conditions: if / ifNot are containment patterns on the run input (root steps) or on the
      -- object of completed dependency outputs (dependent steps).
      if ready.required_input_pattern is not null or ready.forbidden_input_pattern is not null then
        cond_input := case when ready.deps_count = 0 then run.input
                           else (select o from pgflow._dependency_outputs(p_run_id, run.flow_slug, ready.step_slug) o) end;
        if not ((ready.required_input_pattern is null or cond_input @> ready.required_input_pattern)
                and (ready.forbidden_input_pattern is null or not cond_input @> ready.forbidden_input_pattern)) then
          if ready.when_unmet = 'fail' then
            fail_step := ready.step_slug;
            fail_error := format('[CONDITION_UNMET] step %s: its if/ifNot condition does not hold', ready.step_slug);
            exit pass;
          end if;
          perform pgflow._skip_step(p_run_id, ready.step_slug, 'condition_unmet', ready.when_unmet = 'skip-cascade');
          disturbed := true;
          progressed := true;
          continue;
        end if;
      end if;

      if ready.step_type = 'single' then
        task_count := 1;
      else
        -- A map step fans out over the run input (root map) or its one dependency's output.
        if ready.deps_count = 0 then
          source := run.input;
        else
          if (select ss.status from pgflow.step_states ss
              where ss.run_id = p_run_id and ss.step_slug = ready.map_dep) = 'skipped' then
            -- Nothing to map over: the map is skipped like its source, and releases its dependents.
            perform pgflow._skip_step(p_run_id, ready.step_slug, 'dependency_skipped', false);
            disturbed := true;
            progressed := true;
            continue;
          end if;
          select ss.output into source from pgflow.step_states ss
          where ss.run_id = p_run_id and ss.step_slug = ready.map_dep;
        end if;
        if jsonb_typeof(source) is distinct from 'array' then
          fail_step := ready.step_slug;
          fail_error := format('[TYPE_VIOLATION] map step %s needs an array to map over, got %s',
            ready.step_slug, coalesce(jsonb_typeof(source), 'nothing'));
          exit pass;
        end if;
        task_count := jsonb_array_length(source);
      end if;

      -- A resumed run reuses the tasks its source run completed of this map, when it maps over
      -- the same array (then element i is the same element).
      reused_count := 0;
      if run.restart_mode = 'resume' and ready.step_type = 'map' and task_count > 0
         and source = (case when ready.deps_count = 0
                            then (select r.input from pgflow.runs r where r.run_id = run.restart_of_run_id)
                            else (select ss.output from pgflow.step_states ss
                                  where ss.run_id = run.restart_of_run_id and ss.step_slug = ready.map_dep) end) then
        insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status, output,
                                       attempts_count, last_worker_id, started_at, completed_at)
        select p_run_id, t.flow_slug, t.step_slug, t.task_index, t.queue_name, 'completed', t.output,
               t.attempts_count, t.last_worker_id, t.started_at, t.completed_at
        from pgflow.step_tasks t
        where t.run_id = run.restart_of_run_id and t.step_slug = ready.step_slug
          and t.status = 'completed' and t.task_index < task_count;
        get diagnostics reused_count = row_count;
      end if;

      update pgflow.step_states ss
      set status = 'started', started_at = clock_timestamp(), initial_tasks = task_count,
          remaining_tasks = task_count - reused_count
      where ss.run_id = p_run_id and ss.step_slug = ready.step_slug;

      if task_count = 0 or reused_count = task_count or ready.kind <> 'task' then
        disturbed := true;
      end if;
      if task_count = 0 then
        perform pgflow._complete_step(p_run_id, ready.step_slug, '[]'::jsonb);
        progressed := true;
      elsif reused_count = task_count then
        perform pgflow._complete_step(p_run_id, ready.step_slug,
          (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
           where t.run_id = p_run_id and t.step_slug = ready.step_slug));
        progressed := true;
      elsif ready.kind = 'flow' then
        -- A child-flow step starts its child runs here and has no message (0290_child_flows.sql).
        child_outcome := pgflow._start_child_runs(p_run_id, ready.step_slug, task_count,
                                                  case when ready.step_type = 'map' then source end);
        if child_outcome = 'completed' then
          progressed := true;
        elsif child_outcome is not null then
          fail_step := ready.step_slug;
          fail_error := child_outcome;
          exit pass;
        end if;
      elsif ready.kind in ('event', 'sleep') then
        -- A waiting step has no task and no message (0280_events.sql).
        if pgflow._start_wait(p_run_id, ready.step_slug) then
          progressed := true;
        end if;
      else
        reused_any := reused_any or reused_count > 0;
        new_steps := new_steps || ready.step_slug;
        new_counts := new_counts || task_count;
        new_sources := array_append(new_sources, case when ready.step_type = 'map' then source end);
      end if;
    end loop;
  end loop;
  if fail_step is not null then
    insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name)
    select p_run_id, run.flow_slug, n.step_slug, i, s.queue_name
    from unnest(new_steps, new_counts) as n(step_slug, task_count)
    join pgflow.steps s on s.flow_slug = run.flow_slug and s.step_slug = n.step_slug
    cross join generate_series(0, n.task_count - 1) as i
    on conflict on constraint step_tasks_pkey do nothing;
    perform pgflow._fail_run(p_run_id, fail_step, fail_error);
    return;
  end if;
  if cardinality(new_steps) > 0 then
    perform pgflow._send_task_messages(p_run_id, run.flow_slug, new_steps, new_counts, reused_any, new_sources);
  end if;
end;
$$;

-- ---- schemas/0255_limits.sql
-- Flow control's definitions (docs/flow-control.md): a step's priority, and its concurrency limit
-- (a scope, a key path, and the limit itself). The release machinery that enforces them is
-- 0260_flow_control.sql.
--
-- A limit belongs to a scope, not to a version: the steps that name one scope share one budget,
-- whichever flows and versions they belong to. A step without an explicit scope gets
-- '<alias or flow slug>/<step slug>', so the versions of a flow deployed under one alias share
-- it (a v2 deploy does not double what an API sees). The limit's value lives in its own row,
-- which every compile that names the scope upserts: changing a limit takes a worker restart, not
-- a new version.

create table if not exists pgflow.concurrency_limits (
  scope text not null,
  -- At most this many tasks of one (scope, key) are queued or started at once.
  max_running integer not null,
  updated_at timestamptz not null default now(),
  constraint concurrency_limits_pkey primary key (scope),
  constraint concurrency_limits_scope_is_valid check (scope ~ '^[A-Za-z0-9_.:/-]{1,200}$'),
  constraint concurrency_limits_max_running_range check (max_running between 1 and 100000)
);

-- A scope's rate limit: at most max_starts tasks of one (scope, key) start in any window of length
-- per (0262_rate_limits.sql). Like a concurrency limit it belongs to its scope, and every compile
-- that names the scope sets it.
create table if not exists pgflow.rate_limits (
  scope text not null,
  max_starts integer not null,
  per interval not null,
  updated_at timestamptz not null default now(),
  constraint rate_limits_pkey primary key (scope),
  constraint rate_limits_scope_is_valid check (scope ~ '^[A-Za-z0-9_.:/-]{1,200}$'),
  constraint rate_limits_max_starts_range check (max_starts between 1 and 100000),
  -- 10 ms to a day: finer than timestamps can order, or coarser than a day, is a mistake.
  constraint rate_limits_per_range check (per between interval '10 milliseconds' and interval '1 day')
);

-- The accepted range of flow control's numeric options, as FLOW_CONTROL_BOUNDS in
-- src/dsl/flow_control.ts (tests/sql/flow_control_compile_test.ts compares the two): a priority is a rank,
-- higher first; a concurrency limit is a count of tasks; a rate limit is a count of starts per
-- an interval in milliseconds.
create or replace function pgflow.flow_control_bounds()
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select '{"priority": {"min": -1000, "max": 1000}, "concurrency": {"min": 1, "max": 100000},
           "rateLimit": {"min": 1, "max": 100000}, "ratePerMs": {"min": 10, "max": 86400000}}'::jsonb
$$;

-- The scope a step's limit belongs to when it names none: the versions behind one alias share it.
create or replace function pgflow._default_limit_scope(p_flow_slug text, p_step_slug text)
returns text
language sql
stable
set search_path = ''
as $$
  select coalesce(f.alias, f.flow_slug) || '/' || p_step_slug
  from pgflow.flows f where f.flow_slug = p_flow_slug
$$;

-- The key of one task within its scope: the JSON path's first match in the input, a string as
-- itself, anything else as its JSON text. A path that finds nothing gives '' (one shared key for
-- every such task: a limit is never exceeded because an input lacked the field).
create or replace function pgflow._limit_key(p_input jsonb, p_path jsonpath)
returns text
language sql
immutable
set search_path = ''
as $$
  select coalesce(case jsonb_typeof(v) when 'string' then v #>> '{}' else v::text end, '')
  from (select jsonb_path_query_first(p_input, p_path, '{}'::jsonb, true) as v) x
$$;

-- A rate limit's interval in milliseconds, as the DSL gives it (a number of milliseconds) or as
-- SQL does (an interval's text, '1 second'); NULL when it is neither.
create or replace function pgflow._rate_per_ms(p_per jsonb)
returns numeric
language plpgsql
immutable
set search_path = ''
as $$
begin
  if jsonb_typeof(p_per) = 'number' then
    return (p_per #>> '{}')::numeric;
  elsif jsonb_typeof(p_per) = 'string' then
    return extract(epoch from (p_per #>> '{}')::interval) * 1000;
  end if;
  return null;
exception when others then
  return null;
end;
$$;

-- The problems of a limit's key and keyFrom (p_limit: {"key": "$.path", "keyFrom": "run" |
-- "input"}), named p_option in the lines, p_example the path suggested as a fix.
create or replace function pgflow._limit_key_problems(p_where text, p_option text, p_limit jsonb, p_example text)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  problems text[] := '{}';
  v jsonb := nullif(p_limit -> 'key', 'null'::jsonb);
begin
  if v is not null then
    if jsonb_typeof(v) <> 'string' then
      problems := problems || format('%s: %s.key must be a JSON path string such as "%s", got %s',
        p_where, p_option, p_example, left(v::text, 200));
    else
      begin
        perform (v #>> '{}')::jsonpath;
      exception when others then
        problems := problems || format('%s: %s.key %s is not a JSON path (%s); write e.g. "%s"',
          p_where, p_option, left(v::text, 200), sqlerrm, p_example);
      end;
    end if;
  end if;
  v := nullif(p_limit -> 'keyFrom', 'null'::jsonb);
  if v is not null and v not in ('"run"'::jsonb, '"input"'::jsonb) then
    problems := problems || format('%s: %s.keyFrom must be "run" (the run input) or "input" (the step''s input), got %s',
      p_where, p_option, left(v::text, 200));
  end if;
  return problems;
end;
$$;

-- Every problem with one step's (or a flow's) rateLimit, one line each as below.
create or replace function pgflow._rate_limit_problems(p_where text, p_rate jsonb)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  problems text[] := '{}';
  b jsonb := pgflow.flow_control_bounds();
  v jsonb;
  ms numeric;
begin
  if jsonb_typeof(p_rate) <> 'object' then
    return array[format('%s: rateLimit must be an object such as {"limit": 1, "per": "1 second", "key": "$.channel"}, got %s',
      p_where, left(p_rate::text, 200))];
  end if;
  v := p_rate -> 'limit';
  if v is null or not (jsonb_typeof(v) = 'number' and v::text ~ '^-?[0-9]{1,10}$'
                       and (v::text)::bigint between (b -> 'rateLimit' ->> 'min')::bigint
                                                 and (b -> 'rateLimit' ->> 'max')::bigint) then
    problems := problems || format('%s: rateLimit.limit must be an integer between %s and %s (starts per interval), got %s',
      p_where, b -> 'rateLimit' ->> 'min', b -> 'rateLimit' ->> 'max', coalesce(v::text, 'nothing'));
  end if;
  v := p_rate -> 'per';
  ms := pgflow._rate_per_ms(v);
  if ms is null or ms <> trunc(ms) or ms < (b -> 'ratePerMs' ->> 'min')::numeric
     or ms > (b -> 'ratePerMs' ->> 'max')::numeric then
    problems := problems || format('%s: rateLimit.per must be an interval from %s ms to %s ms (a day), as milliseconds or text such as "1 second", got %s',
      p_where, b -> 'ratePerMs' ->> 'min', b -> 'ratePerMs' ->> 'max', left(coalesce(v::text, 'nothing'), 200));
  end if;
  problems := problems || pgflow._limit_key_problems(p_where, 'rateLimit', p_rate, '$.channel');
  return problems;
end;
$$;

-- The key of one new task for a limit whose key path is p_path (NULL: one key, ''), read from the
-- run input (p_from 'run') or the task's own input ('input': a map task's element, else the
-- step's input built from its dependencies).
create or replace function pgflow._task_limit_key(
  p_path jsonpath, p_from text, p_step_type text, p_run_input jsonb, p_element jsonb,
  p_run_id uuid, p_flow_slug text, p_step_slug text, p_index integer
)
returns text
language sql
stable
set search_path = ''
as $$
  select case when p_path is null then ''
              when p_from = 'input' and p_step_type = 'map' then pgflow._limit_key(p_element, p_path)
              when p_from = 'input'
                then pgflow._limit_key((select o from pgflow._task_input(p_run_id, p_flow_slug, p_step_slug, p_index) o),
                                       p_path)
              else pgflow._limit_key(p_run_input, p_path) end
$$;

-- Every problem with one step's (or a flow's) flow-control options, as the DSL spells them, one
-- line each naming p_where, the option, the value and the fix; empty when they are valid.
-- p_options: {"priority": n, "concurrency": {"limit": n, "key": "$.path", "keyFrom": "run" |
-- "input", "scope": "name"}, "rateLimit": {"limit": n, "per": ms | "interval", "key": "$.path",
-- "keyFrom": "run" | "input"}}; absent or JSON null means unset.
create or replace function pgflow._flow_control_problems(p_where text, p_options jsonb)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  problems text[] := '{}';
  b jsonb := pgflow.flow_control_bounds();
  c jsonb := nullif(p_options -> 'concurrency', 'null'::jsonb);
  r jsonb := nullif(p_options -> 'rateLimit', 'null'::jsonb);
  v jsonb;
begin
  if r is not null then
    problems := pgflow._rate_limit_problems(p_where, r);
  end if;
  v := nullif(p_options -> 'priority', 'null'::jsonb);
  if v is not null and not (jsonb_typeof(v) = 'number' and v::text ~ '^-?[0-9]{1,10}$'
                            and (v::text)::bigint between (b -> 'priority' ->> 'min')::bigint
                                                      and (b -> 'priority' ->> 'max')::bigint) then
    problems := problems || format('%s: priority must be an integer between %s and %s (higher goes first), got %s',
      p_where, b -> 'priority' ->> 'min', b -> 'priority' ->> 'max', v);
  end if;
  if c is null then
    return problems;
  end if;
  if jsonb_typeof(c) <> 'object' then
    return problems || format('%s: concurrency must be an object such as {"limit": 3, "key": "$.customerId"}, got %s',
      p_where, left(c::text, 200));
  end if;
  v := c -> 'limit';
  if v is null or not (jsonb_typeof(v) = 'number' and v::text ~ '^-?[0-9]{1,10}$'
                       and (v::text)::bigint between (b -> 'concurrency' ->> 'min')::bigint
                                                 and (b -> 'concurrency' ->> 'max')::bigint) then
    problems := problems || format('%s: concurrency.limit must be an integer between %s and %s (tasks at once), got %s',
      p_where, b -> 'concurrency' ->> 'min', b -> 'concurrency' ->> 'max', coalesce(v::text, 'nothing'));
  end if;
  problems := problems || pgflow._limit_key_problems(p_where, 'concurrency', c, '$.customerId');
  v := nullif(c -> 'scope', 'null'::jsonb);
  if v is not null and not (jsonb_typeof(v) = 'string' and (v #>> '{}') ~ '^[A-Za-z0-9_.:-]{1,100}$') then
    problems := problems || format('%s: concurrency.scope must be 1 to 100 letters, digits, "_", ".", ":" or "-" (a name shared by the steps that share the limit, e.g. "slack-api"), got %s',
      p_where, left(v::text, 200));
  end if;
  return problems;
end;
$$;

-- The step, its row locked for a change of its flow control; an unknown step fails, naming it.
create or replace function pgflow._step_for_update(p_flow_slug text, p_step_slug text)
returns pgflow.steps
language plpgsql
volatile
set search_path = ''
as $$
declare
  step pgflow.steps;
begin
  select * into step from pgflow.steps s
  where s.flow_slug = p_flow_slug and s.step_slug = p_step_slug
  for update;
  if not found then
    raise exception 'step %.% does not exist', coalesce(p_flow_slug, 'NULL'), coalesce(p_step_slug, 'NULL')
      using errcode = '22023', hint = 'create it with pgflow.add_step first';
  end if;
  return step;
end;
$$;

-- Sets a step's flow control: its priority and its concurrency limit (NULL: none). The SQL form
-- of the DSL's options, validated the same way. The limit's value is upserted for its scope (the
-- step's own '<alias or flow>/<step>' unless concurrency_scope names a shared one), so every step
-- and version naming the scope gets the new limit; tasks already created keep the scope and key
-- they were created with. Returns the step.
create or replace function pgflow.set_step_flow_control(
  flow_slug text,
  step_slug text,
  priority integer default 0,
  concurrency integer default null,
  concurrency_key text default null,
  concurrency_key_from text default 'run',
  concurrency_scope text default null
)
returns pgflow.steps
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  step pgflow.steps;
  problems text[];
  scope text;
begin
  step := pgflow._step_for_update(set_step_flow_control.flow_slug, set_step_flow_control.step_slug);
  if concurrency is null and (concurrency_key is not null or concurrency_scope is not null) then
    raise exception 'step %.%: concurrency_key and concurrency_scope need a concurrency limit',
      step.flow_slug, step.step_slug
      using errcode = '22023', hint = 'pass concurrency => n (tasks at once), or leave the key and scope out';
  end if;
  problems := pgflow._flow_control_problems(format('step %s.%s', step.flow_slug, step.step_slug),
    jsonb_build_object('priority', priority,
                       'concurrency', case when concurrency is not null then
                         jsonb_build_object('limit', concurrency, 'key', concurrency_key,
                                            'keyFrom', concurrency_key_from, 'scope', concurrency_scope) end));
  if cardinality(problems) > 0 then
    raise exception '%', array_to_string(problems, '; ') using errcode = '22023';
  end if;
  scope := case when concurrency is not null
                then coalesce(concurrency_scope, pgflow._default_limit_scope(step.flow_slug, step.step_slug)) end;
  update pgflow.steps s
  set priority = coalesce(set_step_flow_control.priority, 0),
      concurrency_scope = scope,
      concurrency_key = set_step_flow_control.concurrency_key::jsonpath,
      concurrency_key_from = case when set_step_flow_control.concurrency_key is not null
                                  then coalesce(set_step_flow_control.concurrency_key_from, 'run') end
  where s.flow_slug = step.flow_slug and s.step_slug = step.step_slug
  returning * into step;
  if scope is not null then
    perform pgflow.set_concurrency_limit(scope, concurrency);
  end if;
  return step;
end;
$$;

-- Sets the limit of a scope (creating it), and releases at once the waiting tasks a raised limit
-- lets go. An operator's way to change a limit between deploys; the next compile of a flow that
-- names the scope sets it to that flow's value again. Returns how many tasks were released.
create or replace function pgflow.set_concurrency_limit(scope text, max_running integer)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  b jsonb := pgflow.flow_control_bounds() -> 'concurrency';
  k record;
  released integer := 0;
begin
  if max_running is null or max_running < (b ->> 'min')::integer or max_running > (b ->> 'max')::integer then
    raise exception 'set_concurrency_limit: max_running must be an integer between % and %, got %',
      b ->> 'min', b ->> 'max', coalesce(max_running::text, 'NULL')
      using errcode = '22023', hint = 'the limit is how many tasks of one key may be queued or started at once';
  end if;
  if scope is null or scope !~ '^[A-Za-z0-9_.:/-]{1,200}$' then
    raise exception 'set_concurrency_limit: invalid scope %', coalesce(quote_literal(scope), 'NULL')
      using errcode = '22023', hint = 'a scope is a step''s "<alias or flow>/<step>" or a shared name such as slack-api';
  end if;
  insert into pgflow.concurrency_limits as l (scope, max_running)
  values (set_concurrency_limit.scope, set_concurrency_limit.max_running)
  on conflict on constraint concurrency_limits_pkey do update
  set max_running = excluded.max_running, updated_at = now()
  where l.max_running is distinct from excluded.max_running;
  -- In lock order (see pgflow._release_noted).
  for k in
    select distinct t.limit_key, pgflow._limit_lock_key(t.limit_scope, t.limit_key) as lock_key
    from pgflow.step_tasks t
    where t.status = 'waiting' and t.limit_scope = set_concurrency_limit.scope
    order by 2, 1
  loop
    released := released + pgflow._release_waiting(set_concurrency_limit.scope, k.limit_key);
  end loop;
  return released;
end;
$$;

-- The startup compiler's part (0720_ensure_flow_compiled.sql). A new version (p_define) gets each
-- step's flow control from the options, the flow's as the default of a step that sets none. An
-- existing version keeps its stored priority, scopes and keys, like its other options, but the
-- limits it supplies (concurrency, and a rate limit's count and interval) are applied to its
-- steps' scopes: a limit is tuned by deploying, without a new version.
create or replace function pgflow._apply_flow_control(p_flow_slug text, p_options jsonb, p_define boolean)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  s record;
  opts jsonb;
  c jsonb;
  r jsonb;
begin
  for s in select st.step_slug, st.concurrency_scope, st.rate_scope from pgflow.steps st
           where st.flow_slug = p_flow_slug order by st.step_index loop
    opts := pgflow._effective_flow_control(p_options, s.step_slug);
    c := nullif(opts -> 'concurrency', 'null'::jsonb);
    r := nullif(opts -> 'rateLimit', 'null'::jsonb);
    if p_define and r is not null then
      perform pgflow.set_step_rate_limit(p_flow_slug, s.step_slug, (r ->> 'limit')::integer,
        pgflow._rate_per_ms(r -> 'per') * interval '1 millisecond', r ->> 'key', coalesce(r ->> 'keyFrom', 'run'));
    elsif r is not null and s.rate_scope is not null then
      perform pgflow.set_rate_limit(s.rate_scope, (r ->> 'limit')::integer,
        pgflow._rate_per_ms(r -> 'per') * interval '1 millisecond');
    end if;
    if p_define then
      if c is not null or coalesce((opts ->> 'priority')::integer, 0) <> 0 then
        perform pgflow.set_step_flow_control(p_flow_slug, s.step_slug,
          coalesce((opts ->> 'priority')::integer, 0), (c ->> 'limit')::integer, c ->> 'key',
          coalesce(c ->> 'keyFrom', 'run'), c ->> 'scope');
      end if;
    elsif c is not null and s.concurrency_scope is not null then
      perform pgflow.set_concurrency_limit(s.concurrency_scope, (c ->> 'limit')::integer);
    end if;
  end loop;
end;
$$;

-- A step's flow-control options as compiled: its own, else the flow's (each key on its own).
create or replace function pgflow._effective_flow_control(p_options jsonb, p_step_slug text)
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select jsonb_strip_nulls(jsonb_build_object(
    'priority', coalesce(nullif(p_options -> 'steps' -> p_step_slug -> 'priority', 'null'::jsonb),
                         nullif(p_options -> 'flow' -> 'priority', 'null'::jsonb)),
    'concurrency', coalesce(nullif(p_options -> 'steps' -> p_step_slug -> 'concurrency', 'null'::jsonb),
                            nullif(p_options -> 'flow' -> 'concurrency', 'null'::jsonb)),
    'rateLimit', coalesce(nullif(p_options -> 'steps' -> p_step_slug -> 'rateLimit', 'null'::jsonb),
                          nullif(p_options -> 'flow' -> 'rateLimit', 'null'::jsonb))))
$$;

-- Every flow-control problem of a compile's options, flow and steps, one line each.
create or replace function pgflow._flow_control_option_problems(p_options jsonb)
returns text[]
language sql
immutable
set search_path = ''
as $$
  select coalesce(array_agg(p order by o, p), '{}')
  from (
    select 0 as o, unnest(pgflow._flow_control_problems('flow', p_options -> 'flow')) as p
    where jsonb_typeof(p_options -> 'flow') = 'object'
    union all
    select 1, unnest(pgflow._flow_control_problems('step ' || s.key, s.value))
    from jsonb_each(case when jsonb_typeof(p_options -> 'steps') = 'object' then p_options -> 'steps'
                         else '{}'::jsonb end) s
    where jsonb_typeof(s.value) = 'object'
  ) x
$$;

-- Raises, naming the flow, when a run's priority (start_flow's) is outside the bounds.
create or replace function pgflow._check_run_priority(p_flow_slug text, p_priority integer)
returns void
language plpgsql
immutable
set search_path = ''
as $$
declare
  b jsonb := pgflow.flow_control_bounds() -> 'priority';
begin
  if p_priority is null or p_priority < (b ->> 'min')::integer or p_priority > (b ->> 'max')::integer then
    raise exception 'flow %: priority must be an integer between % and %, got %', p_flow_slug,
      b ->> 'min', b ->> 'max', coalesce(p_priority::text, 'NULL')
      using errcode = '22023', hint = 'higher goes first; 0 is the default, a nightly batch might use -10';
  end if;
end;
$$;

-- ---- schemas/0258_fair_window.sql
-- Fairness on a shared queue (docs/flow-control.md). A queue is read first in, first out, once: a
-- transaction that sends 20,000 tasks puts every other flow of the queue behind all of them. So
-- such a transaction puts the queue in window mode: it sends the first pgflow._fair_window() of
-- its tasks and creates the rest 'waiting' (no message; limit_scope and rate_scope NULL, which is
-- what tells them from tasks waiting for a limit). While the queue is in window mode (a row in
-- pgflow.fair_windows) every new task of an unlimited step without a start delay waits the same
-- way, whatever its flow, and claims release waiting tasks in turn across groups (a flow
-- version's step): priority first, then each group's oldest before any group's second, then age.
-- A claim releases before it reads what its read will take past the visible backlog
-- (pgflow._release_before_read), so the tasks whose turn it is are read by that claim and a
-- newcomer's task waits behind the visible backlog at most, not behind the whole backlog.
--
-- The window is not counted from task rows: a count over a partial index that every task enters
-- and leaves walks dead entries until vacuum, and costs every created task. It is kept by
-- construction instead (a claim releases about what it takes), and grows only when a read comes back short
-- while tasks wait (it then releases what it lacked), so it follows what the readers ask for.
-- Outside window mode a created task pays one primary-key probe of an empty table and a
-- transaction-local counter; a claim pays the same probe. A flow alone on its queue never enters
-- window mode (pgflow._window_room).
--
-- It never holds work back from a reader with nothing to do: a short read releases what it lacked,
-- and pgflow.tick() releases waiting tasks of a queue that left window mode while a task was being
-- parked. Messages that leave the queue unclaimed (a cancel) shrink the window until a short read
-- refills it.

-- How many messages one transaction sends to a queue before the rest of its tasks wait: the
-- window a newcomer can wait behind. Small, since the window only has to cover the readers' reads
-- between two claims (each claim releases what it took, each short read what it lacked).
create or replace function pgflow._fair_window()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 32
$$;

-- The queues in window mode. A row exists only while the queue has tasks waiting for their turn;
-- the claim that finds none left deletes it. visible: the queue's visible backlog (messages sent
-- and not yet read) as the last claim that released before its read left it
-- (pgflow._release_before_read); a queue entering window mode starts from its window (or from
-- its depth, pgflow._note_depth). An estimate: claims that release after their reads leave it as
-- it is (each releases what it took, so the backlog stays about where it was), and the next claim
-- that releases before its read counts it again.
create table if not exists pgflow.fair_windows (
  queue_name text not null,
  since timestamptz not null default now(),
  visible integer not null default pgflow._fair_window(),
  constraint fair_windows_pkey primary key (queue_name),
  constraint fair_windows_visible_check check (visible >= 0)
);

-- The tasks waiting for their queue's turn, by group, in release order: priority (higher first,
-- hence its negation), age, then the task's key, so that a position in a group can be named and
-- a scan started after it (pgflow._release_turn_groups). Partial: empty while no queue is in
-- window mode, and a limited task never enters it.
create index if not exists step_tasks_turn_idx
  on pgflow.step_tasks (queue_name, flow_slug, step_slug, (- priority), queued_at, run_id, task_index)
  where status = 'waiting' and limit_scope is null and rate_scope is null;

-- The queues at least two flows route steps to, each with the highest message id a claim has read
-- from it (advanced now and then, see pgflow._take_turns). PGMQ gives a queue's messages
-- increasing ids, so a sender that just got message id m knows the queue holds about
-- m - claimed_msg_id messages ahead of the readers, with one primary-key probe and no count: a
-- backlog built by many small transactions (one start_flow per request) puts the queue in window
-- mode as one big transaction does. The estimate errs high only: the cursor lags by less than
-- pgflow._cursor_step() messages, and messages that left the queue unread (a cancel) count until
-- a read passes them. A queue without a row has one flow, no one to take turns with: its tasks are
-- always sent, and this probe is all the fairness it pays for. Rows are kept by pgflow.add_step
-- and pgflow.delete_flow_and_data.
create table if not exists pgflow.queue_cursors (
  queue_name text not null,
  claimed_msg_id bigint not null default 0,
  constraint queue_cursors_pkey primary key (queue_name)
);

-- How far a queue's cursor may lag behind the reads before a claim moves it: one row update per
-- this many messages read, not one per claim, so several workers rarely touch the row at once
-- (and never wait for each other there: see pgflow._take_turns).
create or replace function pgflow._cursor_step()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 16
$$;

-- Keeps pgflow.queue_cursors: a row for each queue that at least two flows route steps to, none
-- for the others. A new row starts at 0, so on a queue that already sent messages the first
-- sends over-estimate its depth until a claim reads from it. A queue that loses its row (one of
-- its two flows deleted) has its waiting turns released here, in order, in batches.
create or replace function pgflow._sync_queue_cursor(p_queue text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if (select count(distinct s.flow_slug) from pgflow.steps s where s.queue_name = p_queue) >= 2 then
    insert into pgflow.queue_cursors (queue_name) values (p_queue) on conflict do nothing;
  else
    delete from pgflow.queue_cursors c where c.queue_name = p_queue;
    -- Its one flow has no one to take turns with: what waits for a turn is sent now, as every new
    -- task of a queue without a cursor is. Claims on a queue with neither a cursor nor a window
    -- release nothing (they pay no fairness), so nothing would release these later but a tick.
    if found then
      while pgflow._release_turns(p_queue, 1000) > 0 loop
      end loop;
    end if;
  end if;
end;
$$;

-- How many of p_count new tasks for queue p_queue to send now (room); the others wait for their
-- turn. cursor is the queue's cursor (null on a queue only one flow routes to, which never waits:
-- room is always p_count). On a shared queue: none while it is in window mode; otherwise all of
-- them while this transaction has sent at most pgflow._fair_window() to it (counted in a
-- transaction-local setting, one queue at a time: a transaction alternating between queues
-- restarts its count), and the transaction that crosses the window puts the queue in window mode.
-- After sending, the caller gives the highest message id it got to pgflow._note_depth.
create or replace function pgflow._window_room(p_queue text, p_count integer,
                                               out room integer, out cursor bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  sent text;
  n integer := p_count;
begin
  room := p_count;
  select c.claimed_msg_id into cursor from pgflow.queue_cursors c where c.queue_name = p_queue;
  if cursor is null then
    return;
  end if;
  if exists (select 1 from pgflow.fair_windows w where w.queue_name = p_queue) then
    room := 0;
  else
    sent := pg_catalog.current_setting('pgflow.window_sent', true);
    if sent is not null and split_part(sent, chr(31), 1) = p_queue then
      n := n + split_part(sent, chr(31), 2)::integer;
    end if;
    perform pg_catalog.set_config('pgflow.window_sent', p_queue || chr(31) || n, true);
    if n > pgflow._fair_window() then
      insert into pgflow.fair_windows (queue_name) values (p_queue) on conflict do nothing;
      room := greatest(0, p_count - (n - pgflow._fair_window()));
    end if;
  end if;
  -- Tasks parked here may sit before the positions this transaction's releases recorded on this
  -- queue (pgflow._release_turns): forget those, so its next release looks at every group from
  -- its start.
  if room < p_count and pg_catalog.current_setting('pgflow.turn_floors', true) <> '' then
    perform pg_catalog.set_config('pgflow.turn_floors',
      (pg_catalog.current_setting('pgflow.turn_floors', true)::jsonb - p_queue)::text, true);
  end if;
end;
$$;

-- After sending to a shared queue whose cursor was p_cursor (from pgflow._window_room; null for
-- a queue one flow routes to) up to message id p_msg_id: a queue holding more than a window ahead
-- of its readers enters window mode, so the next tasks wait for their turn instead of lining up
-- behind the backlog.
create or replace function pgflow._note_depth(p_queue text, p_cursor bigint, p_msg_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if p_cursor is not null and p_msg_id - p_cursor > pgflow._fair_window() then
    insert into pgflow.fair_windows (queue_name, visible) values (p_queue, p_msg_id - p_cursor)
    on conflict do nothing;
  end if;
end;
$$;

-- Whether queue p_queue has tasks waiting for their turn (one probe of a partial index).
create or replace function pgflow._turn_waiting(p_queue text)
returns boolean
language sql
stable
set search_path = ''
as $$
  select exists (select 1 from pgflow.step_tasks t
                 where t.queue_name = p_queue and t.status = 'waiting'
                   and t.limit_scope is null and t.rate_scope is null)
$$;

-- Releases up to p_count tasks of queue p_queue waiting for their turn: priority (higher first),
-- then each group's n-th task before any group's (n+1)-th, then age. Each is made queued and its
-- message sent (no delay: a step with a start delay never waits for its turn); the queue is
-- announced. A task another transaction holds (a concurrent release, a cancel) is skipped. When
-- none is left waiting the queue leaves window mode. Returns how many were released.
--
-- A transaction that releases again (a drain inside one transaction, a DO block) would walk, in
-- each group, every index entry of the tasks it released before: their entries stay until the
-- transaction ends, and walking them from each group's start makes such a drain quadratic. So
-- each release records, per group, the last position it released (a transaction-local setting,
-- pgflow.turn_floors), and the next release of the transaction starts each known group after it,
-- without looking for other groups; only a release those groups cannot fill looks for all of
-- them from the start. A transaction that parks tasks forgets its positions on that queue
-- (pgflow._window_room),
-- so its own new tasks are not passed over; a task another transaction parks meanwhile at an
-- earlier position is released when the known groups run short, as is a task skipped while
-- another transaction held it.
create or replace function pgflow._release_turns(p_queue text, p_count integer)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  floors jsonb := nullif(pg_catalog.current_setting('pgflow.turn_floors', true), '')::jsonb;
  done integer := 0;
begin
  if p_count is null or p_count <= 0 then
    return 0;
  end if;
  if floors -> p_queue is not null then
    done := pgflow._release_turn_groups(p_queue, p_count, floors -> p_queue, false);
  end if;
  if done < p_count then
    floors := nullif(pg_catalog.current_setting('pgflow.turn_floors', true), '')::jsonb;
    done := done + pgflow._release_turn_groups(p_queue, p_count - done, floors -> p_queue, true);
  end if;
  if done = 0 then
    -- Nothing left to take turns: the queue leaves window mode. A task parked by a transaction
    -- that has not committed yet is released by the next short read or by pgflow.tick().
    -- The row is deleted only if no other transaction holds it (skip locked), never waited for:
    -- the other holder is a claim deleting it too. Waiting here was one half of a deadlock
    -- between two claims: a claim reaches this delete holding the row locks of the tasks its
    -- release locked (with READ COMMITTED, a row released and committed by a third claim
    -- since this statement's snapshot is locked in its new version, messages visible), while
    -- the claim that deleted the row first goes on to claim one of those tasks.
    if not pgflow._turn_waiting(p_queue) then
      delete from pgflow.fair_windows w
      where w.queue_name = p_queue
        and w.ctid = (select w2.ctid from pgflow.fair_windows w2 where w2.queue_name = p_queue
                      for update skip locked);
    end if;
    return 0;
  end if;
  perform pgflow._announce('pgflow_queue:' || p_queue, '');
  return done;
end;
$$;

-- One release of pgflow._release_turns: up to p_count tasks of queue p_queue, from the groups
-- p_floors names (flow and step joined by chr(31), each with the last position released there)
-- when p_discover is false, else from every group with waiting tasks (one index probe per group,
-- a skip scan), each after its position in p_floors if it has one. Records the positions it
-- released in pgflow.turn_floors. Returns how many it released.
--
-- Every read here walks step_tasks_turn_idx in its order and stops at the LIMIT, or takes rows by
-- row version. Statistics taken before a backlog say the index is empty: a plan made on them
-- would scan it in full (1,500 rows read to release 10, tests/sql/claim_plan_test.ts) through a
-- bitmap, or through the index filtered by row version; so bitmap and seq scans are priced out
-- here (as seq scans are in the claim, which calls this; pgflow.tick() calls it too), and the rows
-- picked are locked by row version alone.
create or replace function pgflow._release_turn_groups(p_queue text, p_count integer, p_floors jsonb,
                                                       p_discover boolean)
returns integer
language plpgsql
volatile
set search_path = ''
set enable_bitmapscan = off
set enable_seqscan = off
as $$
declare
  rel record;
  ids bigint[];
  floors jsonb;
begin
  with recursive found as (
    -- The distinct groups with waiting tasks, one index probe each (a skip scan).
    (select t.flow_slug, t.step_slug from pgflow.step_tasks t
     where p_discover and t.queue_name = p_queue and t.status = 'waiting' and t.limit_scope is null
       and t.rate_scope is null
     order by t.flow_slug, t.step_slug limit 1)
    union all
    select nx.flow_slug, nx.step_slug from found g
    cross join lateral (
      select t.flow_slug, t.step_slug from pgflow.step_tasks t
      where t.queue_name = p_queue and t.status = 'waiting' and t.limit_scope is null and t.rate_scope is null
        and (t.flow_slug, t.step_slug) > (g.flow_slug, g.step_slug)
      order by t.flow_slug, t.step_slug limit 1
    ) nx
  ),
  groups as (
    select f.flow_slug, f.step_slug from found f
    union all
    select split_part(k, chr(31), 1), split_part(k, chr(31), 2)
    from jsonb_object_keys(coalesce(p_floors, '{}'::jsonb)) k
    where not p_discover
  ),
  bounded as (
    -- Each group's last released position, or one before any task (priorities are bounded far
    -- inside the integer range).
    select g.flow_slug, g.step_slug,
           coalesce((f.pos ->> 0)::integer, -2147483647) as fp,
           coalesce((f.pos ->> 1)::timestamptz, '-infinity'::timestamptz) as fq,
           coalesce((f.pos ->> 2)::uuid, '00000000-0000-0000-0000-000000000000'::uuid) as fr,
           coalesce((f.pos ->> 3)::integer, -1) as fi
    from groups g
    left join lateral (select p_floors -> (g.flow_slug || chr(31) || g.step_slug) as pos) f on true
  ),
  ranked as (
    select c.tid, c.priority, c.queued_at, c.turn, c.run_id, c.step_slug, c.task_index
    from bounded g
    -- Each group's first p_count after its position, in its index order, numbered after the
    -- LIMIT: a window function over the scan itself could be planned to read the whole group.
    cross join lateral (
      select x.*, row_number() over (order by - x.priority, x.queued_at, x.run_id, x.task_index) as turn
      from (
        select t.ctid as tid, t.priority, t.queued_at, t.run_id, t.step_slug, t.task_index
        from pgflow.step_tasks t
        where t.queue_name = p_queue and t.status = 'waiting' and t.limit_scope is null and t.rate_scope is null
          and t.flow_slug = g.flow_slug and t.step_slug = g.step_slug
          and (- t.priority, t.queued_at, t.run_id, t.task_index) > (g.fp, g.fq, g.fr, g.fi)
        order by - t.priority, t.queued_at, t.run_id, t.task_index
        limit p_count
      ) x
    ) c
  ),
  picked as (
    select r.tid from ranked r
    order by r.priority desc, r.turn, r.queued_at, r.run_id, r.step_slug, r.task_index
    limit p_count
  ),
  locked as (
    select t.ctid as tid, t.flow_slug, t.run_id, t.step_slug, t.task_index, t.priority, t.queued_at, t.status
    from pgflow.step_tasks t
    -- By row version only (a TID scan): a join on the key, or the waiting conditions here, could
    -- be planned as a walk over every waiting task. A row changed since it was picked has a new
    -- row version, which FOR UPDATE re-checks against the row version asked for and leaves out.
    where t.ctid = any (array(select p.tid from picked p))
    for update of t skip locked
  ),
  live as (
    select * from locked l where l.status = 'waiting'
  )
  select array_agg(l.tid order by l.priority desc, l.queued_at, l.run_id, l.step_slug, l.task_index) as tids,
         -- The body is informational only: the claim reads ids, never bodies.
         array_agg(jsonb_build_object('flow_slug', l.flow_slug, 'run_id', l.run_id,
                                      'step_slug', l.step_slug, 'task_index', l.task_index)
                   order by l.priority desc, l.queued_at, l.run_id, l.step_slug, l.task_index) as msgs,
         -- The last position released in each group.
         (select jsonb_object_agg(z.grp, z.pos) from (
            select distinct on (v.flow_slug, v.step_slug) v.flow_slug || chr(31) || v.step_slug as grp,
                   jsonb_build_array(- v.priority, v.queued_at, v.run_id, v.task_index) as pos
            from live v
            order by v.flow_slug, v.step_slug, - v.priority desc, v.queued_at desc, v.run_id desc,
                     v.task_index desc) z) as last
  into rel
  from live l;
  if rel.tids is null then
    return 0;
  end if;
  floors := coalesce(nullif(pg_catalog.current_setting('pgflow.turn_floors', true), '')::jsonb, '{}'::jsonb);
  perform pg_catalog.set_config('pgflow.turn_floors',
    jsonb_set(floors, array[p_queue], coalesce(floors -> p_queue, '{}'::jsonb) || rel.last)::text, true);
  -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
  select array_agg(id order by id) into ids from pgmq.send_batch(p_queue, rel.msgs, 0) as id;
  -- For a release before a claim's read, the first and last ids it sent (pgflow._take_turns).
  if pg_catalog.current_setting('pgflow.turn_before', true) = p_queue then
    perform pg_catalog.set_config('pgflow.turn_ids',
      coalesce(nullif(split_part(pg_catalog.current_setting('pgflow.turn_ids', true), ' ', 1), ''),
               ids[1]::text) || ' ' || ids[cardinality(ids)], true);
  end if;
  -- One row at a time by its row version (locked above, so it has not moved).
  for i in 1 .. cardinality(ids) loop
    update pgflow.step_tasks t set status = 'queued', message_id = ids[i] where t.ctid = rel.tids[i];
  end loop;
  return cardinality(ids);
end;
$$;

-- The class of the release-before-read locks: the bytes 'pgfT', in the two-key form of advisory
-- locks (see pgflow._listen_lock_class, 'pgfw', for the other classes).
create or replace function pgflow._turn_lock_class()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 1885824596
$$;

-- Before a claim's read of p_depth messages on queue p_queue in window mode: releases waiting
-- tasks first, so that the tasks whose turn it is are read by this very claim, rather than
-- released after its read behind what is already visible. It releases what the read will take
-- beyond the visible backlog (p_depth less pgflow.fair_windows.visible), so the read empties the
-- backlog and a newcomer's first task, first in turn order, is among what it reads. A backlog a
-- read long or more gets nothing released before the read, which then shrinks it.
-- pgflow._take_turns, after the read, counts the backlog again: from the highest message id read
-- against the ids this release sent (recorded by pgflow._release_turn_groups) when the read
-- reached them, else from the estimate less what was read; a short read left none.
--
-- One claim per queue at a time: the queue's turn lock (a transaction advisory lock) is held from
-- here to the claim's commit, and claims in window mode wait for it (pgflow.complete_and_claim
-- after its completions: why that closes no cycle is said there). Why: the release locks
-- the tasks it picks with skip locked and, under READ COMMITTED, also a task another release
-- made queued and committed since its snapshot, left out but locked until the transaction ends
-- (docs/flow-control.md, "Locks"). Two claims each releasing before their reads could each hold
-- such a lock on a task the other read and wait for each other. Serialised, a release's snapshot
-- is taken after the previous holder committed, and every release in window mode is one of them
-- (pgflow.tick() aside), so no such lock is taken. The cost: claims on one queue in window mode
-- run one at a time from their release to their commit (a millisecond or two each).
--
-- Returns what the caller counts as released for its claim (p_depth: what it takes needs no
-- release after the read), or NULL when the queue is not in window mode.
create or replace function pgflow._release_before_read(p_queue text, p_depth integer)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  backlog integer;
  n integer;
begin
  perform pg_catalog.pg_advisory_xact_lock(pgflow._turn_lock_class(), pg_catalog.hashtext(p_queue));
  -- The claim's start, for the tasks it starts (pgflow._start_tasks): it may have waited here.
  perform pg_catalog.set_config('pgflow.claim_start', pg_catalog.clock_timestamp()::text, true);
  -- Read under the lock: the claim that held it may have moved the estimate, or left window mode.
  select w.visible into backlog from pgflow.fair_windows w where w.queue_name = p_queue;
  if not found then
    return null;
  end if;
  perform pg_catalog.set_config('pgflow.turn_before', p_queue, true);
  perform pg_catalog.set_config('pgflow.turn_ids', '', true);
  n := pgflow._release_turns(p_queue, greatest(0, p_depth - backlog));
  perform pg_catalog.set_config('pgflow.turn_before', p_queue || chr(31) || backlog || chr(31) || n,
                                true);
  return p_depth;
end;
$$;

-- After a claim on queue p_queue that took p_claimed tasks from a read of p_read messages out of
-- p_depth asked for, the highest message id read being p_top: in window mode, release as many
-- waiting tasks as were claimed, so the window keeps its length; and whenever the read came back
-- short while tasks wait, release what it lacked, so a reader never finds the queue empty while
-- work waits for its turn. On a shared queue, the cursor moves to p_top once it lags by
-- pgflow._cursor_step() or more; a claim that finds the row locked by another claim leaves it (the
-- other moves it), so claims never wait for each other here. Called only for a queue with a
-- cursor row or a window (pgflow._start_tasks, pgflow.read_and_claim): tasks wait for a turn only
-- there, and a queue one flow routes to pays its claims nothing for fairness but the probes that
-- find neither.
create or replace function pgflow._take_turns(p_queue text, p_claimed integer, p_read integer, p_depth integer,
                                              p_top bigint default null)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  n integer := 0;
  before text;
  ids text;
begin
  if p_top is not null then
    update pgflow.queue_cursors c set claimed_msg_id = p_top
    where c.queue_name = p_queue
      and c.ctid = (select c2.ctid from pgflow.queue_cursors c2
                    where c2.queue_name = p_queue and c2.claimed_msg_id <= p_top - pgflow._cursor_step()
                    for update skip locked);
  end if;
  if coalesce(p_read, 0) < coalesce(p_depth, 0) and pgflow._turn_waiting(p_queue) then
    n := p_depth - coalesce(p_read, 0);
  end if;
  if p_claimed > 0 and exists (select 1 from pgflow.fair_windows w where w.queue_name = p_queue) then
    n := n + p_claimed;
  end if;
  if n > 0 then
    n := pgflow._release_turns(p_queue, n);
  end if;
  before := pg_catalog.current_setting('pgflow.turn_before', true);
  if split_part(before, chr(31), 1) = p_queue then
    -- After a release before the read (pgflow._release_before_read): the visible backlog now.
    ids := pg_catalog.current_setting('pgflow.turn_ids', true);
    perform pg_catalog.set_config('pgflow.turn_before', '', true);
    update pgflow.fair_windows w
    set visible = case
          -- A short read took everything visible; what was released after it is the backlog.
          when coalesce(p_read, 0) < coalesce(p_depth, 0) then n
          -- The read reached this claim's own release, so it took everything visible before it
          -- (in id order; a message another reader holds is not visible): what it left of its
          -- own release, at most the ids past the highest read (none when the read went past
          -- it: another transaction sent and committed since). Ids between them that are
          -- another's (sent or held by another claim) are not counted: an estimate that errs
          -- low only puts a newcomer behind a few more messages, one that errs high would hold
          -- its release back.
          when ids <> '' and p_top >= split_part(ids, ' ', 1)::bigint
            then greatest(0, least(split_part(before, chr(31), 3)::integer,
                                   split_part(ids, ' ', 2)::bigint - p_top))
          -- It did not: the backlog it was told of, less what it read, and all it released.
          else greatest(0, split_part(before, chr(31), 2)::integer
                           + split_part(before, chr(31), 3)::integer - p_read)
        end
    where w.queue_name = p_queue
      and w.ctid = (select w2.ctid from pgflow.fair_windows w2 where w2.queue_name = p_queue
                    for update skip locked);
  end if;
  return n;
end;
$$;

-- ---- schemas/0260_flow_control.sql
-- Flow control's release machinery (docs/flow-control.md). Workers read each message once and
-- claim by exact identity, so a limit cannot be applied by skipping messages: it is applied before
-- a message exists. A task of a step with a concurrency limit (0255_limits.sql) is created
-- 'waiting', without a message, and is released (made 'queued', its message sent) when its
-- (scope, key) has capacity: at most the scope's limit of its tasks are queued or started at once.
--
-- Exactness. A (scope, key)'s capacity is only ever decided under its transaction lock
-- (pgflow._release_waiting): the lock is taken, the tasks holding capacity are counted (a fresh
-- snapshot, taken after the lock, so it sees every transaction that released or freed under the
-- lock before), and at most limit - held waiting tasks are released. Every change that frees
-- capacity (a held task that completes, fails for good, is cancelled or deleted) or creates a
-- waiting task runs that same function before its transaction commits, under the same lock: so of
-- two transactions touching one key, the second counts after the first committed, and no freed
-- unit is missed. Released-or-started tasks of a key therefore never exceed the limit, and a task
-- starts only once released, so started ones never do either. A retry keeps its unit (its task
-- goes from started back to queued, with its message): it still holds the message in flight.
--
-- Deadlock freedom. The changes are noted per row by triggers (pgflow._note_limit_key) and the
-- locks are all taken at commit, by one deferred trigger (pgflow._release_noted), in the order
-- of their lock keys; tick and set_concurrency_limit take them in that order too. A transaction
-- holding a key lock waits for nothing but key locks of a higher order (the released rows are
-- taken with SKIP LOCKED, sends and announces never wait), so no cycle can form.

-- The class of the limit locks: the bytes 'pgfL', in the two-key form of advisory locks (see
-- pgflow._listen_lock_class, 'pgfw', for the other class).
create or replace function pgflow._limit_lock_class()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 1885824588
$$;

-- The second key of a (scope, key)'s lock. Two pairs that share a hash share a lock: that costs
-- them some waiting, never exactness.
create or replace function pgflow._limit_lock_key(p_scope text, p_key text)
returns integer
language sql
immutable
set search_path = ''
as $$
  select pg_catalog.hashtext(p_scope || chr(31) || p_key)
$$;

-- Releases waiting tasks a release picked (and locked): each is made queued and its message sent
-- to its queue snapshot, with what is left of its step's start delay, its message id stored on the
-- task; queues that got visible messages are announced. Returns how many were released.
create or replace function pgflow._release_tasks(p_runs uuid[], p_steps text[], p_idx integer[])
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
  ids bigint[];
begin
  if p_runs is null then
    return 0;
  end if;
  update pgflow.step_tasks t set status = 'queued', not_before = null
  from unnest(p_runs, p_steps, p_idx) as u(run_id, step_slug, task_index)
  where t.run_id = u.run_id and t.step_slug = u.step_slug and t.task_index = u.task_index;
  for grp in
    select u.queue_name, u.delay, array_agg(u.run_id order by u.ord) as runs,
           array_agg(u.step_slug order by u.ord) as steps, array_agg(u.task_index order by u.ord) as idxs,
           -- The body is informational only: the claim reads ids, never bodies.
           array_agg(jsonb_build_object('flow_slug', u.flow_slug, 'run_id', u.run_id,
                                        'step_slug', u.step_slug, 'task_index', u.task_index)
                     order by u.ord) as msgs
    from (
      select t.run_id, t.flow_slug, t.step_slug, t.task_index, t.queue_name, r.ord,
             -- The step's start delay counts from when the task was created, waiting included.
             greatest(0, ceil(extract(epoch from t.queued_at - clock_timestamp()) + s.opt_start_delay))::integer as delay
      from unnest(p_runs, p_steps, p_idx) with ordinality as r(run_id, step_slug, task_index, ord)
      join pgflow.step_tasks t on t.run_id = r.run_id and t.step_slug = r.step_slug and t.task_index = r.task_index
      join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    ) u
    group by u.queue_name, u.delay
  loop
    -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
    select array_agg(id order by id) into ids
    from pgmq.send_batch(grp.queue_name, grp.msgs, grp.delay) as id;
    update pgflow.step_tasks t set message_id = u.id
    from unnest(grp.runs, grp.steps, grp.idxs, ids) as u(run_id, step_slug, task_index, id)
    where t.run_id = u.run_id and t.step_slug = u.step_slug and t.task_index = u.task_index;
    if grp.delay = 0 then
      perform pgflow._announce('pgflow_queue:' || grp.queue_name, '');
    end if;
  end loop;
  return cardinality(p_runs);
end;
$$;

-- Releases the waiting tasks of one (scope, key) that its capacity allows: by priority (higher
-- first), then age (pgflow._release_tasks). A waiting
-- task locked by another transaction (a cancel) is skipped, and so is one a rate limit holds back
-- (0262_rate_limits.sql): its not_before has not come, or its rate key's window has no room now
-- (a hint read without the rate lock: the claim decides exactly, this only spares sending a
-- message the claim would send back). Returns how many were released.
create or replace function pgflow._release_waiting(p_scope text, p_key text)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  cap integer;
  held integer;
  rel_runs uuid[];
  rel_steps text[];
  rel_idx integer[];
begin
  perform pg_catalog.pg_advisory_xact_lock(pgflow._limit_lock_class(), pgflow._limit_lock_key(p_scope, p_key));
  -- After the lock: each statement of a read-committed transaction reads a fresh snapshot.
  select l.max_running into cap from pgflow.concurrency_limits l where l.scope = p_scope;
  select count(*) into held from pgflow.step_tasks t
  where t.limit_scope = p_scope and t.limit_key = p_key and t.status in ('queued', 'started');
  -- A scope without a limit row (it was never set, or deleted by hand) limits nothing.
  if coalesce(cap, 2147483647) - held <= 0 then
    return 0;
  end if;
  select array_agg(p.run_id), array_agg(p.step_slug), array_agg(p.task_index)
  into rel_runs, rel_steps, rel_idx
  from (
    select t.run_id, t.step_slug, t.task_index from pgflow.step_tasks t
    where t.limit_scope = p_scope and t.limit_key = p_key and t.status = 'waiting'
      and (t.rate_scope is null
           or ((t.not_before is null or t.not_before <= clock_timestamp())
               and pgflow._rate_room(t.rate_scope, t.rate_key) > 0))
    order by t.priority desc, t.queued_at, t.run_id, t.step_slug, t.task_index
    limit coalesce(cap, 2147483647) - held
    for update skip locked
  ) p;
  return pgflow._release_tasks(rel_runs, rel_steps, rel_idx);
end;
$$;

-- Notes, for this transaction, a (scope, key) whose capacity a task row changed: a waiting task
-- created, or a held task that completed, failed, was cancelled or deleted. Kept in a
-- transaction-local setting, so a rolled-back subtransaction forgets its notes with its changes.
create or replace function pgflow._note_limit_key()
returns trigger
language plpgsql
set search_path = ''
as $$
declare
  noted text[] := coalesce(nullif(pg_catalog.current_setting('pgflow.limit_keys', true), '')::text[], '{}');
  k text;
begin
  if tg_op = 'INSERT' then
    k := new.limit_scope || chr(31) || new.limit_key;
  else
    k := old.limit_scope || chr(31) || old.limit_key;
  end if;
  if not (k = any (noted)) then
    perform pg_catalog.set_config('pgflow.limit_keys', (noted || k)::text, true);
  end if;
  return null;
end;
$$;

-- At commit (a deferred trigger, once per noted row; the first does the work): releases what the
-- noted keys' capacity allows, taking their locks in lock-key order (the deadlock argument at the
-- top of this file). security definer: a deferred trigger fires at commit, after the security
-- definer function that changed the row (start_flow, cancel_run called by service_role) has
-- returned, so it would otherwise run as the caller, who may not execute the release.
create or replace function pgflow._release_noted()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  noted text[] := nullif(pg_catalog.current_setting('pgflow.limit_keys', true), '')::text[];
  k record;
begin
  if noted is null then
    return null;
  end if;
  perform pg_catalog.set_config('pgflow.limit_keys', '', true);
  for k in
    select split_part(n, chr(31), 1) as scope, substr(n, strpos(n, chr(31)) + 1) as key
    from unnest(noted) n
    order by pgflow._limit_lock_key(split_part(n, chr(31), 1), substr(n, strpos(n, chr(31)) + 1)), n
  loop
    perform pgflow._release_waiting(k.scope, k.key);
  end loop;
  return null;
end;
$$;

-- The triggers: only a limited task's row fires them (the WHEN is checked without a call), so an
-- unlimited flow pays nothing. One pair per event: an INSERT trigger may not name OLD.
create or replace trigger step_tasks_note_waiting after insert on pgflow.step_tasks
  for each row when (new.limit_scope is not null and new.status = 'waiting')
  execute function pgflow._note_limit_key();
create or replace trigger step_tasks_note_freed after update of status on pgflow.step_tasks
  for each row when (old.limit_scope is not null and old.status in ('queued', 'started')
                     and new.status not in ('queued', 'started'))
  execute function pgflow._note_limit_key();
create or replace trigger step_tasks_note_deleted after delete on pgflow.step_tasks
  for each row when (old.limit_scope is not null and old.status in ('queued', 'started'))
  execute function pgflow._note_limit_key();
-- (CREATE OR REPLACE does not apply to constraint triggers: each is created once.)
do $$
begin
  create constraint trigger step_tasks_release_waiting after insert on pgflow.step_tasks
  deferrable initially deferred
  for each row when (new.limit_scope is not null and new.status = 'waiting')
  execute function pgflow._release_noted();
  create constraint trigger step_tasks_release_freed after update of status on pgflow.step_tasks
  deferrable initially deferred
  for each row when (old.limit_scope is not null and old.status in ('queued', 'started')
                     and new.status not in ('queued', 'started'))
  execute function pgflow._release_noted();
  create constraint trigger step_tasks_release_deleted after delete on pgflow.step_tasks
  deferrable initially deferred
  for each row when (old.limit_scope is not null and old.status in ('queued', 'started'))
  execute function pgflow._release_noted();
exception when duplicate_object then
  null;
end
$$;

-- The periodic release: releases, for every (scope, key) with waiting tasks, what its capacity
-- allows now, in lock order. Every release that matters already happens in the transaction that
-- freed the capacity; this pass is the safety net for capacity freed outside pgflow's functions
-- (a task row changed by hand), and it releases what rate limits allow now
-- (pgflow.release_rate_waiting). It also fires schedules' due ticks. Workers call it with stalled recovery; pg_cron may call it too. Returns how
-- many tasks it released.
create or replace function pgflow.tick()
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  k record;
  released integer := 0;
begin
  -- Rate limits first: their locks come before every concurrency lock (0262_rate_limits.sql). The
  -- tasks that have a concurrency limit too are released by the loop below, in its one pass.
  released := pgflow.release_rate_waiting(false);
  for k in
    select w.limit_scope, w.limit_key
    from (select distinct t.limit_scope, t.limit_key from pgflow.step_tasks t
          where t.status = 'waiting' and t.limit_scope is not null) w
    order by pgflow._limit_lock_key(w.limit_scope, w.limit_key), w.limit_scope || chr(31) || w.limit_key
  loop
    released := released + pgflow._release_waiting(k.limit_scope, k.limit_key);
  end loop;
  -- Tasks waiting for their turn on a queue that left window mode while they were being parked
  -- (0258_fair_window.sql): the queue goes back to window mode with a window's worth released.
  for k in
    select distinct t.queue_name from pgflow.step_tasks t
    where t.status = 'waiting' and t.limit_scope is null and t.rate_scope is null
      and not exists (select 1 from pgflow.fair_windows w where w.queue_name = t.queue_name)
  loop
    insert into pgflow.fair_windows (queue_name) values (k.queue_name) on conflict do nothing;
    released := released + pgflow._release_turns(k.queue_name, pgflow._fair_window());
  end loop;
  -- Windows whose every start has left them hold nothing a claim would read.
  delete from pgflow.rate_limit_windows w
  where not exists (select 1 from pgflow.rate_limits l
                    where l.scope = w.scope and w.starts[cardinality(w.starts)] > clock_timestamp() - l.per);
  -- Schedules' due ticks too (0270_schedules.sql), so whatever calls tick fires them; safe beside
  -- every other ticker (one run per tick).
  perform pgflow.fire_due_schedules();
  return released;
end;
$$;

-- Why tasks of one (scope, key) wait, in words: "concurrency slack-api key C042: 3 of 3 in flight".
-- One wording for waiting_tasks and get_run, so status, the dashboard, runs show and the client
-- say the same thing.
create or replace function pgflow.waiting_reason(
  limit_scope text,
  limit_key text,
  in_flight bigint,
  max_running integer
)
returns text
language sql
immutable
set search_path = ''
as $$
  select format('concurrency %s%s: %s of %s in flight', waiting_reason.limit_scope,
                case when waiting_reason.limit_key <> '' then ' key ' || waiting_reason.limit_key else '' end,
                waiting_reason.in_flight, coalesce(waiting_reason.max_running::text, 'unlimited'))
$$;

-- pgflow.waiting_tasks, which lists waiting tasks and why they wait, is in 0262_rate_limits.sql:
-- it reads rate limits' windows too.

-- ---- schemas/0262_rate_limits.sql
-- Rate limits (docs/flow-control.md, Rate limits): at most max_starts tasks of one (scope, key)
-- start in any window of length per, across every worker. The limit is on start times, so it is
-- decided where a task starts: the claim (pgflow._start_tasks calls pgflow._rate_gate for the
-- rate-limited tasks it just claimed). A task whose key's window is full is not started: it goes
-- back to 'waiting' with not_before, the time a start will fit, and its message is archived (a
-- claim never skips or hides a message for later). pgflow.release_rate_waiting, called by every
-- worker's ticker and by pgflow.tick, sends it a new message once its time has come.
--
-- Exactness. A sliding log, not a token bucket: a bucket of N refilling at N per interval lets
-- 2N start within one interval (a full bucket, then its refill), and the promise is N in ANY
-- window. Each key keeps the times of its last max_starts starts (pgflow.rate_limit_windows). The
-- gate takes the key's transaction lock, reads the clock after it, and starts a task only if
-- fewer than max_starts recorded starts lie within per before that time; it records the start and
-- holds the lock until commit. Of two claims of one key the second reads the clock after the
-- first committed its starts, so the times are recorded in order and every start is checked
-- against every earlier one. A claim rolled back (a worker killed) records nothing and starts
-- nothing. A retry, a recovered stalled task or a deferred one is claimed again, and counted
-- again: each claim is a start.
--
-- Locks. A claim takes rate locks (in lock-key order) before its commit takes any concurrency
-- lock (0260_flow_control.sql, deferred to commit); pgflow.tick and release_rate_waiting take the
-- rate locks they need first too, and only with pg_try_advisory_xact_lock. So rate locks always
-- precede concurrency locks, each class in lock-key order: no cycle can form.

-- The start times of each (scope, key)'s last max_starts starts, oldest first. One row per key,
-- written under the key's rate lock only; a row whose starts all left the window is deleted by
-- pgflow.tick.
create table if not exists pgflow.rate_limit_windows (
  scope text not null,
  key text not null,
  starts timestamptz[] not null,
  constraint rate_limit_windows_pkey primary key (scope, key)
);

-- The class of the rate locks: the bytes 'pgfR' (see pgflow._limit_lock_class, 'pgfL').
create or replace function pgflow._rate_lock_class()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 1885824594
$$;

-- Sets the rate limit of a scope (creating it). The operator's way to change it between deploys;
-- the next compile of a flow that names the scope sets it to that flow's value again.
create or replace function pgflow.set_rate_limit(scope text, max_starts integer, per interval)
returns void
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  problems text[];
begin
  if scope is null or scope !~ '^[A-Za-z0-9_.:/-]{1,200}$' then
    raise exception 'set_rate_limit: invalid scope %', coalesce(quote_literal(scope), 'NULL')
      using errcode = '22023', hint = 'a scope is a step''s "<alias or flow>/<step>"';
  end if;
  problems := pgflow._rate_limit_problems('set_rate_limit',
    jsonb_build_object('limit', max_starts, 'per', extract(epoch from per) * 1000));
  if cardinality(problems) > 0 then
    raise exception '%', array_to_string(problems, '; ') using errcode = '22023';
  end if;
  insert into pgflow.rate_limits as l (scope, max_starts, per)
  values (set_rate_limit.scope, set_rate_limit.max_starts, set_rate_limit.per)
  on conflict on constraint rate_limits_pkey do update
  set max_starts = excluded.max_starts, per = excluded.per, updated_at = now()
  where (l.max_starts, l.per) is distinct from (excluded.max_starts, excluded.per);
end;
$$;

-- Sets a step's rate limit (rate_limit NULL: none): at most rate_limit of its tasks per key start
-- in any window of length per. The SQL form of the DSL's rateLimit, validated the same way. The
-- scope is the step's own '<alias or flow>/<step>' (the versions behind one alias share it); the
-- limit is upserted for it. Tasks already created keep the scope and key they were created with.
-- Returns the step.
create or replace function pgflow.set_step_rate_limit(
  flow_slug text,
  step_slug text,
  rate_limit integer,
  per interval,
  rate_key text default null,
  rate_key_from text default 'run'
)
returns pgflow.steps
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  step pgflow.steps;
  problems text[];
  scope text;
begin
  step := pgflow._step_for_update(set_step_rate_limit.flow_slug, set_step_rate_limit.step_slug);
  if rate_limit is not null then
    problems := pgflow._rate_limit_problems(format('step %s.%s', step.flow_slug, step.step_slug),
      jsonb_build_object('limit', rate_limit, 'per', extract(epoch from per) * 1000,
                         'key', rate_key, 'keyFrom', rate_key_from));
    if cardinality(problems) > 0 then
      raise exception '%', array_to_string(problems, '; ') using errcode = '22023';
    end if;
    scope := pgflow._default_limit_scope(step.flow_slug, step.step_slug);
  end if;
  update pgflow.steps s
  set rate_scope = scope,
      rate_key = case when scope is not null then set_step_rate_limit.rate_key::jsonpath end,
      rate_key_from = case when scope is not null and set_step_rate_limit.rate_key is not null
                           then coalesce(set_step_rate_limit.rate_key_from, 'run') end
  where s.flow_slug = step.flow_slug and s.step_slug = step.step_slug
  returning * into step;
  if scope is not null then
    perform pgflow.set_rate_limit(scope, rate_limit, per);
  end if;
  return step;
end;
$$;

-- The recorded starts of a (scope, key) within per before p_at, oldest first.
create or replace function pgflow._rate_recent(p_scope text, p_key text, p_per interval, p_at timestamptz)
returns timestamptz[]
language sql
stable
set search_path = ''
as $$
  select coalesce(array_agg(x order by x), '{}')
  from pgflow.rate_limit_windows w cross join unnest(w.starts) x
  where w.scope = p_scope and w.key = p_key and x > p_at - p_per
$$;

-- How many more tasks of a (scope, key) a release may send now: the limit, less the starts in
-- the window, less the tasks released and not yet started. A hint read without the lock, so a
-- release does not send messages the claim would only send back; exactness is the claim's.
create or replace function pgflow._rate_room(p_scope text, p_key text)
returns integer
language sql
stable
set search_path = ''
as $$
  select coalesce(l.max_starts - cardinality(pgflow._rate_recent(p_scope, p_key, l.per, clock_timestamp()))
                  - (select count(*) from pgflow.step_tasks t
                     where t.rate_scope = p_scope and t.rate_key = p_key and t.status = 'queued')::integer,
                  2147483647)
  from (select 1) one
  left join pgflow.rate_limits l on l.scope = p_scope
$$;

-- The rate check of a claim: p_msg_ids are messages of p_queue whose rate-limited tasks the
-- caller has just claimed (status 'started'). Per (scope, key), in lock-key order and under its
-- rate lock, the tasks that fit the window start now (by priority, then message id), their start
-- times recorded and stamped on the tasks; the others go back to 'waiting' with not_before, when
-- their turn will come if nothing else takes it, their attempt not counted and their message
-- archived. Returns the messages of the tasks sent back. Called by _start_tasks only.
create or replace function pgflow._rate_gate(p_queue text, p_msg_ids bigint[])
returns bigint[]
language plpgsql
volatile
set search_path = ''
as $$
declare
  k record;
  lim pgflow.rate_limits;
  now_at timestamptz;
  recent timestamptz[];
  room integer;
  accepted integer;
  back bigint[];
  sent_back bigint[] := '{}';
begin
  for k in
    select distinct t.rate_scope, t.rate_key, pgflow._limit_lock_key(t.rate_scope, t.rate_key) as lock_key
    from unnest(p_msg_ids) i(mid)
    cross join lateral (
      select t2.rate_scope, t2.rate_key from pgflow.step_tasks t2
      where t2.queue_name = p_queue and t2.message_id = i.mid
      limit 1
    ) t
    where t.rate_scope is not null
    order by 3, 1, 2
  loop
    perform pg_catalog.pg_advisory_xact_lock(pgflow._rate_lock_class(), k.lock_key);
    select * into lim from pgflow.rate_limits l where l.scope = k.rate_scope;
    -- A scope without a limit row (deleted by hand) limits nothing.
    continue when not found;
    -- After the lock: every start recorded before it is committed and read here.
    now_at := clock_timestamp();
    recent := pgflow._rate_recent(k.rate_scope, k.rate_key, lim.per, now_at);
    room := greatest(lim.max_starts - cardinality(recent), 0);
    with mine as (
      select t.run_id, t.step_slug, t.task_index, t.message_id,
             row_number() over (order by t.priority desc, t.message_id) as rn
      from unnest(p_msg_ids) i(mid)
      cross join lateral (
        select t2.run_id, t2.step_slug, t2.task_index, t2.message_id, t2.priority, t2.rate_scope, t2.rate_key
        from pgflow.step_tasks t2
        where t2.queue_name = p_queue and t2.message_id = i.mid
        limit 1
      ) t
      where t.rate_scope = k.rate_scope and t.rate_key = k.rate_key
    ),
    started as (
      update pgflow.step_tasks t set started_at = now_at
      from mine m
      where m.rn <= room
        and t.run_id = m.run_id and t.step_slug = m.step_slug and t.task_index = m.task_index
      returning 1
    ),
    waiting as (
      -- The j-th task over the limit fits when the j-th start of the window (counting the ones
      -- made now) leaves it, one interval later per full round of the window.
      update pgflow.step_tasks t
      set status = 'waiting', message_id = null, attempts_count = t.attempts_count - 1, started_at = null,
          not_before = w.s[((m.rn - room - 1) % lim.max_starts) + 1]
                       + lim.per * (((m.rn - room - 1) / lim.max_starts) + 1)
      from mine m
      cross join (
        select (recent || array_fill(now_at, array[least(room, (select count(*)::integer from mine))]))
                 [greatest(1, cardinality(recent) + least(room, (select count(*)::integer from mine))
                              - lim.max_starts + 1):] as s
      ) w
      where m.rn > room
        and t.run_id = m.run_id and t.step_slug = m.step_slug and t.task_index = m.task_index
      returning m.message_id
    )
    select (select count(*)::integer from started), (select array_agg(message_id) from waiting)
    into accepted, back;
    if accepted > 0 then
      insert into pgflow.rate_limit_windows as w (scope, key, starts)
      values (k.rate_scope, k.rate_key, (recent || array_fill(now_at, array[accepted]))
                [greatest(1, cardinality(recent) + accepted - lim.max_starts + 1):])
      on conflict on constraint rate_limit_windows_pkey do update set starts = excluded.starts;
    end if;
    if back is not null then
      perform pgmq.archive(p_queue, back);
      sent_back := sent_back || back;
    end if;
  end loop;
  return sent_back;
end;
$$;

-- The periodic release of rate limits: sends a new message to each waiting task whose not_before
-- has come, at most as many per (scope, key) as its window has room for now (pgflow._rate_room),
-- by priority, then age. A key whose rate lock another transaction holds is left to the next pass
-- (that transaction is a claim or a release of the same key). Tasks that also have a concurrency
-- limit are released by that limit's own release (pgflow._release_waiting), which knows its
-- capacity (unless with_concurrency is false: pgflow.tick, which releases every concurrency key in
-- one ordered pass of its own after this one). Every worker calls it with its schedule ticker (each
-- second by default), in a transaction of its own: its locks are taken in one ordered pass, and a
-- second pass in the same transaction could take a lower lock after a higher one. Returns how
-- many tasks it released.
create or replace function pgflow.release_rate_waiting(with_concurrency boolean default true)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  k record;
  room integer;
  rel_runs uuid[];
  rel_steps text[];
  rel_idx integer[];
  released integer := 0;
begin
  for k in
    select d.rate_scope, d.rate_key, d.limit_scope, d.limit_key
    from (select distinct t.rate_scope, t.rate_key, t.limit_scope, t.limit_key from pgflow.step_tasks t
          where t.status = 'waiting' and t.not_before <= clock_timestamp()
            and (release_rate_waiting.with_concurrency or t.limit_scope is null)) d
    -- Rate locks first, then the concurrency keys' releases in their own lock order.
    order by d.limit_scope is not null,
             case when d.limit_scope is null then pgflow._limit_lock_key(d.rate_scope, d.rate_key)
                  else pgflow._limit_lock_key(d.limit_scope, d.limit_key) end,
             d.rate_scope, d.rate_key, d.limit_scope, d.limit_key
  loop
    if k.limit_scope is not null then
      released := released + pgflow._release_waiting(k.limit_scope, k.limit_key);
      continue;
    end if;
    continue when not pg_catalog.pg_try_advisory_xact_lock(pgflow._rate_lock_class(),
                                                           pgflow._limit_lock_key(k.rate_scope, k.rate_key));
    room := pgflow._rate_room(k.rate_scope, k.rate_key);
    continue when room <= 0;
    select array_agg(p.run_id), array_agg(p.step_slug), array_agg(p.task_index)
    into rel_runs, rel_steps, rel_idx
    from (
      select t.run_id, t.step_slug, t.task_index from pgflow.step_tasks t
      where t.status = 'waiting' and t.not_before <= clock_timestamp() and t.limit_scope is null
        and t.rate_scope = k.rate_scope and t.rate_key = k.rate_key
      order by t.priority desc, t.queued_at, t.run_id, t.step_slug, t.task_index
      limit room
      for update skip locked
    ) p;
    released := released + pgflow._release_tasks(rel_runs, rel_steps, rel_idx);
  end loop;
  return released;
end;
$$;

-- Why tasks of one (scope, key) wait for a rate limit, in words:
-- "rate limit notify/deliverSlack key C-1: 1 per 1 s, next at 2026-12-06 03:04:05.120 UTC".
create or replace function pgflow.rate_waiting_reason(
  rate_scope text,
  rate_key text,
  max_starts integer,
  per interval,
  next_at timestamptz
)
returns text
language sql
immutable
set search_path = ''
as $$
  select format('rate limit %s%s: %s per %s, next at %s', rate_waiting_reason.rate_scope,
                case when rate_waiting_reason.rate_key <> '' then ' key ' || rate_waiting_reason.rate_key else '' end,
                coalesce(rate_waiting_reason.max_starts::text, 'unlimited'),
                case when extract(epoch from rate_waiting_reason.per) = trunc(extract(epoch from rate_waiting_reason.per))
                     then trunc(extract(epoch from rate_waiting_reason.per))::text || ' s'
                     else round(extract(epoch from rate_waiting_reason.per) * 1000)::text || ' ms' end,
                to_char(rate_waiting_reason.next_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC')
$$;

-- Why the waiting tasks of one group wait, for waiting_tasks and get_run: for a concurrency limit
-- (p_rate false) the key's tasks in flight and its limit; for a rate limit (the tasks have a
-- not_before) the key's starts in its window now and its limit per window. With the reason in
-- words (waiting_reason, rate_waiting_reason).
create or replace function pgflow._waiting_why(p_rate boolean, p_scope text, p_key text, p_next_at timestamptz)
returns table (in_flight bigint, max_running integer, reason text)
language sql
stable
set search_path = ''
as $$
  select h.n, l.max_running, pgflow.waiting_reason(p_scope, p_key, h.n, l.max_running)
  from (select count(*) as n from pgflow.step_tasks t
        where t.limit_scope = p_scope and t.limit_key = p_key and t.status in ('queued', 'started')) h
  left join pgflow.concurrency_limits l on l.scope = p_scope
  where not p_rate and p_scope is not null
  union all
  -- No limit at all: the task waits for its queue's turn (0258_fair_window.sql).
  select null::bigint, null::integer, 'fair share: waiting for its turn on a busy shared queue'
  where not p_rate and p_scope is null
  union all
  select cardinality(pgflow._rate_recent(p_scope, p_key, l.per, clock_timestamp()))::bigint, l.max_starts,
         pgflow.rate_waiting_reason(p_scope, p_key, l.max_starts, l.per, p_next_at)
  from (select 1) one
  left join pgflow.rate_limits l on l.scope = p_scope
  where p_rate
$$;

-- Tasks waiting for capacity, per queue and (scope, key): how many, since when, and why, e.g.
-- "concurrency slack-api key C042: 3 of 3 in flight" or "rate limit notify/send key C042: 1 per
-- 1 s, next at ...". A task with a not_before waits for its rate limit (limit_scope and limit_key
-- are then its rate scope and key; in_flight its key's starts in the window, max_running the
-- starts allowed per window), any other for its concurrency limit (in_flight counts the key's
-- tasks that hold capacity, queued or started, on any queue). The one place status, the
-- dashboard and the client read waiting work from.
create or replace function pgflow.waiting_tasks(queue_name text default null)
returns table (
  queue_name text,
  limit_scope text,
  limit_key text,
  waiting bigint,
  oldest_queued_at timestamptz,
  in_flight bigint,
  max_running integer,
  reason text
)
language sql
stable
set search_path = ''
as $$
  select w.queue_name, w.scope, w.key, w.waiting, w.oldest, y.in_flight, y.max_running, y.reason
  from (select t.queue_name, t.not_before is not null as rate,
               case when t.not_before is not null then t.rate_scope else t.limit_scope end as scope,
               case when t.not_before is not null then t.rate_key else t.limit_key end as key,
               count(*) as waiting, min(t.queued_at) as oldest, min(t.not_before) as next_at
        from pgflow.step_tasks t
        where t.status = 'waiting'
          and (waiting_tasks.queue_name is null or t.queue_name = waiting_tasks.queue_name)
        group by 1, 2, 3, 4) w
  cross join lateral pgflow._waiting_why(w.rate, w.scope, w.key, w.next_at) y
  order by w.queue_name, w.oldest, w.scope, w.key
$$;

-- ---- schemas/0265_cron.sql
-- A five-field cron evaluator (minute hour day-of-month month day-of-week), for schedules
-- (0270_schedules.sql). pg_cron's parser is not callable from SQL and pg_cron may be absent, so
-- pgflow evaluates cron expressions itself.
--
-- A parsed expression is a bigint[] of six masks: bit v of element 1..5 is set when value v is
-- allowed in that field (minutes 0-59, hours 0-23, days 1-31, months 1-12, weekdays 0-6 with
-- Sunday 0), and element 6 holds two flags: 1 when the day-of-month field is restricted (not '*'),
-- 2 when the day-of-week field is. As in Vixie cron and pg_cron, a day matches when either
-- restricted day field matches, and when only one is restricted, that one decides.

-- One field: comma-separated items, each '*', 'a', 'a-b', with an optional '/step' ('a/step'
-- runs from a to the field's end). Values may be names (jan-dec, sun-sat). Fails naming the
-- expression, the field and the item.
create or replace function pgflow._cron_field(
  p_expression text, p_field text, p_label text, p_lo integer, p_hi integer, p_names text[], p_name_base integer
)
returns bigint
language plpgsql
immutable
set search_path = ''
as $$
declare
  item text;
  parts text[];
  range_text text;
  step integer;
  first_value integer;
  last_value integer;
  mask bigint := 0;
  bounds text[];
  v integer;
begin
  if p_field = '' then
    raise exception 'cron expression % has an empty % field', quote_literal(p_expression), p_label
      using errcode = '22023',
        hint = 'write five fields: minute hour day-of-month month day-of-week, e.g. ''*/15 * * * *''';
  end if;
  foreach item in array pg_catalog.string_to_array(lower(p_field), ',') loop
    parts := pg_catalog.regexp_match(item, '^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/([0-9]{1,3}))?$');
    if parts is null then
      raise exception 'cron expression %: % field item % is not a value, a range a-b or a step */n',
        quote_literal(p_expression), p_label, quote_literal(item)
        using errcode = '22023',
          hint = format('the %s field takes %s to %s, ranges a-b, steps */n or a-b/n, lists a,b', p_label, p_lo, p_hi);
    end if;
    range_text := parts[1];
    step := coalesce(parts[2]::integer, 1);
    if step < 1 then
      raise exception 'cron expression %: % field item % has step 0', quote_literal(p_expression), p_label, quote_literal(item)
        using errcode = '22023', hint = 'a step is 1 or more, e.g. */5';
    end if;
    if range_text = '*' then
      first_value := p_lo;
      last_value := p_hi;
    else
      bounds := pg_catalog.string_to_array(range_text, '-');
      for i in 1 .. pg_catalog.array_length(bounds, 1) loop
        if bounds[i] ~ '^[0-9]{1,2}$' then
          v := bounds[i]::integer;
        elsif p_names is not null and pg_catalog.array_position(p_names, bounds[i]) is not null then
          v := pg_catalog.array_position(p_names, bounds[i]) - 1 + p_name_base;
        else
          v := null;
        end if;
        if v is null or v < p_lo or v > p_hi then
          raise exception 'cron expression %: % field value % is out of range', quote_literal(p_expression), p_label,
            quote_literal(bounds[i])
            using errcode = '22023', hint = format('the %s field takes %s to %s%s', p_label, p_lo, p_hi,
              case when p_names is null then '' else format(' or names (%s)', pg_catalog.array_to_string(p_names, ', ')) end);
        end if;
        bounds[i] := v::text;
      end loop;
      first_value := bounds[1]::integer;
      -- 'a/step' runs to the end of the field; a plain 'a' is the one value.
      last_value := case when pg_catalog.array_length(bounds, 1) = 2 then bounds[2]::integer
                         when parts[2] is not null then p_hi else first_value end;
      if first_value > last_value then
        raise exception 'cron expression %: % field range % runs backwards', quote_literal(p_expression), p_label,
          quote_literal(item)
          using errcode = '22023', hint = 'write the smaller value first, e.g. 1-5';
      end if;
    end if;
    v := first_value;
    while v <= last_value loop
      mask := mask | (1::bigint << v);
      v := v + step;
    end loop;
  end loop;
  return mask;
end;
$$;

-- Parses a cron expression into its masks (see the top of this file), or fails naming the
-- expression and what is wrong. Accepts @hourly, @daily (@midnight), @weekly, @monthly and
-- @yearly (@annually). Day-of-week 7 is Sunday, as 0 is.
create or replace function pgflow._cron_parse(p_expression text)
returns bigint[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  expression text := pg_catalog.btrim(coalesce(p_expression, ''));
  fields text[];
  weekdays bigint;
begin
  expression := case lower(expression)
    when '@hourly' then '0 * * * *'
    when '@daily' then '0 0 * * *'
    when '@midnight' then '0 0 * * *'
    when '@weekly' then '0 0 * * 0'
    when '@monthly' then '0 0 1 * *'
    when '@yearly' then '0 0 1 1 *'
    when '@annually' then '0 0 1 1 *'
    else expression end;
  fields := pg_catalog.regexp_split_to_array(expression, '\s+');
  if expression = '' or pg_catalog.array_length(fields, 1) <> 5 then
    raise exception 'cron expression % has % fields, not 5', coalesce(quote_literal(p_expression), 'NULL'),
      case when expression = '' then 0 else pg_catalog.array_length(fields, 1) end
      using errcode = '22023',
        hint = 'write five fields: minute hour day-of-month month day-of-week, e.g. ''*/15 * * * *''; '
               'for seconds use an interval schedule (every => ''1 second'')';
  end if;
  weekdays := pgflow._cron_field(p_expression, fields[5], 'day-of-week', 0, 7,
                                 array['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], 0);
  -- 7 is another name for Sunday.
  if weekdays & (1::bigint << 7) <> 0 then
    weekdays := (weekdays & ~(1::bigint << 7)) | 1;
  end if;
  return array[
    pgflow._cron_field(p_expression, fields[1], 'minute', 0, 59, null, 0),
    pgflow._cron_field(p_expression, fields[2], 'hour', 0, 23, null, 0),
    pgflow._cron_field(p_expression, fields[3], 'day-of-month', 1, 31, null, 0),
    pgflow._cron_field(p_expression, fields[4], 'month', 1, 12,
                       array['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'], 1),
    weekdays,
    (case when fields[3] = '*' then 0 else 1 end) | (case when fields[5] = '*' then 0 else 2 end)
  ];
end;
$$;

-- The first local minute at or after p_local (p_forward) or at or before it that the parsed
-- expression matches; null when none within eight years (e.g. '0 0 30 2 *'). It jumps a whole
-- month, day or hour that cannot match, so one call takes at most a few hundred steps.
create or replace function pgflow._cron_local(p_spec bigint[], p_local timestamp, p_forward boolean)
returns timestamp
language plpgsql
immutable
set search_path = ''
as $$
declare
  t timestamp := date_trunc('minute', p_local);
  bound interval := interval '8 years';
  day_ok boolean;
  dom_ok boolean;
  dow_ok boolean;
begin
  loop
    if (p_forward and t > p_local + bound) or (not p_forward and t < p_local - bound) then
      return null;
    end if;
    if p_spec[4] & (1::bigint << extract(month from t)::integer) = 0 then
      t := case when p_forward then date_trunc('month', t) + interval '1 month'
                else date_trunc('month', t) - interval '1 minute' end;
      continue;
    end if;
    dom_ok := p_spec[3] & (1::bigint << extract(day from t)::integer) <> 0;
    dow_ok := p_spec[5] & (1::bigint << extract(dow from t)::integer) <> 0;
    day_ok := case when p_spec[6] = 3 then dom_ok or dow_ok else dom_ok and dow_ok end;
    if not day_ok then
      t := case when p_forward then date_trunc('day', t) + interval '1 day'
                else date_trunc('day', t) - interval '1 minute' end;
      continue;
    end if;
    if p_spec[2] & (1::bigint << extract(hour from t)::integer) = 0 then
      t := case when p_forward then date_trunc('hour', t) + interval '1 hour'
                else date_trunc('hour', t) - interval '1 minute' end;
      continue;
    end if;
    if p_spec[1] & (1::bigint << extract(minute from t)::integer) = 0 then
      t := t + case when p_forward then interval '1 minute' else interval '-1 minute' end;
      continue;
    end if;
    return t;
  end loop;
end;
$$;

-- The next time strictly after p_after (p_forward) or the latest at or before it, as an instant,
-- of a cron expression read on the wall clock of p_time_zone. A local time that a daylight-saving
-- change skips fires when that wall-clock time would have been (Postgres reads 02:30 in a skipped
-- hour as 03:30), never twice at one instant; one that occurs twice fires once, at its second
-- occurrence. Null when the expression never matches.
create or replace function pgflow._cron_tick(
  p_spec bigint[], p_time_zone text, p_at timestamptz, p_forward boolean
)
returns timestamptz
language plpgsql
stable
set search_path = ''
as $$
declare
  local_time timestamp := p_at at time zone p_time_zone;
  instant timestamptz;
begin
  local_time := case when p_forward then date_trunc('minute', local_time) + interval '1 minute'
                     else date_trunc('minute', local_time) end;
  -- Around a daylight-saving change a local minute can map before p_at (forward) or after it
  -- (backward): step past it. A handful of steps at most.
  for i in 1 .. 200 loop
    local_time := pgflow._cron_local(p_spec, local_time, p_forward);
    if local_time is null then
      return null;
    end if;
    instant := local_time at time zone p_time_zone;
    if (p_forward and instant > p_at) or (not p_forward and instant <= p_at) then
      return instant;
    end if;
    local_time := local_time + case when p_forward then interval '1 minute' else interval '-1 minute' end;
  end loop;
  return null;
end;
$$;

-- The next n times a cron expression fires after a moment, in a time zone: for operators checking
-- an expression before they schedule it (pgflow schedules create prints them).
--   select * from pgflow.cron_next_times('0 9 * * mon-fri', 'Europe/Paris', now(), 3);
create or replace function pgflow.cron_next_times(
  expression text, time_zone text default 'UTC', after timestamptz default now(), n integer default 5
)
returns setof timestamptz
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  spec bigint[] := pgflow._cron_parse(expression);
  t timestamptz := after;
begin
  perform pgflow._check_time_zone(time_zone);
  for i in 1 .. least(greatest(coalesce(n, 0), 0), 1000) loop
    t := pgflow._cron_tick(spec, time_zone, t, true);
    exit when t is null;
    return next t;
  end loop;
end;
$$;

-- A time zone name Postgres knows from its time zone database (pg_timezone_names: 'UTC',
-- 'Europe/Paris'), or an error naming it. Abbreviations ('CEST') and offsets ('+02') are refused:
-- they carry no daylight-saving rules, and '+02' means two hours west of Greenwich in POSIX.
create or replace function pgflow._check_time_zone(p_time_zone text)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  if p_time_zone is null
     or not exists (select 1 from pg_catalog.pg_timezone_names z where z.name = p_time_zone) then
    raise exception 'time zone % is not known to this database', coalesce(quote_literal(p_time_zone), 'NULL')
      using errcode = '22023',
        hint = 'use an IANA name such as ''UTC'', ''Europe/Paris'' or ''America/New_York'' (select name from pg_timezone_names lists them)';
  end if;
  return p_time_zone;
end;
$$;

-- ---- schemas/0270_schedules.sql
-- Schedules: a flow (or an alias) started on a cron expression or a fixed interval, exactly one
-- run per tick whatever fires the ticks (pg_cron's one job, every worker, an operator by hand), and
-- missed ticks after an outage handled by the schedule's catch-up policy. The guide is
-- docs/schedules.md.
--
-- Exactly once: a tick is fired only by the transaction that inserts its (schedule, tick time)
-- row into schedule_ticks, whose primary key refuses a second one; the schedule's row lock and
-- next_tick_at, which only moves forward, keep concurrent, retried and clock-stepped tickers from
-- even trying.

create table if not exists pgflow.schedules (
  schedule_name text not null,
  -- A flow slug or an alias: resolved by start_flow at each tick, so a schedule on an alias
  -- follows its activations.
  flow_slug text not null,
  -- Exactly one of cron (five fields, read on time_zone's wall clock) and every (whole seconds,
  -- ticks at multiples of it since the Unix epoch).
  cron text,
  every interval,
  time_zone text not null default 'UTC',
  input jsonb not null default '{}',
  -- When set, each run's input is input plus this key holding the tick's time (ISO 8601, UTC).
  tick_key text,
  -- After an outage, the latest catch_up due ticks start runs and older ones are skipped (counted
  -- in skipped_ticks). Ticks less than 10 seconds late always start runs: a late ticker is not an
  -- outage.
  catch_up integer not null default 1,
  paused boolean not null default false,
  -- The first tick not yet considered; only moves forward, so no tick is considered twice.
  next_tick_at timestamptz,
  last_tick_at timestamptz,
  last_run_id uuid,
  last_error text,
  skipped_ticks bigint not null default 0,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint schedules_pkey primary key (schedule_name),
  constraint schedules_name_is_valid check (pgflow.is_valid_slug(schedule_name)),
  constraint schedules_one_timing check ((cron is null) <> (every is null)),
  constraint schedules_catch_up_range check (catch_up between 1 and 1000),
  constraint schedules_tick_key_needs_object check (tick_key is null or jsonb_typeof(input) = 'object')
);

-- The tickers' search: only active schedules whose next tick has come.
create index if not exists schedules_due_idx on pgflow.schedules (next_tick_at) where not paused;

-- One row per fired tick: the idempotency key of a run started by a schedule. Kept a day, for
-- history (pgflow schedules list, the dashboard); next_tick_at keeps older ticks from firing again.
create table if not exists pgflow.schedule_ticks (
  schedule_name text not null,
  tick_at timestamptz not null,
  run_id uuid,
  -- Why the run did not start (the flow was deleted, its input was refused): the tick is spent.
  error text,
  -- The clock the ticker fired by (fire_due_schedules' now, not the moment of the insert), so
  -- fired_at - tick_at is the lateness that decided whether the tick fired.
  fired_at timestamptz not null default clock_timestamp(),
  constraint schedule_ticks_pkey primary key (schedule_name, tick_at),
  constraint schedule_ticks_schedule_fkey foreign key (schedule_name)
    references pgflow.schedules (schedule_name) on delete cascade
);

-- The tick of a schedule strictly after p_at (p_forward), or the latest at or before it.
create or replace function pgflow._schedule_tick(s pgflow.schedules, p_at timestamptz, p_forward boolean)
returns timestamptz
language plpgsql
stable
set search_path = ''
as $$
declare
  seconds numeric;
  k numeric;
begin
  if s.every is not null then
    seconds := extract(epoch from s.every);
    k := pg_catalog.floor(extract(epoch from p_at) / seconds);
    return pg_catalog.to_timestamp(((k + case when p_forward then 1 else 0 end) * seconds)::double precision);
  end if;
  return pgflow._cron_tick(pgflow._cron_parse(s.cron), s.time_zone, p_at, p_forward);
end;
$$;

-- Checks a schedule's definition, failing with the bad value and the fix.
create or replace function pgflow._check_schedule(s pgflow.schedules)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  seconds numeric;
begin
  if not pgflow.is_valid_slug(s.schedule_name) then
    raise exception 'schedule name % is not valid', coalesce(quote_literal(s.schedule_name), 'NULL')
      using errcode = '22023',
        hint = 'use letters, digits and single underscores, starting with a letter (at most 128 characters)';
  end if;
  if not exists (select 1 from pgflow.flows f where f.flow_slug = s.flow_slug)
     and not exists (select 1 from pgflow.aliases a where a.alias = s.flow_slug) then
    raise exception 'schedule %: flow or alias % does not exist', s.schedule_name, coalesce(quote_literal(s.flow_slug), 'NULL')
      using errcode = '22023', hint = 'compile the flow first (a worker''s start or pgflow compile), or name an alias';
  end if;
  if (s.cron is null) = (s.every is null) then
    raise exception 'schedule %: give exactly one of cron and every', s.schedule_name
      using errcode = '22023',
        hint = 'cron => ''*/5 * * * *'' (minutes and up, on a time zone''s clock) or every => ''10 seconds''';
  end if;
  perform pgflow._check_time_zone(s.time_zone);
  if s.cron is not null then
    if pgflow._cron_tick(pgflow._cron_parse(s.cron), s.time_zone, now(), true) is null then
      raise exception 'cron expression % never fires', quote_literal(s.cron)
        using errcode = '22023', hint = 'check the day-of-month and month fields (''0 0 30 2 *'' asks for 30 February)';
    end if;
  else
    seconds := extract(epoch from s.every);
    if extract(month from s.every) <> 0 or extract(year from s.every) <> 0
       or seconds <> pg_catalog.trunc(seconds) or seconds < 1 or seconds > 366 * 86400 then
      raise exception 'every % is not a whole number of seconds from 1 second to 366 days', s.every
        using errcode = '22023',
          hint = 'use e.g. ''1 second'', ''30 seconds'', ''2 hours''; for months or wall-clock times use cron';
    end if;
  end if;
  if s.input is null then
    raise exception 'schedule %: input must not be SQL NULL', s.schedule_name
      using errcode = '22023', hint = 'pass ''{}''::jsonb for a run without input';
  end if;
  if s.tick_key is not null and (s.tick_key = '' or jsonb_typeof(s.input) <> 'object') then
    raise exception 'schedule %: tick_key % needs a non-empty key and an input that is a JSON object, not %',
      s.schedule_name, quote_literal(s.tick_key), jsonb_typeof(s.input)
      using errcode = '22023', hint = 'pass an object input (''{}'' at least), or no tick_key';
  end if;
  if s.catch_up is null or s.catch_up not between 1 and 1000 then
    raise exception 'schedule %: catch_up % is not from 1 to 1000', s.schedule_name, coalesce(s.catch_up::text, 'NULL')
      using errcode = '22023',
        hint = '1 (the default) starts only the latest missed tick after an outage; N starts up to the N latest';
  end if;
end;
$$;

-- A schedule as list_schedules and the write functions return it. input_text repeats the input as
-- the database's own text: a client that can only read the document through JSON.parse
-- (supabase-js) reads that string exactly, where big numbers in `input` would be rounded.
create or replace function pgflow._schedule_json(s pgflow.schedules)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'schedule', s.schedule_name, 'flow', s.flow_slug, 'cron', s.cron,
    'every_seconds', extract(epoch from s.every)::bigint, 'time_zone', s.time_zone,
    'input', s.input, 'input_text', s.input::text, 'tick_key', s.tick_key, 'catch_up', s.catch_up, 'paused', s.paused,
    'next_tick_at', case when s.paused then null else s.next_tick_at end,
    'last_tick_at', s.last_tick_at, 'last_run_id', s.last_run_id, 'last_error', s.last_error,
    'skipped_ticks', s.skipped_ticks, 'created_at', s.created_at, 'updated_at', s.updated_at)
$$;

-- Creates a schedule. The first tick is the first one after now: creating a schedule never starts
-- a run for a time already past.
--   select pgflow.create_schedule('nightly_report', 'report', cron => '0 2 * * *',
--                                 time_zone => 'Europe/Paris', input => '{"full": true}');
-- security definer, like start_flow: a role granted only these functions (service_role) manages
-- schedules without write access to pgflow's tables.
create or replace function pgflow.create_schedule(
  schedule_name text,
  flow_slug text,
  cron text default null,
  input jsonb default '{}',
  time_zone text default 'UTC',
  every interval default null,
  tick_key text default null,
  catch_up integer default 1,
  paused boolean default false
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  s pgflow.schedules;
begin
  s.schedule_name := create_schedule.schedule_name;
  s.flow_slug := create_schedule.flow_slug;
  s.cron := create_schedule.cron;
  s.every := create_schedule.every;
  s.time_zone := create_schedule.time_zone;
  s.input := create_schedule.input;
  s.tick_key := create_schedule.tick_key;
  s.catch_up := create_schedule.catch_up;
  perform pgflow._check_schedule(s);
  insert into pgflow.schedules as x (schedule_name, flow_slug, cron, every, time_zone, input, tick_key, catch_up,
                                     paused, next_tick_at)
  values (s.schedule_name, s.flow_slug, s.cron, s.every, s.time_zone, s.input, s.tick_key, s.catch_up,
          coalesce(create_schedule.paused, false), pgflow._schedule_tick(s, clock_timestamp(), true))
  on conflict on constraint schedules_pkey do nothing
  returning * into s;
  if not found then
    raise exception 'schedule % already exists', create_schedule.schedule_name
      using errcode = '23505', hint = 'change it with pgflow.update_schedule, or delete it first';
  end if;
  return pgflow._schedule_json(s);
end;
$$;

-- The schedule's row, locked, or an error naming it.
create or replace function pgflow._lock_schedule(p_schedule_name text)
returns pgflow.schedules
language plpgsql
volatile
set search_path = ''
as $$
declare
  s pgflow.schedules;
begin
  select * into s from pgflow.schedules x where x.schedule_name = p_schedule_name for update;
  if not found then
    raise exception 'schedule % does not exist', coalesce(quote_literal(p_schedule_name), 'NULL')
      using errcode = 'P0002', hint = 'pgflow.list_schedules() lists them';
  end if;
  return s;
end;
$$;

-- Changes a schedule: a null argument leaves that part as it is (tick_key => '' removes the key;
-- cron replaces every and every replaces cron). Its next tick is recomputed from now, never before
-- the last tick considered, so a change never fires a tick twice nor one already past.
create or replace function pgflow.update_schedule(
  schedule_name text,
  flow_slug text default null,
  cron text default null,
  input jsonb default null,
  time_zone text default null,
  every interval default null,
  tick_key text default null,
  catch_up integer default null
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  s pgflow.schedules := pgflow._lock_schedule(update_schedule.schedule_name);
begin
  if update_schedule.cron is not null and update_schedule.every is not null then
    raise exception 'schedule %: give cron or every, not both', s.schedule_name
      using errcode = '22023', hint = 'cron replaces an every schedule and every replaces a cron one';
  end if;
  s.flow_slug := coalesce(update_schedule.flow_slug, s.flow_slug);
  if update_schedule.cron is not null then
    s.cron := update_schedule.cron;
    s.every := null;
  elsif update_schedule.every is not null then
    s.every := update_schedule.every;
    s.cron := null;
  end if;
  s.input := coalesce(update_schedule.input, s.input);
  s.time_zone := coalesce(update_schedule.time_zone, s.time_zone);
  s.tick_key := case when update_schedule.tick_key = '' then null else coalesce(update_schedule.tick_key, s.tick_key) end;
  s.catch_up := coalesce(update_schedule.catch_up, s.catch_up);
  perform pgflow._check_schedule(s);
  update pgflow.schedules x
  set flow_slug = s.flow_slug, cron = s.cron, every = s.every, input = s.input, time_zone = s.time_zone,
      tick_key = s.tick_key, catch_up = s.catch_up,
      next_tick_at = pgflow._schedule_tick(s, greatest(clock_timestamp(), s.last_tick_at), true),
      updated_at = now()
  where x.schedule_name = s.schedule_name
  returning * into s;
  return pgflow._schedule_json(s);
end;
$$;

-- Pauses a schedule: no tick fires until it is resumed, and the ticks of the pause are not runs
-- (resuming is not an outage to catch up on).
create or replace function pgflow.pause_schedule(schedule_name text)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  s pgflow.schedules := pgflow._lock_schedule(pause_schedule.schedule_name);
begin
  update pgflow.schedules x set paused = true, updated_at = now()
  where x.schedule_name = s.schedule_name
  returning * into s;
  return pgflow._schedule_json(s);
end;
$$;

-- Resumes a paused schedule from its next tick after now (a running one is left as it is).
create or replace function pgflow.resume_schedule(schedule_name text)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  s pgflow.schedules := pgflow._lock_schedule(resume_schedule.schedule_name);
begin
  if s.paused then
    update pgflow.schedules x
    set paused = false, updated_at = now(),
        next_tick_at = pgflow._schedule_tick(s, greatest(clock_timestamp(), s.last_tick_at), true)
    where x.schedule_name = s.schedule_name
    returning * into s;
  end if;
  return pgflow._schedule_json(s);
end;
$$;

-- Deletes a schedule and its tick history; the runs it started stay. False when there was none.
create or replace function pgflow.delete_schedule(schedule_name text)
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  delete from pgflow.schedules x where x.schedule_name = delete_schedule.schedule_name;
  return found;
end;
$$;

-- Every schedule, by name.
create or replace function pgflow.list_schedules()
returns setof jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select pgflow._schedule_json(s) from pgflow.schedules s order by s.schedule_name
$$;

-- Fires every due tick of every active schedule: one run per tick, then the schedule's next tick.
-- Called by pg_cron's one job (schedule_maintenance), by every worker about once a second, or by
-- hand; any number of callers at once is safe. now is the clock it fires by (tests pass their
-- own). Returns how many runs it started.
--
-- Per schedule: the latest due tick and every tick less than 10 seconds late fire; of older ones
-- (an outage: nobody ticked) only as many as catch_up allows, the latest first, the rest counted in
-- skipped_ticks. A run that cannot start (flow deleted, input refused) spends its tick, recorded
-- with its error, without holding up the other schedules.
create or replace function pgflow.fire_due_schedules(now timestamptz default clock_timestamp())
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  on_time constant interval := interval '10 seconds';
  s pgflow.schedules;
  latest timestamptz;
  oldest_due timestamptz;
  ticks timestamptz[];
  t timestamptz;
  skipped bigint;
  new_run_id uuid;
  failure text;
  started integer := 0;
begin
  -- Waits that are due (sleeps, event timeouts: 0280_events.sql) end on the same tick.
  perform pgflow.fire_due_waits(fire_due_schedules.now);
  -- skip locked: a schedule another ticker is firing is its business; once it commits,
  -- next_tick_at has moved past what it fired (read committed re-checks the row when locking).
  for s in
    select * from pgflow.schedules x
    where not x.paused and x.next_tick_at <= fire_due_schedules.now
    order by x.next_tick_at
    for update skip locked
  loop
    latest := pgflow._schedule_tick(s, fire_due_schedules.now, false);
    ticks := array[]::timestamptz[];
    t := latest;
    while t is not null and t >= s.next_tick_at
          and (cardinality(ticks) < s.catch_up or fire_due_schedules.now - t < on_time) loop
      ticks := t || ticks;
      t := pgflow._schedule_tick(s, t - interval '1 microsecond', false);
    end loop;
    skipped := 0;
    if t is not null and t >= s.next_tick_at then
      -- Ticks from next_tick_at to t were missed: count them (bounded; an outage of months on a
      -- minute schedule is counted as 100000).
      oldest_due := s.next_tick_at;
      skipped := 1;
      while oldest_due < t and skipped < 100000 loop
        oldest_due := pgflow._schedule_tick(s, oldest_due, true);
        skipped := skipped + 1;
      end loop;
    end if;
    foreach t in array ticks loop
      insert into pgflow.schedule_ticks (schedule_name, tick_at, fired_at)
      values (s.schedule_name, t, fire_due_schedules.now)
      on conflict on constraint schedule_ticks_pkey do nothing;
      continue when not found;
      begin
        select r.run_id into new_run_id
        from pgflow.start_flow(s.flow_slug,
          case when s.tick_key is null then s.input
               else s.input || jsonb_build_object(s.tick_key,
                      to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) end) r;
        update pgflow.schedule_ticks k set run_id = new_run_id
        where k.schedule_name = s.schedule_name and k.tick_at = t;
        s.last_run_id := new_run_id;
        s.last_error := null;
        started := started + 1;
      exception when others then
        get stacked diagnostics failure = message_text;
        update pgflow.schedule_ticks k set error = failure
        where k.schedule_name = s.schedule_name and k.tick_at = t;
        s.last_error := format('tick %s: %s', t, failure);
      end;
    end loop;
    update pgflow.schedules x
    set next_tick_at = pgflow._schedule_tick(s, latest, true),
        last_tick_at = latest, last_run_id = s.last_run_id, last_error = s.last_error,
        skipped_ticks = x.skipped_ticks + skipped
    where x.schedule_name = s.schedule_name;
    delete from pgflow.schedule_ticks k
    where k.schedule_name = s.schedule_name and k.tick_at < latest - interval '1 day';
  end loop;
  return started;
end;
$$;

-- ---- schemas/0280_events.sql
-- Waiting steps: event steps and durable sleeps (docs/waiting.md). Such a step has no handler and
-- no message: when it becomes ready (_start_ready_steps, the run's lock held) it is started with
-- no task and waits as a row of step_states: waiting_for names the event ('' for a sleep),
-- wait_until is its deadline (an event's timeout, a sleep's end) and wait_key the correlation key
-- read from the run input. Nothing polls for it: an event moves it in send_event's transaction,
-- and the periodic tick (fire_due_schedules, already run by pg_cron's job and by every worker)
-- moves the due ones in fire_due_waits. A worker's read never sees a wait, and stalled recovery,
-- which scans started tasks, never finds one.
--
-- An event for a step that is not waiting yet is kept (pending_events) and delivered when the
-- step starts waiting; the first event of a wait wins and every later one is ignored, and
-- send_event says which happened. Lock order: a run's row, then its step states (as everywhere).

-- An event step's event name; the JSON path into the run input giving the correlation key a keyed
-- send_event matches (NULL: only addressed sends reach it).
alter table pgflow.steps add column if not exists wait_event text;
-- Paths are kept as written (jsonpath would rewrite "$.orderId" as "$.\"orderId\"", and the
-- compiler compares the shape it sends with the stored one) and cast where they are read.
alter table pgflow.steps add column if not exists wait_key_path text;
-- How long an event step waits (NULL: forever) or a sleep sleeps, in seconds; or, for a sleep,
-- the JSON path into the step's input giving the time to wake at (an ISO 8601 string).
alter table pgflow.steps add column if not exists wait_seconds integer;
alter table pgflow.steps add column if not exists wait_until_path text;
-- What an event step's timeout does: NULL fails the step (then whenExhausted decides, as for a
-- task that ran out of attempts); {"value": v} completes it with v.
alter table pgflow.steps add column if not exists on_timeout jsonb;
do $$
begin
  alter table pgflow.steps add constraint steps_wait_fits_kind check (
    (kind = 'event') = (wait_event is not null)
    and (wait_key_path is null or kind = 'event')
    and (on_timeout is null or (kind = 'event' and wait_seconds is not null and jsonb_typeof(on_timeout) = 'object'
                                and on_timeout ? 'value'))
    and (kind <> 'sleep' or (wait_seconds is null) <> (wait_until_path is null))
    and (wait_until_path is null or kind = 'sleep')
    and (kind not in ('event', 'sleep') or step_type = 'single'));
exception when duplicate_object then
  null;
end
$$;
do $$
begin
  alter table pgflow.steps add constraint steps_wait_event_is_valid check (
    wait_event is null or wait_event ~ '^[A-Za-z0-9_.:-]{1,100}$');
  alter table pgflow.steps add constraint steps_wait_paths_are_jsonpath check (
    (wait_key_path is null or wait_key_path::jsonpath is not null)
    and (wait_until_path is null or wait_until_path::jsonpath is not null));
  alter table pgflow.steps add constraint steps_wait_seconds_range check (
    wait_seconds is null or wait_seconds between 0 and 31536000);
exception when duplicate_object then
  null;
end
$$;

-- A waiting step's state: the event it waits for ('' for a sleep), its correlation key, and its
-- deadline. Kept after the wait ends, so a late keyed event finds the wait it was for (and is
-- ignored) instead of being kept for a later run with the same key.
alter table pgflow.step_states add column if not exists waiting_for text;
alter table pgflow.step_states add column if not exists wait_key text;
alter table pgflow.step_states add column if not exists wait_until timestamptz;
-- Keyed sends: the waits of one (event, key). Partial: a task step's state never enters it.
create index if not exists step_states_wait_key_idx on pgflow.step_states (waiting_for, wait_key)
  where waiting_for is not null;
-- The tick's search for due waits. Partial on started: a finished wait leaves it.
create index if not exists step_states_wait_until_idx on pgflow.step_states (wait_until)
  where wait_until is not null and status = 'started';

-- Events that arrived before their step waited, kept until keep_until (send_event's keep, one day
-- by default) and pruned by the tick after that. Addressed (run_id and step_slug) or keyed
-- (event_name and correlation_key, run_id NULL). No foreign key to runs, like restart_of_run_id:
-- a run pruned or deleted leaves its pending events to expire.
create table if not exists pgflow.pending_events (
  event_id bigint generated always as identity,
  event_name text not null,
  run_id uuid,
  step_slug text,
  correlation_key text,
  payload jsonb not null,
  received_at timestamptz not null default clock_timestamp(),
  keep_until timestamptz not null,
  constraint pending_events_pkey primary key (event_id),
  constraint pending_events_address check ((run_id is null) = (step_slug is null)
                                           and (run_id is not null or correlation_key is not null))
);
-- One pending event per address: the first wins (send_event reports the others as duplicates).
create unique index if not exists pending_events_step_key on pgflow.pending_events (run_id, step_slug)
  where run_id is not null;
create unique index if not exists pending_events_correlation_key on pgflow.pending_events (event_name, correlation_key)
  where run_id is null;
create index if not exists pending_events_keep_until_idx on pgflow.pending_events (keep_until);

-- Per-wait tokens for webhooks: a caller holding one may send that one wait's event, once, before
-- it expires, and nothing else. Only the token's SHA-256 is stored, so reading this table gives
-- nobody a token. No foreign key to runs (see pending_events).
create table if not exists pgflow.wait_tokens (
  token_hash bytea not null,
  run_id uuid not null,
  step_slug text not null,
  created_at timestamptz not null default clock_timestamp(),
  expires_at timestamptz not null,
  used_at timestamptz,
  constraint wait_tokens_pkey primary key (token_hash)
);
create index if not exists wait_tokens_expires_at_idx on pgflow.wait_tokens (expires_at);

-- Starts a ready event or sleep step's wait (its row is 'started' already): records what it waits
-- for and until when, then takes a pending event for it, or completes a sleep already due. True
-- when the step finished at once (the caller then looks for newly ready steps). The caller holds
-- the run's lock.
create or replace function pgflow._start_wait(p_run_id uuid, p_step_slug text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  step pgflow.steps;
  run pgflow.runs;
  key text;
  deadline timestamptz;
  at_text text;
  pending pgflow.pending_events;
begin
  select r.* into run from pgflow.runs r where r.run_id = p_run_id;
  select s.* into step from pgflow.steps s where s.flow_slug = run.flow_slug and s.step_slug = p_step_slug;
  if step.kind = 'sleep' and step.wait_until_path is not null then
    at_text := jsonb_path_query_first(
      (select o from pgflow._task_input(p_run_id, run.flow_slug, p_step_slug, 0) o), step.wait_until_path::jsonpath) #>> '{}';
    begin
      deadline := at_text::timestamptz;
    exception when others then
      deadline := null;
    end;
    if deadline is null then
      perform pgflow._fail_run(p_run_id, p_step_slug,
        format('[TYPE_VIOLATION] sleep step %s: %s in its input must be a time such as "2026-05-01T12:00:00Z", got %s',
               p_step_slug, step.wait_until_path, coalesce(quote_literal(at_text), 'nothing')));
      return true;
    end if;
  elsif step.wait_seconds is not null then
    deadline := clock_timestamp() + make_interval(secs => step.wait_seconds);
  end if;
  if step.wait_key_path is not null then
    key := jsonb_path_query_first(run.input, step.wait_key_path::jsonpath) #>> '{}';
  end if;
  update pgflow.step_states ss
  set waiting_for = coalesce(step.wait_event, ''), wait_key = key, wait_until = deadline,
      remaining_tasks = 1, initial_tasks = 1
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug;

  if step.kind = 'sleep' then
    if deadline <= clock_timestamp() then
      perform pgflow._complete_step(p_run_id, p_step_slug, pgflow._wait_time_json(deadline));
      return true;
    end if;
    return false;
  end if;
  -- An event that came early: addressed to this step, else the oldest keyed one for its key. A
  -- keyed sender that found no wait takes the same lock before it keeps its event, so the two
  -- cannot miss each other (see send_event).
  if key is not null then
    perform pg_advisory_xact_lock(pgflow._event_key_lock(step.wait_event, key));
  end if;
  delete from pgflow.pending_events e
  where e.event_id = (
    select e2.event_id from pgflow.pending_events e2
    where e2.keep_until > clock_timestamp()
      and ((e2.run_id = p_run_id and e2.step_slug = p_step_slug)
           or (key is not null and e2.run_id is null and e2.event_name = step.wait_event
               and e2.correlation_key = key))
    order by e2.run_id nulls last, e2.event_id
    limit 1
    for update skip locked)
  returning e.* into pending;
  if pending.event_id is not null then
    perform pgflow._complete_step(p_run_id, p_step_slug, pending.payload);
    return true;
  end if;
  return false;
end;
$$;

-- The advisory lock of one (event, correlation key): taken by a keyed send that found no wait and
-- by a wait starting with that key, so an event kept at the same moment a wait starts is not lost.
create or replace function pgflow._event_key_lock(p_event text, p_key text)
returns bigint
language sql
immutable
set search_path = ''
as $$
  select hashtextextended('pgflow.event' || chr(31) || p_event || chr(31) || p_key, 0)
$$;

-- A time as get_run writes times (ISO 8601, UTC, microseconds), as JSON: a sleep's output.
create or replace function pgflow._wait_time_json(p_at timestamptz)
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select to_jsonb(to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
$$;

-- Delivers an event to one step of one run, or keeps it, or says why not. The run's lock is taken
-- here. One result: {"run_id", "step_slug", "status": "delivered" | "kept" | "ignored", "reason"}.
create or replace function pgflow._deliver_event(p_run_id uuid, p_step_slug text, p_payload jsonb, p_keep interval)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  run pgflow.runs;
  state pgflow.step_states;
  step pgflow.steps;
  result jsonb := jsonb_build_object('run_id', p_run_id, 'step_slug', p_step_slug);
begin
  select r.* into run from pgflow.runs r where r.run_id = p_run_id for update;
  select ss.* into state from pgflow.step_states ss where ss.run_id = p_run_id and ss.step_slug = p_step_slug;
  select s.* into step from pgflow.steps s where s.flow_slug = run.flow_slug and s.step_slug = p_step_slug;
  if run.run_id is null then
    return result || jsonb_build_object('status', 'ignored', 'reason', 'no such run');
  elsif run.status <> 'started' then
    return result || jsonb_build_object('status', 'ignored', 'reason', 'run ' || run.status);
  elsif state.status = 'started' then
    -- The wait ends here: later events find it completed.
    perform pgflow._complete_step(p_run_id, p_step_slug, p_payload);
    perform pgflow._start_ready_steps(p_run_id);
    return result || jsonb_build_object('status', 'delivered');
  elsif state.status = 'created' then
    insert into pgflow.pending_events (event_name, run_id, step_slug, payload, keep_until)
    values (step.wait_event, p_run_id, p_step_slug, p_payload, clock_timestamp() + p_keep)
    on conflict (run_id, step_slug) where run_id is not null do nothing;
    if not found then
      return result || jsonb_build_object('status', 'ignored', 'reason', 'an earlier event is kept for this step');
    end if;
    return result || jsonb_build_object('status', 'kept', 'keep_until', pgflow._wait_time_json(clock_timestamp() + p_keep));
  end if;
  return result || jsonb_build_object('status', 'ignored', 'reason', 'step ' || state.status);
end;
$$;

-- Delivers a keyed event to every wait for (p_event, p_key), in run order so concurrent senders
-- lock runs in the same order. One result per wait found (see _deliver_event); [] when none was.
create or replace function pgflow._deliver_keyed_event(p_event text, p_key text, p_payload jsonb, p_keep interval)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  waiting record;
  results jsonb := '[]'::jsonb;
begin
  for waiting in
    select ss.run_id, ss.step_slug from pgflow.step_states ss
    where ss.waiting_for = p_event and ss.wait_key = p_key
    order by ss.run_id, ss.step_slug
  loop
    results := results || pgflow._deliver_event(waiting.run_id, waiting.step_slug, p_payload, p_keep);
  end loop;
  return results;
end;
$$;

-- Sends an event (docs/waiting.md). Addressed: to run_id, to its step step_slug, or to the step of
-- its flow that waits for event_name. Keyed (run_id NULL): to every step waiting for event_name
-- whose correlation key (steps.wait_key_path read from the run input) equals key; when none waits,
-- it is kept for the first that will, for keep. Returns {"event", "results": [one per step: see
-- _deliver_event]}; a keyed event that reached no wait and was not kept says why in one result
-- with no run. The payload is the step's output as sent: never logged, never in an error.
--
-- security definer, like start_flow: granted to service_role only (0900_privileges.sql). An
-- end user's approval goes through a wrapper of yours that checks the run is theirs
-- (docs/permissions.md).
create or replace function pgflow.send_event(
  event_name text,
  payload jsonb default 'null'::jsonb,
  run_id uuid default null,
  step_slug text default null,
  key text default null,
  keep interval default interval '1 day'
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
-- The conflict target below names columns that are also parameters; every parameter is qualified.
#variable_conflict use_column
declare
  flow text;
  target text;
  results jsonb;
begin
  if send_event.event_name is null or send_event.event_name !~ '^[A-Za-z0-9_.:-]{1,100}$' then
    raise exception 'send_event: event name % is not valid', coalesce(quote_literal(send_event.event_name), 'NULL')
      using errcode = '22023', hint = 'use 1 to 100 letters, digits, _ . : or -, as in the step''s event option';
  end if;
  if send_event.keep is null or send_event.keep < interval '0' or send_event.keep > interval '30 days' then
    raise exception 'send_event: keep % is out of range', coalesce(send_event.keep::text, 'NULL')
      using errcode = '22023', hint = 'keep an early event between 0 and 30 days (default 1 day)';
  end if;
  payload := coalesce(send_event.payload, 'null'::jsonb);
  if send_event.run_id is not null then
    select r.flow_slug into flow from pgflow.runs r where r.run_id = send_event.run_id;
    if flow is null then
      return jsonb_build_object('event', send_event.event_name, 'results', jsonb_build_array(
        jsonb_build_object('run_id', send_event.run_id, 'step_slug', send_event.step_slug,
                           'status', 'ignored', 'reason', 'no such run')));
    end if;
    select s.step_slug into target from pgflow.steps s
    where s.flow_slug = flow and s.kind = 'event' and s.wait_event = send_event.event_name
      and (send_event.step_slug is null or s.step_slug = send_event.step_slug)
    order by s.step_index limit 1;
    if target is null then
      raise exception 'send_event: flow % has no event step% waiting for event %', flow,
        coalesce(' ' || quote_literal(send_event.step_slug), ''), quote_literal(send_event.event_name)
        using errcode = '22023',
          hint = format('send the event name the step declares (its steps waiting for events: %s)',
            coalesce((select string_agg(format('%s waits for %s', s.step_slug, s.wait_event), ', ' order by s.step_index)
                      from pgflow.steps s where s.flow_slug = flow and s.kind = 'event'), 'none'));
    end if;
    return jsonb_build_object('event', send_event.event_name, 'results',
      jsonb_build_array(pgflow._deliver_event(send_event.run_id, target, payload, send_event.keep)));
  end if;
  if send_event.key is null then
    raise exception 'send_event: event % names neither a run nor a key', quote_literal(send_event.event_name)
      using errcode = '22023', hint = 'pass run_id (and optionally step_slug), or key for the steps whose key path matches it';
  end if;
  results := pgflow._deliver_keyed_event(send_event.event_name, send_event.key, payload, send_event.keep);
  if jsonb_array_length(results) = 0 then
    -- No wait for the key. A wait starting now holds this lock from its start to its commit
    -- (_start_wait): once it is ours, such a wait is committed and found by the search again,
    -- or it starts after our commit and takes the kept event.
    perform pg_advisory_xact_lock(pgflow._event_key_lock(send_event.event_name, send_event.key));
    results := pgflow._deliver_keyed_event(send_event.event_name, send_event.key, payload, send_event.keep);
  end if;
  if jsonb_array_length(results) = 0 then
    insert into pgflow.pending_events (event_name, correlation_key, payload, keep_until)
    values (send_event.event_name, send_event.key, payload, clock_timestamp() + send_event.keep)
    on conflict (event_name, correlation_key) where run_id is null do nothing;
    results := jsonb_build_array(case when found
      then jsonb_build_object('run_id', null, 'step_slug', null, 'status', 'kept',
                              'keep_until', pgflow._wait_time_json(clock_timestamp() + send_event.keep))
      else jsonb_build_object('run_id', null, 'step_slug', null, 'status', 'ignored',
                              'reason', 'an earlier event is kept for this key') end);
  end if;
  return jsonb_build_object('event', send_event.event_name, 'results', results);
end;
$$;

-- A token that lets its holder send one wait's event once, for expires_in (docs/waiting.md): give
-- it to the service that will call your webhook. Can be made before the step waits (an early
-- event is kept as usual). The token is 256 random bits, hex; only its SHA-256 is stored.
create or replace function pgflow.create_wait_token(
  run_id uuid, step_slug text, expires_in interval default interval '7 days'
)
returns text
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  token text := encode(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex');
begin
  if not exists (select 1 from pgflow.runs r join pgflow.steps s on s.flow_slug = r.flow_slug
                 where r.run_id = create_wait_token.run_id and s.step_slug = create_wait_token.step_slug
                   and s.kind = 'event') then
    raise exception 'create_wait_token: run % has no event step %', create_wait_token.run_id,
      coalesce(quote_literal(create_wait_token.step_slug), 'NULL')
      using errcode = '22023', hint = 'name a run and one of its flow''s event steps';
  end if;
  if create_wait_token.expires_in is null or create_wait_token.expires_in <= interval '0'
     or create_wait_token.expires_in > interval '366 days' then
    raise exception 'create_wait_token: expires_in % is out of range', coalesce(create_wait_token.expires_in::text, 'NULL')
      using errcode = '22023', hint = 'pass an interval above 0 and at most 366 days (default 7 days)';
  end if;
  -- gen_random_uuid() is a version 4 UUID: 122 random bits each, 244 in the token.
  insert into pgflow.wait_tokens (token_hash, run_id, step_slug, expires_at)
  values (sha256(convert_to(token, 'UTF8')), create_wait_token.run_id, create_wait_token.step_slug,
          clock_timestamp() + create_wait_token.expires_in);
  return token;
end;
$$;

-- Sends the event of the wait a token was made for (create_wait_token), once. Refuses an unknown,
-- used or expired token with {"status": "refused", "reason"}, without saying which run it named;
-- otherwise the token is spent and the result is send_event's for that run and step.
create or replace function pgflow.send_event_with_token(token text, payload jsonb default 'null'::jsonb)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  t pgflow.wait_tokens;
  event text;
begin
  select w.* into t from pgflow.wait_tokens w
  where w.token_hash = sha256(convert_to(coalesce(send_event_with_token.token, ''), 'UTF8'))
  for update;
  if t.token_hash is null then
    return jsonb_build_object('status', 'refused', 'reason', 'unknown token');
  elsif t.used_at is not null then
    return jsonb_build_object('status', 'refused', 'reason', 'token already used');
  elsif t.expires_at <= clock_timestamp() then
    return jsonb_build_object('status', 'refused', 'reason', 'token expired');
  end if;
  update pgflow.wait_tokens w set used_at = clock_timestamp() where w.token_hash = t.token_hash;
  select s.wait_event into event from pgflow.runs r
  join pgflow.steps s on s.flow_slug = r.flow_slug and s.step_slug = t.step_slug
  where r.run_id = t.run_id;
  if event is null then
    return jsonb_build_object('status', 'refused', 'reason', 'the run is gone');
  end if;
  return pgflow._deliver_event(t.run_id, t.step_slug, coalesce(send_event_with_token.payload, 'null'::jsonb),
                               interval '1 day') || jsonb_build_object('event', event);
end;
$$;

-- Ends every wait whose deadline has passed (at most 1,000 per call; the next tick takes the rest):
-- a sleep completes with its wake time, an event step's timeout completes it with its onTimeout
-- value or fails it (whenExhausted then decides, as for a task out of attempts). Then prunes
-- expired pending events and tokens. Run by the tick (fire_due_schedules), so every ticker fires
-- waits; any number at once is safe: a run another ticker holds is skipped until the next tick.
-- Returns how many waits it ended.
create or replace function pgflow.fire_due_waits(now timestamptz default clock_timestamp())
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  due record;
  locked uuid;
  ended integer := 0;
begin
  for due in
    select ss.run_id, ss.step_slug, ss.wait_until, ss.waiting_for, s.kind, s.on_timeout, s.when_exhausted, s.wait_seconds
    from pgflow.step_states ss
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    where ss.wait_until is not null and ss.status = 'started' and ss.wait_until <= fire_due_waits.now
    order by ss.wait_until
    limit 1000
  loop
    select r.run_id into locked from pgflow.runs r
    where r.run_id = due.run_id and r.status = 'started' for update skip locked;
    continue when locked is null;
    -- Re-read under the lock: an event may have ended the wait since the search.
    continue when not exists (select 1 from pgflow.step_states ss
                              where ss.run_id = due.run_id and ss.step_slug = due.step_slug
                                and ss.status = 'started' and ss.wait_until <= fire_due_waits.now);
    if due.kind = 'sleep' then
      perform pgflow._complete_step(due.run_id, due.step_slug, pgflow._wait_time_json(due.wait_until));
    elsif due.on_timeout is not null then
      perform pgflow._complete_step(due.run_id, due.step_slug, due.on_timeout -> 'value');
    elsif due.when_exhausted = 'fail' then
      perform pgflow._fail_run(due.run_id, due.step_slug,
        format('[WAIT_TIMEOUT] step %s: no %s event within %s s', due.step_slug, quote_literal(due.waiting_for),
               due.wait_seconds));
    else
      perform pgflow._skip_step(due.run_id, due.step_slug, 'wait_timeout', due.when_exhausted = 'skip-cascade');
    end if;
    perform pgflow._start_ready_steps(due.run_id);
    ended := ended + 1;
  end loop;
  delete from pgflow.pending_events e
  where e.event_id in (select e2.event_id from pgflow.pending_events e2
                       where e2.keep_until <= fire_due_waits.now limit 1000);
  delete from pgflow.wait_tokens w
  where w.token_hash in (select w2.token_hash from pgflow.wait_tokens w2
                         where w2.expires_at <= fire_due_waits.now - interval '1 day' limit 1000);
  return ended;
end;
$$;

-- A waiting step's part of the shape (src/compile/shape.ts: StepShape.wait), as the compiler sends
-- it: {"kind": "event", "event", "key"?, "seconds"?, "onTimeout"?: {"value"}} or
-- {"kind": "sleep", "seconds" | "until"}. NULL for any other kind.
create or replace function pgflow._wait_shape(s pgflow.steps)
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select case when s.kind in ('event', 'sleep') then
    jsonb_build_object('kind', s.kind)
    || case when s.wait_event is null then '{}'::jsonb else jsonb_build_object('event', s.wait_event) end
    || case when s.wait_key_path is null then '{}'::jsonb else jsonb_build_object('key', s.wait_key_path) end
    || case when s.wait_seconds is null then '{}'::jsonb else jsonb_build_object('seconds', s.wait_seconds) end
    || case when s.wait_until_path is null then '{}'::jsonb else jsonb_build_object('until', s.wait_until_path) end
    || case when s.on_timeout is null then '{}'::jsonb else jsonb_build_object('onTimeout', s.on_timeout) end
  end
$$;

-- What is wrong with step i's "wait" in a shape sent to ensure_flow_compiled, one line per problem.
create or replace function pgflow._wait_step_problems(p_step jsonb, i integer)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  w jsonb := p_step -> 'wait';
  problems text[] := '{}';
begin
  if w is null then
    return problems;
  end if;
  if jsonb_typeof(w) <> 'object' or (w ->> 'kind') is null or (w ->> 'kind') not in ('event', 'sleep') then
    return array[format('step %s: wait must be {"kind": "event" | "sleep", ...}', i)];
  end if;
  if p_step ->> 'stepType' <> 'single' then
    problems := problems || format('step %s: a waiting step cannot be a map', i);
  end if;
  if (w ->> 'kind') = 'event' and (jsonb_typeof(w -> 'event') is distinct from 'string'
                                  or (w ->> 'event') !~ '^[A-Za-z0-9_.:-]{1,100}$') then
    problems := problems || format('step %s: the event name must be 1 to 100 letters, digits, _ . : or -', i);
  end if;
  if w ? 'seconds' and (jsonb_typeof(w -> 'seconds') <> 'number' or (w ->> 'seconds')::numeric <> floor((w ->> 'seconds')::numeric)
                        or (w ->> 'seconds')::numeric not between 0 and 31536000) then
    problems := problems || format('step %s: wait seconds must be a whole number from 0 to 31536000 (a year)', i);
  end if;
  if (w ->> 'kind') = 'sleep' and (w ? 'seconds') = (w ? 'until') then
    problems := problems || format('step %s: a sleep needs exactly one of seconds and until', i);
  end if;
  if w ? 'onTimeout' and (jsonb_typeof(w -> 'onTimeout') <> 'object' or not (w -> 'onTimeout') ? 'value'
                          or not w ? 'seconds' or (w ->> 'kind') <> 'event') then
    problems := problems || format('step %s: onTimeout must be {"value": ...} on an event step with a timeout', i);
  end if;
  begin
    perform (w ->> 'key')::jsonpath, (w ->> 'until')::jsonpath;
  exception when others then
    problems := problems || format('step %s: key and until must be JSON paths such as "$.orderId"', i);
  end;
  return problems;
end;
$$;

-- Records step p_step_slug's wait (its "wait" in the shape, checked by _wait_step_problems).
create or replace function pgflow._set_wait(p_flow_slug text, p_step_slug text, p_wait jsonb)
returns void
language sql
volatile
set search_path = ''
as $$
  update pgflow.steps s
  set kind = p_wait ->> 'kind', wait_event = p_wait ->> 'event', wait_key_path = p_wait ->> 'key',
      wait_seconds = (p_wait ->> 'seconds')::integer, wait_until_path = p_wait ->> 'until',
      on_timeout = p_wait -> 'onTimeout'
  where s.flow_slug = p_flow_slug and s.step_slug = p_step_slug
$$;

-- ---- schemas/0288_trace_context.sql
-- Trace context for runs started by the database itself (a child-flow step's child run): the
-- traceparent that names the parent step's span, so the child's spans join the parent's trace
-- under that step. The ids are the ones the worker derives (src/telemetry/span_ids.ts): a span id
-- is FNV-1a 64 of a text naming the span, the trace of a run started without a traceparent is its
-- run id; both sides are checked against each other by tests/telemetry/trace_context_sql_test.ts.

-- FNV-1a 64 of the text's UTF-8 bytes as 16 hex digits (never the invalid all-zero id). numeric
-- carries the 64-bit product, which bigint would overflow; xor with a byte touches the low 8 bits.
create or replace function pgflow._span_id(p_text text)
returns text
language plpgsql
immutable
strict
set search_path = ''
as $$
declare
  bytes bytea := convert_to(p_text, 'UTF8');
  h numeric := 14695981039346656037;
  low integer;
  id text;
begin
  for i in 0 .. length(bytes) - 1 loop
    low := mod(h, 256)::integer;
    h := h - low + (low # get_byte(bytes, i));
    h := mod(h * 1099511628211, 18446744073709551616);
  end loop;
  -- to_hex of a negative bigint is its two's complement: the unsigned value's hex digits.
  id := lpad(to_hex((case when h >= 9223372036854775808 then h - 18446744073709551616 else h end)::bigint),
             16, '0');
  return case when id = '0000000000000000' then '0000000000000001' else id end;
end;
$$;

-- The traceparent naming step p_step_slug's span of run p_run_id, in the run's trace (its
-- traceparent's, else the trace its run id names), with the run's trace flags (sampled by default).
create or replace function pgflow._step_traceparent(p_run_id uuid, p_step_slug text, p_traceparent text)
returns text
language sql
immutable
set search_path = ''
as $$
  select '00-'
    || coalesce(m[1], replace(p_run_id::text, '-', ''))
    || '-' || pgflow._span_id('step ' || p_run_id::text || ' ' || p_step_slug)
    || '-' || coalesce(m[3], '01')
  from (select regexp_match(p_traceparent, '^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$') as m) x
$$;

-- ---- schemas/0290_child_flows.sql
-- Child flows: a step whose work is a run of another flow (docs/child-flows.md). Such a step has
-- no handler and no message. When it becomes ready (_start_ready_steps, with the parent run's lock
-- held) it starts one child run per task, single or map, in that same transaction; its tasks wait
-- 'started' with no message and the child's run id (step_tasks.child_run_id), so no worker holds
-- them and stalled recovery leaves them alone. The child's run records its parent (runs.parent_*),
-- and a trigger on the child's status moves the parent in the child's own finishing transaction:
-- a completion completes the parent's task through complete_tasks (so the step, its dependents and
-- the run go on exactly as after a handler's completion); a failure or a cancellation fails it.
--
-- The child's input is the task's input (a single step's dependency outputs, or the run input for
-- a root step; a map step's element), optionally reshaped by a mapping recorded by the DSL when
-- the flow is defined (steps.child_input): a JSON template and the paths it copies from the task's
-- input. It is evaluated here, without a worker, so a child starts in the transaction that made
-- its step ready.
--
-- Lock order: descendant before ancestor. The child's finish holds the child's run lock and then
-- takes the parent's; cancel_run (0530) locks a run's started descendants, deepest first, before
-- the run itself, so a parent's cancellation meeting a child's finish waits instead of
-- deadlocking. A step skipped when one child fails still cancels its other children while holding
-- the parent: a sibling finishing at that moment can meet it, and Postgres then ends one side with
-- 40P01 (the worker's completion retries it; nothing is half done).

-- The flow (a concrete slug or an alias, resolved when each child starts) a 'flow' step runs.
alter table pgflow.steps add column if not exists child_flow text;
-- How a 'flow' step builds its child's input from its task's input; NULL: the task's input as it
-- is. {"template": <json>, "refs": [[<path in template>, <path in task input>], ...]}.
alter table pgflow.steps add column if not exists child_input jsonb;
do $$
begin
  alter table pgflow.steps add constraint steps_child_flow_iff_flow_kind
    check ((kind = 'flow') = (child_flow is not null) and (child_input is null or kind = 'flow'));
exception when duplicate_object then
  null;
end
$$;

-- The parent of a child run: the run, step and task index waiting for it. No foreign key, like
-- restart_of_run_id: a parent can be pruned before its children.
alter table pgflow.runs add column if not exists parent_run_id uuid;
alter table pgflow.runs add column if not exists parent_step_slug text;
alter table pgflow.runs add column if not exists parent_task_index integer;
do $$
begin
  alter table pgflow.runs add constraint runs_parent_complete check (
    (parent_run_id is null) = (parent_step_slug is null) and (parent_run_id is null) = (parent_task_index is null));
exception when duplicate_object then
  null;
end
$$;
-- A run's children (cancel, get_run). Partial: a run that is not a child adds no entry.
create index if not exists runs_parent_idx on pgflow.runs (parent_run_id, parent_step_slug, parent_task_index)
  where parent_run_id is not null;

-- The child run a 'flow' step's task waits for (or took its output from); NULL for other tasks.
alter table pgflow.step_tasks add column if not exists child_run_id uuid;

-- The child input of one task: the template with every reference replaced by the value at its
-- path in the task's input (JSON null where the path leads nowhere, as a missing key would).
create or replace function pgflow._child_input(p_mapping jsonb, p_source jsonb)
returns jsonb
language plpgsql
immutable
set search_path = ''
as $$
declare
  result jsonb := p_mapping -> 'template';
  ref jsonb;
  target text[];
  val jsonb;
begin
  for ref in select r.value from jsonb_array_elements(p_mapping -> 'refs') r loop
    val := coalesce(p_source #> array(select jsonb_array_elements_text(ref -> 1)), 'null'::jsonb);
    target := array(select jsonb_array_elements_text(ref -> 0));
    result := case when cardinality(target) = 0 then val else jsonb_set(result, target, val) end;
  end loop;
  return result;
end;
$$;

-- Starts the child runs of a 'flow' step that _start_ready_steps just started with p_count tasks
-- (p_source: the array a map step maps over, NULL for a single step). The caller holds the run's
-- lock. A restarted run (retry_run, resume_run) takes over its source's child of the same index
-- when that child had the same input: a completed one gives its output at once, a running one is
-- moved to the new parent; only the others start anew. Tasks a resume copied already are done.
--
-- Returns NULL when the step waits for children, 'completed' when it has nothing left to wait
-- for, or an error that fails the run (the child flow does not exist, or a child ended at once).
create or replace function pgflow._start_child_runs(
  p_run_id uuid, p_step_slug text, p_count integer, p_source jsonb
)
returns text
language plpgsql
volatile
set search_path = ''
as $$
declare
  run pgflow.runs;
  step pgflow.steps;
  base jsonb;
  child_in jsonb;
  prior pgflow.runs;
  child pgflow.runs;
  finished integer := 0;
  remaining integer;
begin
  select * into run from pgflow.runs r where r.run_id = p_run_id;
  select * into step from pgflow.steps s where s.flow_slug = run.flow_slug and s.step_slug = p_step_slug;
  if not exists (select 1 from pgflow.aliases a where a.alias = step.child_flow)
     and not exists (select 1 from pgflow.flows f where f.flow_slug = step.child_flow) then
    return format('[CHILD_FLOW_MISSING] step %s runs flow %s, which does not exist; compile it (start a worker for it) or point the step at another flow',
                  p_step_slug, step.child_flow);
  end if;
  -- Tasks a resume copied from its source run keep the child they came from.
  update pgflow.step_tasks t set child_run_id = src.child_run_id
  from pgflow.step_tasks src
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.child_run_id is null
    and src.run_id = run.restart_of_run_id and src.step_slug = p_step_slug and src.task_index = t.task_index;

  for i in 0 .. p_count - 1 loop
    continue when exists (select 1 from pgflow.step_tasks t
                          where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = i);
    base := case when step.step_type = 'map' then p_source -> i
                 else (select o from pgflow._task_input(p_run_id, run.flow_slug, p_step_slug, 0) o) end;
    child_in := case when step.child_input is null then base else pgflow._child_input(step.child_input, base) end;
    prior := null;
    if run.restart_of_run_id is not null then
      select c.* into prior
      from pgflow.step_tasks src
      join pgflow.runs c on c.run_id = src.child_run_id
      where src.run_id = run.restart_of_run_id and src.step_slug = p_step_slug and src.task_index = i
        and c.status in ('completed', 'started') and c.input = child_in
      for update of c;
    end if;
    if prior.status = 'started' then
      update pgflow.runs r set parent_run_id = p_run_id, parent_step_slug = p_step_slug, parent_task_index = i
      where r.run_id = prior.run_id;
      child := prior;
    elsif prior.status = 'completed' then
      child := prior;
    else
      -- The child's spans hang under this step's span, in the parent's trace.
      child := pgflow.start_flow(step.child_flow, child_in,
        traceparent => pgflow._step_traceparent(p_run_id, p_step_slug, run.traceparent));
      update pgflow.runs r set parent_run_id = p_run_id, parent_step_slug = p_step_slug, parent_task_index = i
      where r.run_id = child.run_id;
    end if;
    if child.status = 'completed' then
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status, output,
                                     attempts_count, started_at, completed_at, child_run_id)
      values (p_run_id, run.flow_slug, p_step_slug, i, step.queue_name, 'completed', child.output,
              1, clock_timestamp(), clock_timestamp(), child.run_id);
      finished := finished + 1;
    elsif child.status = 'started' then
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status,
                                     attempts_count, started_at, child_run_id)
      values (p_run_id, run.flow_slug, p_step_slug, i, step.queue_name, 'started', 1, clock_timestamp(),
              child.run_id);
    else
      return format('[CHILD_FLOW_FAILED] step %s [%s]: child run %s of flow %s %s at its start: %s',
                    p_step_slug, i, child.run_id, child.flow_slug, child.status,
                    coalesce(child.error_message, 'no error recorded'));
    end if;
  end loop;

  update pgflow.step_states ss set remaining_tasks = ss.remaining_tasks - finished
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug
  returning ss.remaining_tasks into remaining;
  if remaining > 0 then
    return null;
  end if;
  perform pgflow._complete_step(p_run_id, p_step_slug,
    case when step.step_type = 'map'
         then (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
               where t.run_id = p_run_id and t.step_slug = p_step_slug)
         else (select t.output from pgflow.step_tasks t
               where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = 0) end);
  return 'completed';
end;
$$;

-- Cancels the running children of a run (of one of its steps, when p_step_slug is given), in
-- run_id order. Each cancellation's own trigger cancels that child's children in turn.
create or replace function pgflow._cancel_child_runs(p_run_id uuid, p_step_slug text, p_reason text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  child uuid;
begin
  for child in
    select r.run_id from pgflow.runs r
    where r.parent_run_id = p_run_id and (p_step_slug is null or r.parent_step_slug = p_step_slug)
      and r.status = 'started'
    order by r.run_id
  loop
    perform pgflow.cancel_run(child, p_reason);
  end loop;
end;
$$;

-- A child run ended: its parent's task completes with the child's output, or fails by the step's
-- whenExhausted (the child's steps had their own attempts, so a failed child is not started
-- again: a retry or resume of the parent does that, reusing the children that completed). Nothing
-- happens when the parent has moved on (cancelled, failed) or the task waits for another child.
create or replace function pgflow._settle_child(p_child pgflow.runs)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  task pgflow.step_tasks;
  when_exhausted text;
  err text;
begin
  perform 1 from pgflow.runs r where r.run_id = p_child.parent_run_id and r.status = 'started' for update;
  if not found then
    return;
  end if;
  select * into task from pgflow.step_tasks t
  where t.run_id = p_child.parent_run_id and t.step_slug = p_child.parent_step_slug
    and t.task_index = p_child.parent_task_index;
  if not found or task.status <> 'started' or task.child_run_id is distinct from p_child.run_id then
    return;
  end if;
  if p_child.status = 'completed' then
    perform pgflow.complete_tasks(array[task.run_id], array[task.step_slug], array[task.task_index],
                                  array[p_child.output], array[task.attempts_count]);
    return;
  end if;
  err := left(format('[CHILD_FLOW_FAILED] child run %s of flow %s %s: %s', p_child.run_id, p_child.flow_slug,
                     p_child.status, coalesce(p_child.error_message, p_child.cancel_reason, 'no reason given')), 2000);
  perform pgflow._record_attempt(task, 'failed', err, null);
  update pgflow.step_tasks t set status = 'failed', error_message = err, failed_at = clock_timestamp()
  where t.run_id = task.run_id and t.step_slug = task.step_slug and t.task_index = task.task_index;
  select s.when_exhausted into when_exhausted from pgflow.steps s
  where s.flow_slug = task.flow_slug and s.step_slug = task.step_slug;
  if when_exhausted = 'fail' then
    -- The other children run on: a resume of the parent takes them over, done or running.
    perform pgflow._fail_run(task.run_id, task.step_slug, err);
  else
    update pgflow.step_states ss set error_message = err
    where ss.run_id = task.run_id and ss.step_slug = task.step_slug;
    perform pgflow._skip_step(task.run_id, task.step_slug, 'handler_failed', when_exhausted = 'skip-cascade');
    -- A skipped step needs no more of its children.
    perform pgflow._cancel_child_runs(task.run_id, task.step_slug,
                                      format('step %s of parent run %s was skipped', task.step_slug, task.run_id));
    perform pgflow._start_ready_steps(task.run_id);
  end if;
end;
$$;

-- Fires when a run ends: a child moves its parent on; a cancelled run cancels its running children.
create or replace function pgflow._run_ended_for_children()
returns trigger
language plpgsql
volatile
set search_path = ''
as $$
begin
  if new.status = 'cancelled' then
    perform pgflow._cancel_child_runs(new.run_id, null, format('parent run %s was cancelled', new.run_id));
  end if;
  if new.parent_run_id is not null then
    perform pgflow._settle_child(new);
  end if;
  return null;
end;
$$;

-- Only a child's end, or a cancellation, fires it: the when clause costs any other run's status
-- change nothing more than its test.
drop trigger if exists runs_child_ended on pgflow.runs;
create trigger runs_child_ended
  after update of status on pgflow.runs
  for each row
  when (old.status = 'started' and new.status <> 'started'
        and (new.parent_run_id is not null or new.status = 'cancelled'))
  execute function pgflow._run_ended_for_children();

-- Refuses to delete a flow that another flow's step runs as its child (by slug, or by the alias
-- that points at it), naming that step: its next run would fail to start the child.
create or replace function pgflow._refuse_deleting_child_flow(p_flow_slug text)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  user_step record;
begin
  select s.flow_slug, s.step_slug, s.child_flow into user_step
  from pgflow.steps s
  where s.kind = 'flow' and s.flow_slug <> p_flow_slug
    and (s.child_flow = p_flow_slug
         or exists (select 1 from pgflow.aliases a where a.alias = s.child_flow and a.flow_slug = p_flow_slug))
  order by s.flow_slug, s.step_index
  limit 1;
  if found then
    raise exception 'flow % is run as a child by step % of flow % (child flow %); it was not deleted',
      p_flow_slug, user_step.step_slug, user_step.flow_slug, user_step.child_flow
      using errcode = '55000',
        hint = format('delete flow %s first (select pgflow.delete_flow_and_data(%L)), then this one',
                      user_step.flow_slug, user_step.flow_slug);
  end if;
end;
$$;

-- What is wrong with the child of step number p_index of a shape the compiler was sent (nothing for
-- a step without one): the flow must be a slug or alias, the input mapping null or a template with
-- [[path, path], ...] references.
create or replace function pgflow._child_step_problems(p_step jsonb, p_index integer)
returns text[]
language sql
immutable
set search_path = ''
as $$
  select case
    when not (p_step ? 'child') then '{}'::text[]
    when jsonb_typeof(p_step -> 'child' -> 'flow') is distinct from 'string'
         or not pgflow.is_valid_slug(p_step -> 'child' ->> 'flow') then
      array[format('step %s: child flow %s is not a valid flow slug or alias', p_index,
                   coalesce(p_step -> 'child' -> 'flow', 'null'))]
    when jsonb_typeof(p_step -> 'child' -> 'input') not in ('null', 'object')
         or (jsonb_typeof(p_step -> 'child' -> 'input') = 'object'
             and (not (p_step -> 'child' -> 'input' ? 'template')
                  or jsonb_typeof(p_step -> 'child' -> 'input' -> 'refs') is distinct from 'array')) then
      array[format('step %s: child input must be null or {"template": ..., "refs": [[path, path], ...]}', p_index)]
    else '{}'::text[]
  end
$$;

-- ---- schemas/0300_start_flow.sql
-- Starting a run. Status times are clock_timestamp() under the run's lock (see 0250_run_progress.sql).

-- Creates a run of a flow and starts its root steps. Every task's message is sent to its step's
-- routed queue in the same transaction that records the task's queue snapshot and message id.
--
-- security definer: a client role granted only this function (service_role, see 0900_privileges
-- and docs/permissions.md) can start a run without write access to pgflow's tables or to PGMQ's
-- queues. It is safe because search_path is pinned to '' and every name is schema-qualified.
--
-- priority (from -1000 to 1000, default 0) ranks the run's tasks that wait for capacity: each is
-- released before waiting tasks of a lower priority (docs/flow-control.md).
--
-- traceparent (a W3C trace context, '00-<trace id>-<span id>-<flags>', default NULL) puts the run
-- in the caller's trace: workers make every attempt's and step's span a child of it, hours later
-- and in other processes (docs/telemetry.md). A malformed one is refused, naming it.
create or replace function pgflow.start_flow(
  flow_slug text, input jsonb, run_id uuid default null, priority integer default 0,
  traceparent text default null
)
returns pgflow.runs
language plpgsql
volatile
security definer
set search_path = ''
as $$
#variable_conflict use_column
declare
  flow pgflow.flows;
  new_run_id uuid := coalesce(start_flow.run_id, gen_random_uuid());
  result pgflow.runs;
  target text;
  started_as text;
  step_count integer;
  roots text[];
  plain_roots boolean;
begin
  -- An alias wins over a slug (no flow may take an alias's name unless it carries that alias).
  select a.flow_slug into target from pgflow.aliases a where a.alias = start_flow.flow_slug;
  if found then
    started_as := start_flow.flow_slug;
  else
    target := start_flow.flow_slug;
  end if;
  select * into flow from pgflow.flows f where f.flow_slug = target;
  if not found and started_as is not null then
    raise exception 'alias % points at flow %, which does not exist', started_as, target
      using errcode = '22023', hint = 'compile that version, or activate another (pgflow.activate_alias)';
  end if;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(start_flow.flow_slug), 'NULL')
      using errcode = '22023', hint = 'check the slug, or start a worker for the flow so it is compiled';
  end if;
  if start_flow.input is null then
    raise exception 'flow %: input must not be SQL NULL', flow.flow_slug
      using errcode = '22004', hint = 'pass a JSON value, for example ''{}''::jsonb or ''null''::jsonb';
  end if;
  -- The default priority (nearly every run) is not checked against the bounds: a start pays nothing.
  if start_flow.priority is distinct from 0 then
    perform pgflow._check_run_priority(flow.flow_slug, start_flow.priority);
  end if;
  if start_flow.traceparent is not null
     and start_flow.traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' then
    raise exception 'traceparent % is not a W3C trace context', quote_literal(start_flow.traceparent)
      using errcode = '22023',
            hint = 'pass ''00-<32 hex trace id>-<16 hex span id>-<2 hex flags>'' in lowercase, or NULL';
  end if;
  -- A generated id is new; a given one may be taken (the primary key would say so less clearly).
  if start_flow.run_id is not null and exists (select 1 from pgflow.runs r where r.run_id = new_run_id) then
    raise exception 'run % already exists', new_run_id using errcode = '23505';
  end if;

  select count(*),
         array_agg(s.step_slug order by s.step_index) filter (where s.deps_count = 0),
         bool_and(s.deps_count > 0 or (s.kind = 'task' and s.step_type = 'single' and s.required_input_pattern is null
                                      and s.forbidden_input_pattern is null))
  into step_count, roots, plain_roots
  from pgflow.steps s where s.flow_slug = flow.flow_slug;
  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, started_as, priority, traceparent)
  values (new_run_id, flow.flow_slug, start_flow.input, step_count, started_as, start_flow.priority,
          start_flow.traceparent)
  returning * into result;

  if plain_roots then
    -- Every root step is one task with no condition (most flows): each starts as it is created,
    -- exactly as pgflow._start_ready_steps would start it, without that function's passes over
    -- the run (a third of a start_flow's server time, which is in every run's pickup latency).
    insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps, status, started_at,
                                    initial_tasks, remaining_tasks)
    select new_run_id, s.flow_slug, s.step_slug, s.deps_count,
           case when s.deps_count = 0 then 'started' else 'created' end,
           case when s.deps_count = 0 then clock_timestamp() end,
           case when s.deps_count = 0 then 1 end,
           case when s.deps_count = 0 then 1 end
    from pgflow.steps s where s.flow_slug = flow.flow_slug;
    perform pgflow._send_task_messages(new_run_id, flow.flow_slug, roots,
                                       array_fill(1, array[cardinality(roots)]));
  else
    insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps)
    select new_run_id, s.flow_slug, s.step_slug, s.deps_count
    from pgflow.steps s where s.flow_slug = flow.flow_slug;
    perform pgflow._start_ready_steps(new_run_id);
  end if;

  -- A flow without steps has nothing to wait for.
  if step_count = 0 then
    update pgflow.runs r set status = 'completed', completed_at = clock_timestamp(), output = '{}'::jsonb
    where r.run_id = new_run_id and r.status = 'started' and r.remaining_steps = 0;
  end if;

  -- The row as inserted is the row to return unless the start moved the run on: a ready-step pass
  -- may end it (a condition that fails it, steps that all finish at once), and so does a flow
  -- without steps.
  if not plain_roots or step_count = 0 then
    select * into result from pgflow.runs r where r.run_id = new_run_id;
  end if;
  return result;
end;
$$;

-- ---- schemas/0310_start_flows.sql
-- Starting many runs of one flow in one call: a bulk import, a backfill, a fan-out from a client.

-- What start_flows checks before it starts anything, raising with the bad value named: the flow
-- (an alias is resolved before a slug: no flow may take an alias's name unless it carries that
-- alias; started_as is the alias, else NULL), the priority (the default, nearly every run, is not
-- checked against the bounds) and the traceparent. The same checks, in the same words, as
-- start_flow's own: start_flow keeps its copy inline, since a nested call on its path (once per
-- run) measured slower.
create or replace function pgflow._start_target(
  p_name text, p_priority integer, p_traceparent text, out flow pgflow.flows, out started_as text
)
language plpgsql
stable
set search_path = ''
as $$
declare
  target text;
begin
  select a.flow_slug into target from pgflow.aliases a where a.alias = p_name;
  if found then
    started_as := p_name;
  else
    target := p_name;
  end if;
  select * into flow from pgflow.flows f where f.flow_slug = target;
  if not found and started_as is not null then
    raise exception 'alias % points at flow %, which does not exist', started_as, target
      using errcode = '22023', hint = 'compile that version, or activate another (pgflow.activate_alias)';
  end if;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(p_name), 'NULL')
      using errcode = '22023', hint = 'check the slug, or start a worker for the flow so it is compiled';
  end if;
  if p_priority is distinct from 0 then
    perform pgflow._check_run_priority(flow.flow_slug, p_priority);
  end if;
  if p_traceparent is not null and p_traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' then
    raise exception 'traceparent % is not a W3C trace context', quote_literal(p_traceparent)
      using errcode = '22023',
            hint = 'pass ''00-<32 hex trace id>-<16 hex span id>-<2 hex flags>'' in lowercase, or NULL';
  end if;
end;
$$;

-- Sends one message per run for each of the given root steps (one task each), in send_batch calls
-- of at most 1,000, and inserts each task with its queue snapshot and message id in the same
-- transaction; announces each queue that got messages visible at once. The set-based twin of
-- _send_task_messages' one-task path for many runs: the same rows, messages and notifications.
-- Only for steps without a concurrency limit (their tasks wait instead of being sent).
create or replace function pgflow._send_root_messages(p_run_ids uuid[], p_flow_slug text, p_steps text[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  root record;
  ids bigint[];
  batch_size constant integer := 1000;
  slice uuid[];
begin
  for root in
    select s.step_slug, s.queue_name, s.opt_start_delay as delay
    from pgflow.steps s where s.flow_slug = p_flow_slug and s.step_slug = any(p_steps)
    order by s.step_index
  loop
    -- Bounded slices: one statement never carries an unbounded array of messages.
    for slice_start in 1 .. cardinality(p_run_ids) by batch_size loop
      slice := p_run_ids[slice_start:slice_start + batch_size - 1];
      -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
      select array_agg(id order by id) into ids
      from pgmq.send_batch(
        root.queue_name,
        -- The body is informational only: the claim reads ids, never bodies.
        (select array_agg(jsonb_build_object('flow_slug', p_flow_slug, 'run_id', u.run_id,
                                             'step_slug', root.step_slug, 'task_index', 0)
                          order by u.ord)
         from unnest(slice) with ordinality as u(run_id, ord)),
        root.delay) as id;
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, message_id)
      select u.run_id, p_flow_slug, root.step_slug, 0, root.queue_name, u.id
      from unnest(slice, ids) as u(run_id, id);
    end loop;
    -- As in _send_task_messages: delivered at commit or never; a delayed step is found by polls.
    if root.delay = 0 then
      perform pgflow._announce('pgflow_queue:' || root.queue_name, '');
    end if;
  end loop;
end;
$$;

-- Starts one run of flow_slug (or of the flow alias flow_slug points at) per element of inputs, a
-- JSON array, all with the same priority and traceparent (as start_flow's). Returns the new runs'
-- ids in the order of inputs, and the concrete flow they run. Either every run starts or none
-- does: a refused element refuses the call, naming its index (0-based, as in the array).
--
-- Set-based: the runs, their step states, and (for roots that are single steps without a
-- condition or a concurrency limit, most flows) their tasks and messages are written by one
-- statement each, whatever the count, where 10,000 start_flow calls would run 10,000 times
-- everything start_flow does. Other roots (a condition to evaluate on each input, a map over
-- it, a concurrency limit) are started run by run, exactly as start_flow starts them.
--
-- At most 100,000 inputs a call: one transaction writes every run, and its locks and WAL grow
-- with them; split larger imports into several calls.
--
-- security definer, granted like start_flow (0900_privileges): a client allowed to start a run
-- may start several, and needs no write access to pgflow's tables or PGMQ's queues.
create or replace function pgflow.start_flows(
  flow_slug text, inputs jsonb, priority integer default 0, traceparent text default null,
  out run_ids uuid[], out run_flow_slug text
)
language plpgsql
volatile
security definer
set search_path = ''
as $$
#variable_conflict use_column
declare
  max_inputs constant integer := 100000;
  checked record;
  flow pgflow.flows;
  started_as text;
  run_count integer;
  bad_index bigint;
  step_count integer;
  roots text[];
  plain_roots boolean;
  limited_roots boolean;
  map_root boolean;
  one_run uuid;
begin
  select * into checked
  from pgflow._start_target(start_flows.flow_slug, start_flows.priority, start_flows.traceparent);
  flow := checked.flow;
  started_as := checked.started_as;
  if jsonb_typeof(start_flows.inputs) is distinct from 'array' then
    raise exception 'flow %: inputs must be a JSON array of run inputs, got %', flow.flow_slug,
      coalesce(jsonb_typeof(start_flows.inputs), 'SQL NULL')
      using errcode = '22023', hint = 'pass one element per run, for example ''[{"id": 1}, {"id": 2}]''::jsonb';
  end if;
  run_count := jsonb_array_length(start_flows.inputs);
  if run_count > max_inputs then
    raise exception 'flow %: % inputs in one call, at most % are accepted', flow.flow_slug, run_count, max_inputs
      using errcode = '54000', hint = 'split the inputs into several start_flows calls';
  end if;
  run_flow_slug := flow.flow_slug;
  run_ids := '{}';
  if run_count = 0 then
    return;
  end if;

  select count(*),
         array_agg(s.step_slug order by s.step_index) filter (where s.deps_count = 0),
         bool_and(s.deps_count > 0 or (s.step_type = 'single' and s.required_input_pattern is null
                                      and s.forbidden_input_pattern is null)),
         bool_or(s.deps_count = 0 and s.concurrency_scope is not null),
         bool_or(s.deps_count = 0 and s.step_type = 'map')
  into step_count, roots, plain_roots, limited_roots, map_root
  from pgflow.steps s where s.flow_slug = flow.flow_slug;

  -- start_flow would start such a run and fail it at once (nothing to map over); in a bulk start
  -- a wrong element is far likelier a caller's mistake than a run wanted failed, so it is refused.
  if map_root then
    select e.ord - 1 into bad_index
    from jsonb_array_elements(start_flows.inputs) with ordinality as e(value, ord)
    where jsonb_typeof(e.value) <> 'array'
    order by e.ord limit 1;
    if found then
      raise exception 'flow %: inputs[%] is a JSON %, but the flow''s root step maps over its input', flow.flow_slug,
        bad_index, jsonb_typeof(start_flows.inputs -> bad_index::integer)
        using errcode = '22023', hint = 'pass an array as every element (an empty one for no tasks)';
    end if;
  end if;

  -- The ids first, in input order: they are the answer, and the rows below follow them.
  select array_agg(gen_random_uuid() order by g.i) into run_ids
  from generate_series(1, run_count) as g(i);
  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, started_as, priority, traceparent)
  select u.run_id, flow.flow_slug, e.value, step_count, started_as, start_flows.priority,
         start_flows.traceparent
  from unnest(run_ids) with ordinality as u(run_id, ord)
  join jsonb_array_elements(start_flows.inputs) with ordinality as e(value, ord) on e.ord = u.ord;

  if plain_roots then
    -- As start_flow: every root is one task with no condition, started as it is created.
    insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps, status, started_at,
                                    initial_tasks, remaining_tasks)
    select u.run_id, s.flow_slug, s.step_slug, s.deps_count,
           case when s.deps_count = 0 then 'started' else 'created' end,
           case when s.deps_count = 0 then clock_timestamp() end,
           case when s.deps_count = 0 then 1 end,
           case when s.deps_count = 0 then 1 end
    from unnest(run_ids) as u(run_id)
    cross join pgflow.steps s where s.flow_slug = flow.flow_slug;
    if limited_roots then
      -- Tasks over a limit wait in pgflow's rows with their run's priority and key.
      foreach one_run in array run_ids loop
        perform pgflow._send_task_messages(one_run, flow.flow_slug, roots,
                                           array_fill(1, array[cardinality(roots)]));
      end loop;
    elsif roots is not null then
      perform pgflow._send_root_messages(run_ids, flow.flow_slug, roots);
    end if;
  else
    insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps)
    select u.run_id, s.flow_slug, s.step_slug, s.deps_count
    from unnest(run_ids) as u(run_id)
    cross join pgflow.steps s where s.flow_slug = flow.flow_slug;
    foreach one_run in array run_ids loop
      perform pgflow._start_ready_steps(one_run);
    end loop;
  end if;

  -- A flow without steps has nothing to wait for.
  if step_count = 0 then
    update pgflow.runs r set status = 'completed', completed_at = clock_timestamp(), output = '{}'::jsonb
    where r.run_id = any(run_ids) and r.status = 'started' and r.remaining_steps = 0;
  end if;
end;
$$;

-- ---- schemas/0400_start_tasks.sql
-- The claim. A worker that read messages from one queue claims the tasks behind them by exact
-- (queue, message id) identity, restricted to the (flow, step) pairs it has handlers for. Only an
-- eligible queued task in the support set is claimed; every other message is reported (with the
-- identity of its task, when one owns it) and its task left exactly as it was. One such message
-- changes: a queued task outside the support set whose pair a live worker on the queue serves is
-- handed back to that worker (visible again at once, and announced; see _hand_back). A read may
-- ask for more messages than the worker has free slots (to read past another worker's backlog,
-- see read_and_claim): then at most p_claim_limit tasks are claimed, and the worker's own tasks
-- beyond them are returned the same way (surplus).
--
-- _start_tasks is the claim; its steps that only some reads need are the functions before it
-- (_explicit_support, _claim_limit_split, _hand_back, _read_past_qty), and the input of a claimed
-- task is pgflow._task_input's (0090_inline_helpers.sql).

-- A row of the claim, as read_and_claim, complete_and_claim and _start_tasks return it: one
-- message read; what the claim did with it (disposition: docs/design.md, Claim table); the
-- identity of the task that owns it, if one does; input and attempt when it was claimed; and
-- next_read_qty, the same on every row of a read (see _read_past_qty). The read's own fields
-- (read_ct, enqueued_at, message, headers) are read_and_claim's to fill: _start_tasks leaves them
-- NULL and gives vt only where it changed the message's visibility. read_and_claim gives the
-- visibility each message ends with, and a body and headers only on claimed rows.
do $$
begin
  create type pgflow.claim_row as (
    msg_id bigint,
    read_ct integer,
    enqueued_at timestamptz,
    vt timestamptz,
    message jsonb,
    headers jsonb,
    disposition text,
    flow_slug text,
    run_id uuid,
    step_slug text,
    task_index integer,
    input jsonb,
    attempt integer,
    next_read_qty integer
  );
exception when duplicate_object then
  null;
end
$$;

-- A registered worker's claim settings, one primary-key lookup whatever the size of its set: the
-- visibility its claims read with (claim_visibility, NULL when its steps' timeouts differ) and its
-- support set, keyed as pgflow._support_keys builds it. A worker id with no row (never registered, or its
-- row deleted since) fails with SQLSTATE PFW01, pgflow's own code for an unregistered worker
-- (class PF is used by neither Postgres nor the SQL standard), so a caller tells it from every
-- other error by its code alone; a worker registered for another queue fails too, since its set
-- says nothing about this one.
create or replace function pgflow._registered_claim(p_worker_id uuid, p_queue_name text)
returns table (claim_visibility integer, support_keys jsonb)
language plpgsql
stable
set search_path = ''
as $$
declare
  reg_queue text;
begin
  select w.queue_name, w.claim_visibility, w.supported_keys
  into reg_queue, claim_visibility, support_keys
  from pgflow.workers w where w.worker_id = p_worker_id;
  if not found then
    raise exception 'start_tasks: worker % is not registered, so it has no recorded support set', p_worker_id
      using errcode = 'PFW01', hint = 'register it with pgflow.register_worker, or pass the supported pairs';
  end if;
  if reg_queue is distinct from p_queue_name then
    raise exception 'start_tasks: worker % is registered for queue %, not %', p_worker_id,
      quote_literal(reg_queue), quote_literal(p_queue_name)
      using errcode = '22023', hint = 'claim on the queue the worker registered, or pass the supported pairs';
  end if;
  return next;
end;
$$;

-- The support set given as explicit pairs (start_tasks' supported, a worker's fallback when it
-- has no registration): checked and keyed in one pass over the pairs, a cost that grows with the
-- set and is paid per batch, which is why workers claim against their registered set instead.
-- stamp is the worker id to record on claimed tasks: NULL for a worker with no row, since
-- last_worker_id can only name a registered worker.
create or replace function pgflow._explicit_support(
  p_supported jsonb, p_worker_id uuid, out support_keys jsonb, out stamp uuid
)
language plpgsql
stable
set search_path = ''
as $$
declare
  malformed boolean;
begin
  if jsonb_typeof(p_supported) = 'array' then
    select coalesce(jsonb_object_agg(
             case when jsonb_typeof(e) = 'array'
                  then pgflow._pair_key(coalesce(e ->> 0, ''), coalesce(e ->> 1, '')) else '' end,
             true), '{}'::jsonb),
           bool_or(case when jsonb_typeof(e) <> 'array' then true
                        when jsonb_array_length(e) <> 2 then true
                        else jsonb_typeof(e -> 0) <> 'string' or jsonb_typeof(e -> 1) <> 'string' end)
    into support_keys, malformed
    from jsonb_array_elements(p_supported) e;
  end if;
  if jsonb_typeof(p_supported) <> 'array' or malformed then
    raise exception 'start_tasks: supported must be a JSON array of [flow_slug, step_slug] pairs, got %',
      left(coalesce(p_supported::text, 'NULL'), 200) using errcode = '22023';
  end if;
  stamp := p_worker_id;
  perform 1 from pgflow.workers w where w.worker_id = p_worker_id;
  if not found then
    stamp := null;
  end if;
end;
$$;

-- A read deeper than the worker's free slots (read_and_claim's read_qty) may hold more of its own
-- queued tasks than it can run: the claim may take the first p_claim_limit of them, in message
-- order (claim_ids), and the rest are surplus, returned to the queue by the hand-back. Each id is
-- looked up on its own (LATERAL ... LIMIT 1), as in the claim (see _start_tasks). Called by
-- _start_tasks only, under its settings.
create or replace function pgflow._claim_limit_split(
  p_queue text, p_msg_ids bigint[], p_support_keys jsonb, p_claim_limit integer,
  out claim_ids bigint[], out surplus bigint[]
)
language plpgsql
stable
set search_path = ''
as $$
declare
  own_ids bigint[];
begin
  select array_agg(i.mid order by i.mid) into own_ids
  from (select distinct m from unnest(p_msg_ids) m where m is not null) i(mid)
  cross join lateral (
    select 1 from pgflow.step_tasks t
    where t.queue_name = p_queue and t.message_id = i.mid and t.status = 'queued'
      and p_support_keys ? pgflow._pair_key(t.flow_slug, t.step_slug)
    limit 1
  ) t;
  claim_ids := coalesce(own_ids[1:p_claim_limit], '{}');
  surplus := nullif(own_ids[p_claim_limit + 1:], '{}');
end;
$$;

-- The hand-back (docs/design.md, Claim table). Reading a message hides it from every other reader
-- of the queue, so a message this worker cannot claim would wait a visibility timeout for the
-- worker that can, and a non-supporting reader whose next read lands as it reappears could hide
-- it again, for ever. So a message whose task is queued in a started run, outside this worker's
-- support set, whose pair another live worker on this queue serves (pgflow._worker_live), is
-- handed back: made visible again at once (set_vt 0, or nothing when the read, with visibility
-- 0, left it visible) and announced on the queue's channel with its pair as payload
-- (["flow", "step"]: identity, never the body), which wakes a worker that serves it. A fresh
-- message read by the wrong worker is claimed by the right one without waiting, and no reader
-- ever hides another worker's message for longer than its own transaction. The worker's surplus
-- tasks (_claim_limit_split) are returned the same way: this worker has no slot for them, another
-- that serves them may. The task is not touched. A message no live worker serves keeps the
-- visibility the worker asked for (it would only be read again by workers that cannot claim it),
-- and so does one no task owns. Decided by task identity and the worker registry only, each
-- pair's servers looked up once. Returns the ids handed back, and the visibility of those set_vt
-- changed. Called by _start_tasks only, under its settings.
create or replace function pgflow._hand_back(
  p_queue text, p_msg_ids bigint[], p_claimed bigint[], p_surplus bigint[], p_support_keys jsonb,
  p_worker_id uuid, p_read_visibility integer,
  out handed bigint[], out vt_ids bigint[], out vts timestamptz[]
)
language plpgsql
volatile
set search_path = ''
as $$
declare
  payloads text[];
  payload text;
begin
  with unclaimed as (
    select i.mid, s.m is not null as surplus, t.run_id, t.flow_slug, t.step_slug,
           pgflow._pair_key(t.flow_slug, t.step_slug) as k
    from (select distinct m from unnest(p_msg_ids) m where m is not null) i(mid)
    left join unnest(p_surplus) s(m) on s.m = i.mid
    cross join lateral (
      select t.flow_slug, t.step_slug, t.run_id from pgflow.step_tasks t
      where t.queue_name = p_queue and t.message_id = i.mid and t.status = 'queued'
      limit 1
    ) t
    where not (i.mid = any (coalesce(p_claimed, '{}')))
  ),
  served as (
    select p.k from (select distinct u.k from unclaimed u where not u.surplus) p
    where not (p_support_keys ? p.k)
      and exists (
        select 1 from pgflow.workers w
        where w.queue_name = p_queue
          and pgflow._worker_live(w, clock_timestamp() - pgflow._live_window())
          and w.worker_id is distinct from p_worker_id
          and w.supported_keys ? p.k)
  )
  select array_agg(u.mid order by u.mid),
         array_agg(distinct jsonb_build_array(u.flow_slug, u.step_slug)::text)
  into handed, payloads
  from unclaimed u
  where u.surplus
     or (u.k in (select v.k from served v)
         and exists (select 1 from pgflow.runs r where r.run_id = u.run_id and r.status = 'started'));
  if handed is null then
    return;
  end if;
  if p_read_visibility is distinct from 0 then
    select array_agg(r.msg_id), array_agg(r.vt) into vt_ids, vts
    from pgflow.set_vt_batch(p_queue, handed, array_fill(0, array[cardinality(handed)])) r;
  end if;
  foreach payload in array payloads loop
    perform pgflow._announce('pgflow_queue:' || p_queue, payload);
  end loop;
end;
$$;

-- Reading past another worker's backlog (docs/design.md, Claim table; next_read_qty). PGMQ reads
-- visible messages in id order, so a worker whose own tasks are queued behind a busy worker's
-- backlog reads that backlog's head, hands it back (visible at once: its worker is live) and
-- reads the same head again, until the backlog is gone. So when a full read did not claim all it
-- read, the worker is told how many messages its next read must ask for to reach its first queued
-- task behind this read (or its first surplus task, p_first_surplus): the distance in message ids
-- from the first id read (the visible messages in between are at most that many), plus its claim
-- limit; at most pgflow._read_past_max(). read_and_claim reads that many with visibility 0 and
-- claims at most the limit, so the backlog it reads past is hidden from its worker only while
-- that read's transaction holds it. Only the worker's own queued tasks are looked at (pgflow's
-- rows, by id, within _read_past_max() ids of this read), never a message's body. A task queued
-- further behind, or whose message is not visible (a retry's delay), is not reached this way.
-- NULL: nothing of this worker's to read past to. Called by _start_tasks only, under its settings.
create or replace function pgflow._read_past_qty(
  p_queue text, p_msg_ids bigint[], p_ids_read integer, p_first_surplus bigint, p_support_keys jsonb,
  p_read_qty integer, p_claim_limit integer
)
returns integer
language plpgsql
stable
set search_path = ''
as $$
declare
  first_read bigint := (select min(m) from unnest(p_msg_ids) m);
  behind bigint := p_first_surplus;
begin
  -- A read that came back short saw every visible message: nothing of this worker's is visible
  -- behind it. Nor is anything when none of its flows has a started run (a key lookup per pair,
  -- before a scan of up to _read_past_max() task rows).
  if behind is null and p_ids_read >= coalesce(p_read_qty, p_ids_read)
     and exists (select 1 from jsonb_object_keys(p_support_keys) k
                 where exists (select 1 from pgflow.runs r
                               where r.flow_slug = split_part(k, chr(31), 1)
                                 and r.status = 'started')) then
    select t.message_id into behind
    from pgflow.step_tasks t
    where t.queue_name = p_queue
      and t.message_id > (select max(m) from unnest(p_msg_ids) m)
      and t.message_id < first_read + pgflow._read_past_max()
      and t.status = 'queued' and p_support_keys ? pgflow._pair_key(t.flow_slug, t.step_slug)
    order by t.message_id
    limit 1;
  end if;
  if behind is null then
    return null;
  end if;
  return least(behind - first_read + p_claim_limit, pgflow._read_past_max())::integer;
end;
$$;

-- supported => NULL claims against the set the worker registered (pgflow.workers.supported, keyed
-- once by register_worker; see _registered_claim): a worker with 1,000 pairs then sends none of
-- them with each batch. p_support_keys, when given, is that set already looked up by the caller
-- (read_and_claim). With explicit pairs a worker with no row still claims (its poll falls back to
-- them; see _explicit_support).
--
-- The claim runs in named steps, each below under its name: support set, claim limit, claim,
-- re-arm visibility, hand back, set back, read-past sizing, answer (with the inputs built by
-- pgflow._task_input). Each statement costs a plan lookup and an executor start whatever the
-- batch's size, so the common claim (every message claimed, every step with the timeout the read
-- used) runs two: the claim and the answer; the steps for the other cases are functions of their
-- own, called only when their case arises. A step's timeout is looked up once per step in the
-- batch, not once per task.
--
-- enable_seqscan = off: see read_and_claim (0410_read_and_claim.sql); start_tasks gets it here,
-- and the steps' functions run under it.
create or replace function pgflow._start_tasks(
  queue_name text,
  msg_ids bigint[],
  worker_id uuid,
  supported jsonb,
  p_read_visibility integer,
  p_unclaimed_visibility integer,
  p_support_keys jsonb default null,
  p_read_qty integer default null,
  p_claim_limit integer default null,
  p_released integer default 0
)
returns setof pgflow.claim_row
language plpgsql
volatile
set search_path = ''
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
declare
  q text := _start_tasks.queue_name;
  -- The queue's fairness state (0258_fair_window.sql): its cursor (null unless shared) and
  -- whether it is in window mode.
  q_cursor bigint;
  q_window boolean;
  -- The support set keyed as pgflow._support_keys builds it.
  sup_keys jsonb := _start_tasks.p_support_keys;
  -- The worker id stamped on claimed tasks: NULL for a worker with no row (_explicit_support).
  stamp uuid := _start_tasks.worker_id;
  -- The ids the claim may take: every id read, or with a claim limit the worker's own queued tasks
  -- up to it; the worker's own queued tasks beyond it (surplus).
  claim_ids bigint[] := _start_tasks.msg_ids;
  sur_msg bigint[];
  -- The claimed tasks, column by column.
  c_msg bigint[];
  c_flow text[];
  c_run uuid[];
  c_step text[];
  c_idx integer[];
  c_att integer[];
  -- Claimed messages whose step's timeout + margin is not the visibility the read gave them.
  v_msg bigint[];
  v_off integer[];
  -- How many distinct ids were read.
  n_ids integer;
  -- Claimed messages of rate-limited tasks; then those the rate check sent back to waiting.
  rl_msg bigint[];
  changed integer;
  -- Messages handed back, and messages set back to the visibility the worker asked for.
  h_msg bigint[];
  h_vt_ids bigint[];
  h_vts timestamptz[];
  u_msg bigint[];
  -- Every visibility this call changed, by message.
  s_ids bigint[] := '{}';
  s_vts timestamptz[] := '{}';
  next_qty integer;
begin
  if q is null then
    raise exception 'start_tasks: queue_name must not be NULL' using errcode = '22004';
  end if;

  -- Support set: the registered one, unless the caller looked it up already, or the explicit pairs.
  if supported is not null then
    select e.support_keys, e.stamp into sup_keys, stamp
    from pgflow._explicit_support(supported, _start_tasks.worker_id) e;
  elsif sup_keys is null then
    select r.support_keys into sup_keys from pgflow._registered_claim(_start_tasks.worker_id, q) r;
  end if;

  -- Claim limit: only a read that returned more ids than the worker has free slots (a read past).
  if p_claim_limit is not null and cardinality(msg_ids) > p_claim_limit then
    select l.claim_ids, l.surplus into claim_ids, sur_msg
    from pgflow._claim_limit_split(q, msg_ids, sup_keys, p_claim_limit) l;
  end if;

  -- Claim: each eligible queued task in the support set starts, once.
  with claimed as (
    update pgflow.step_tasks t
    -- The transaction's start, or, for a claim that waited for its queue's turn lock, when it
    -- got it (pgflow._release_before_read): a task released after the transaction began must
    -- not look started before it was queued.
    set status = 'started', attempts_count = t.attempts_count + 1,
        started_at = coalesce(nullif(pg_catalog.current_setting('pgflow.claim_start', true), '')::timestamptz,
                              now()),
        last_worker_id = stamp
    -- The plan must be driven by the ids, whatever the statistics say. A join on (queue, message
    -- id), `message_id = any (msg_ids)`, or runs and step_states joined by status each let a plan
    -- cached on stale statistics (a new queue, a fresh database, a burst: the planner expected
    -- no queued or started rows) scan every task, run or step state of the queue for every batch:
    -- a 3,000-run burst on a fresh database claimed 10 tasks in 80 ms. So each id is looked up on
    -- its own, its run and step state after it, each in a LATERAL ... LIMIT 1 (a lateral
    -- reference orders the join, the LIMIT keeps it from being flattened), and the task is updated
    -- by the row version found (a TID scan; a concurrent change is rechecked against the
    -- conditions below, as with any UPDATE).
    from (select k.tid, k.run_id, k.step_slug, k.task_index
          from (select distinct m from unnest(claim_ids) m where m is not null) i(mid)
          cross join lateral (
            select t2.ctid as tid, t2.run_id, t2.step_slug, t2.task_index from pgflow.step_tasks t2
            where t2.queue_name = q and t2.message_id = i.mid
            limit 1
          ) k
          cross join lateral (
            select 1 from pgflow.runs r where r.run_id = k.run_id and r.status = 'started' limit 1
          ) r
          cross join lateral (
            select 1 from pgflow.step_states ss
            where ss.run_id = k.run_id and ss.step_slug = k.step_slug and ss.status = 'started'
            limit 1
          ) ss) i
    where t.ctid = i.tid
      and t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and t.status = 'queued'
      and sup_keys ? pgflow._pair_key(t.flow_slug, t.step_slug)
    returning t.message_id, t.run_id, t.flow_slug, t.step_slug, t.task_index, t.attempts_count,
              t.rate_scope
  ),
  -- Each step's effective timeout + the claim margin, once per step of the batch.
  timeouts as (
    select p.flow_slug, p.step_slug, o.off
    from (select distinct c.flow_slug, c.step_slug from claimed c) p
    cross join lateral (
      select coalesce(s.opt_timeout, f.opt_timeout) + pgflow._claim_margin() as off
      from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug
      where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug
      limit 1
    ) o
  )
  select array_agg(c.message_id), array_agg(c.flow_slug), array_agg(c.run_id), array_agg(c.step_slug),
         array_agg(c.task_index), array_agg(c.attempts_count),
         array_agg(c.message_id) filter (where o.off is distinct from p_read_visibility),
         array_agg(o.off) filter (where o.off is distinct from p_read_visibility),
         (select count(distinct m)::integer from unnest(msg_ids) m where m is not null),
         array_agg(c.message_id) filter (where c.rate_scope is not null)
  into c_msg, c_flow, c_run, c_step, c_idx, c_att, v_msg, v_off, n_ids, rl_msg
  from claimed c
  join timeouts o on o.flow_slug = c.flow_slug and o.step_slug = c.step_slug;

  -- Rate check: only a batch with rate-limited tasks. Those whose key's window is full go back to
  -- waiting (0262_rate_limits.sql) and leave the claimed set.
  if rl_msg is not null then
    rl_msg := nullif(pgflow._rate_gate(q, rl_msg), '{}');
    if rl_msg is not null then
      select array_agg(c.mid order by c.ord), array_agg(c.flow_slug order by c.ord),
             array_agg(c.run_id order by c.ord), array_agg(c.step_slug order by c.ord),
             array_agg(c.task_index order by c.ord), array_agg(c.attempt order by c.ord)
      into c_msg, c_flow, c_run, c_step, c_idx, c_att
      from unnest(c_msg, c_flow, c_run, c_step, c_idx, c_att) with ordinality
        as c(mid, flow_slug, run_id, step_slug, task_index, attempt, ord)
      where not (c.mid = any (rl_msg));
      select array_agg(v.mid order by v.ord), array_agg(v.off order by v.ord) into v_msg, v_off
      from unnest(v_msg, v_off) with ordinality as v(mid, off, ord)
      where not (v.mid = any (rl_msg));
    end if;
  end if;

  -- Re-arm visibility: hide each claimed message for its effective timeout + the claim margin, and
  -- make sure it happened: a claim whose message is gone would otherwise run with nothing guarding
  -- it. A message the read in this transaction already hid for exactly that long (read_and_claim
  -- reads with the worker's claim_visibility) is left as it is: PGMQ builds and plans every set_vt
  -- again.
  if v_msg is not null then
    select count(*), array_agg(r.msg_id), array_agg(r.vt) into changed, s_ids, s_vts
    from pgflow.set_vt_batch(q, v_msg, v_off) r;
    if changed <> cardinality(v_msg) then
      raise exception 'start_tasks: queue % holds only % of the % claimed messages %', q, changed,
        cardinality(v_msg), v_msg using errcode = '55000';
    end if;
  end if;

  -- Hand back what another live worker serves, and the surplus: costs nothing when every message
  -- read is claimed.
  if coalesce(cardinality(c_msg), 0) + coalesce(cardinality(rl_msg), 0) < n_ids then
    select h.handed, h.vt_ids, h.vts into h_msg, h_vt_ids, h_vts
    from pgflow._hand_back(q, msg_ids, c_msg, sur_msg, sup_keys, _start_tasks.worker_id,
                           p_read_visibility) h;
    s_ids := s_ids || h_vt_ids;
    s_vts := s_vts || h_vts;
  end if;

  -- Set back: a read with the claim's visibility (or, reading past others' messages, with none)
  -- hid the messages neither claimed nor handed back for as long: they get the visibility the
  -- worker asked for, as if read with it.
  if p_unclaimed_visibility is not null
     and coalesce(cardinality(c_msg), 0) + coalesce(cardinality(h_msg), 0)
         + coalesce(cardinality(rl_msg), 0) < n_ids then
    select array_agg(m) into u_msg
    from (select m from unnest(msg_ids) m where m is not null
          except select unnest(c_msg) except select unnest(h_msg) except select unnest(rl_msg)) i;
    select s_ids || array_agg(r.msg_id), s_vts || array_agg(r.vt) into s_ids, s_vts
    from pgflow.set_vt_batch(q, u_msg, array_fill(p_unclaimed_visibility, array[cardinality(u_msg)])) r;
  end if;

  -- Read-past sizing: only a worker that gave a claim limit reads past, and only a read that did
  -- not claim all it read has anything to read past.
  if p_claim_limit is not null and coalesce(cardinality(c_msg), 0) < n_ids then
    next_qty := pgflow._read_past_qty(q, msg_ids, n_ids, sur_msg[1], sup_keys, p_read_qty,
                                      p_claim_limit);
  end if;

  -- Turns (0258_fair_window.sql): in window mode the claimed tasks' places in the queue go to the
  -- tasks waiting for their turn (but for the p_released the read made room for before reading),
  -- a short read releases what it lacked, and a shared queue's cursor follows the reads.
  -- Both looked up in one statement, so that a read on a queue one flow routes to (neither found:
  -- no task there waits for a turn) runs one statement for fairness, full or short.
  select (select c.claimed_msg_id from pgflow.queue_cursors c where c.queue_name = q),
         exists (select 1 from pgflow.fair_windows w where w.queue_name = q)
  into q_cursor, q_window;
  if q_cursor is not null or q_window then
    perform pgflow._take_turns(q, coalesce(cardinality(c_msg), 0) - _start_tasks.p_released, n_ids, p_read_qty,
                               (select max(m) from unnest(msg_ids) m));
  end if;

  -- Answer: one row per distinct id read, in id order.
  return query
  with ids as (select distinct m as mid from unnest(msg_ids) m where m is not null),
  claimed as (
    select * from unnest(c_msg, c_flow, c_run, c_step, c_idx, c_att)
      as c(mid, flow_slug, run_id, step_slug, task_index, attempt)
  )
  select i.mid, null::integer, null::timestamptz, nv.vt, null::jsonb, null::jsonb,
         case
           when c.mid is not null then 'claimed'
           when rl.mid is not null then 'rate_limited'
           when t.run_id is null then 'unknown'
           when sur.mid is not null then 'surplus'
           when h.mid is not null then 'handed_back'
           when not (sup_keys ? pgflow._pair_key(t.flow_slug, t.step_slug)) then 'unsupported'
           when t.status = 'started' then 'started'
           else 'ineligible'
         end,
         -- The task's identity whenever one owns the message (claimed or not), so the worker can
         -- say which flow and step an unclaimed message needs; input and attempt only if claimed.
         coalesce(c.flow_slug, t.flow_slug),
         coalesce(c.run_id, t.run_id),
         coalesce(c.step_slug, t.step_slug),
         coalesce(c.task_index, t.task_index),
         ti.input,
         c.attempt,
         next_qty
  from ids i
  left join claimed c on c.mid = i.mid
  left join unnest(s_ids, s_vts) as nv(mid, vt) on nv.mid = i.mid
  left join unnest(h_msg) as h(mid) on h.mid = i.mid
  left join unnest(sur_msg) as sur(mid) on sur.mid = i.mid
  left join unnest(rl_msg) as rl(mid) on rl.mid = i.mid
  -- A message not claimed: the task that owns it, if any, looked up per id (LIMIT 1: the pair is
  -- unique), as in the claim above: a join let stale statistics scan every task of the queue.
  left join lateral (
    select t.flow_slug, t.run_id, t.step_slug, t.task_index, t.status from pgflow.step_tasks t
    where c.mid is null and t.queue_name = q and t.message_id = i.mid
    limit 1
  ) t on true
  -- Build inputs: the handler input of a claimed task (pgflow._task_input, inlined: this runs once
  -- per claimed task).
  left join lateral (
    select x.input from pgflow._task_input(c.run_id, c.flow_slug, c.step_slug, c.task_index) x(input)
    where c.mid is not null
  ) ti on true
  order by i.mid;
end;
$$;

-- The claim of messages read by a separate call: every claimed message gets set_vt.
create or replace function pgflow.start_tasks(
  queue_name text,
  msg_ids bigint[],
  worker_id uuid,
  supported jsonb
)
returns table (
  message_id bigint,
  disposition text,
  flow_slug text,
  run_id uuid,
  step_slug text,
  task_index integer,
  input jsonb,
  attempt integer
)
language plpgsql
volatile
set search_path = ''
as $$
begin
  return query select c.msg_id, c.disposition, c.flow_slug, c.run_id, c.step_slug, c.task_index,
    c.input, c.attempt
  from pgflow._start_tasks(start_tasks.queue_name, start_tasks.msg_ids, start_tasks.worker_id,
    start_tasks.supported, null, null) c;
end;
$$;

-- ---- schemas/0405_queue_statistics.sql
-- A queue's statistics that say it is empty while it holds a backlog.
--
-- PGMQ's read picks its messages in a CTE and updates them joined on msg_id. Autovacuum analyses a
-- drained queue and records pages but no live rows; the planner then reckons zero rows per page
-- however far the table grows, and plans that join as a walk over the queue's whole index for
-- every read: 35-50 ms to read 10 messages of a 40,000-message burst instead of 0.3 ms, for as long
-- as autovacuum takes to analyse again (up to autovacuum_naptime, a minute by default). Every
-- PGMQ reader of that queue pays it, the real extension included (same statement), so the product
-- cannot plan around it: read_and_claim calls this after a read that returned messages and was
-- slow, and the queue table is analysed when the planner believes in fewer rows than were just
-- read.
--
-- The one statement here that is not PGMQ's public API is ANALYZE of its queue table (statistics
-- only; no row is read or written). It is skipped, never waited for: on a table under 64 pages,
-- where the role may not analyse the table, when the table was analysed in the last second, when
-- another session is already doing it (a try lock on the queue), when the table's lock is held
-- (autovacuum), or when ANALYZE itself fails. Returns whether the table was analysed.
create or replace function pgflow._refresh_queue_statistics(queue_name text, rows_read integer)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  tname text := pgmq.format_table_name(_refresh_queue_statistics.queue_name, 'q');
  rel regclass := pg_catalog.to_regclass(format('pgmq.%I', tname));
  believed float8;
  -- The smallest table worth analysing: walking fewer pages costs well under a millisecond, and a
  -- worker polling a quiet queue (its reads are slow because they wait) would otherwise analyse
  -- it after every time autovacuum found it empty.
  min_pages constant integer := 64;
begin
  if rel is null then
    return false;
  end if;
  -- The planner's own estimate (reltuples per page times the pages the table has now). Never
  -- analysed or vacuumed (reltuples < 0, or no pages counted) it estimates from the row width,
  -- which is not the trouble. Nor is a small table (min_pages).
  select case when c.relpages > 0 and c.reltuples >= 0 and p.pages >= min_pages
              then c.reltuples / c.relpages * p.pages
         end
  into believed
  from pg_catalog.pg_class c
  cross join lateral (
    select pg_catalog.pg_relation_size(c.oid)
           / pg_catalog.current_setting('block_size')::integer as pages
  ) p
  where c.oid = rel and pg_catalog.pg_has_role(c.relowner, 'USAGE');
  if believed is null or believed >= _refresh_queue_statistics.rows_read then
    return false;
  end if;
  if greatest(pg_catalog.pg_stat_get_last_analyze_time(rel),
              pg_catalog.pg_stat_get_last_autoanalyze_time(rel))
     > clock_timestamp() - interval '1 second' then
    return false;
  end if;
  if not pg_catalog.pg_try_advisory_xact_lock(
           pg_catalog.hashtext('pgflow.analyze:' || _refresh_queue_statistics.queue_name)) then
    return false;
  end if;
  begin
    -- ANALYZE waits for autovacuum's lock; this worker's batch must not.
    execute format('lock table pgmq.%I in share update exclusive mode nowait', tname);
    -- The two columns the read filters and orders by; the row count comes with any ANALYZE.
    execute format('analyze pgmq.%I (msg_id, vt)', tname);
  exception
    when lock_not_available then
      return false;
    -- This is an optimisation inside the worker's read: an error of ANALYZE's own must not fail
    -- the read, or the worker would retry the same read and fail it again. A cancel or a
    -- statement_timeout (query_canceled) is not caught by OTHERS and fails the read as it would
    -- anywhere; ANALYZE reads a bounded sample (300 × the statistics target rows), so it takes
    -- well under a second on any queue.
    when others then
      return false;
  end;
  return true;
end;
$$;

-- ---- schemas/0410_read_and_claim.sql
-- Read and claim in one round trip. A worker's poll is pgmq.read_with_poll followed by start_tasks
-- on exactly the ids it returned; run as two calls, every batch waits for two round trips in series
-- before a task starts. This does both in one call and one transaction, against the support set
-- the worker registered (start_tasks(..., supported => NULL)) or, when given, the explicit pairs.
--
-- Every message read is returned once with its id, read count, times and disposition, and the
-- identity of the task that owns it (flow, run, step, index; NULL for a message no task owns), so
-- a worker can say which flow and step an unclaimed message needs. Only claimed rows carry input,
-- attempt, and the message's body and headers (the handler context's rawMessage; a claimed
-- message is the one pgflow sent for the task, so it is small). A message that is not claimed
-- comes back without body or headers (NULL): it may be anything another sender put on the queue,
-- of any size, and every worker on the queue would receive it again at every visibility timeout.
-- It ends as PGMQ's own read leaves it (read_ct and a visibility of visibility_timeout), exactly
-- as with the two calls. Should the claim fail, the read is rolled back with it and the messages
-- stay visible.
--
-- A worker claiming against its registered set reads with its claim_visibility (the timeout + 2 s
-- all its steps shared at registration), when it has one: the messages it claims are then hidden
-- as long as the claim needs and get no set_vt (each PGMQ call builds and plans its statement
-- again), and only the messages it does not claim are set back to visibility_timeout.
--
-- qty is the most tasks the worker claims (its free slots) and, by default, how many messages it
-- reads. read_qty, when larger, is how many it reads instead: the worker was told (next_read_qty,
-- on every row of its last read; see _start_tasks) that its own queued work waits that far behind
-- another worker's backlog at the head of the queue. Such a read is made with visibility 0, so
-- the messages it does not claim are hidden only while this transaction holds them and need no
-- set_vt to be handed back; the ones it claims get theirs (timeout + 2 s), and the others that
-- must stay hidden (no live worker serves them, no task owns them) get visibility_timeout.
--
-- Seq scans are priced out here and in everything it calls (enable_seqscan = off): every row it
-- touches is found by a key, and a worker's session keeps plans made on the statistics of the
-- moment. A plan made while the tables were small (a young database, or one autovacuum has just
-- vacuumed) would scan runs or step states in full for every batch after a burst, until the next
-- ANALYZE (tests/sql/claim_plan_test.ts). Where no index fits, a scan still runs.
create or replace function pgflow.read_and_claim(
  queue_name text,
  worker_id uuid,
  visibility_timeout integer,
  qty integer,
  max_poll_seconds integer default 2,
  poll_interval_ms integer default 50,
  supported jsonb default null,
  read_qty integer default null
)
returns setof pgflow.claim_row
language plpgsql
volatile
set search_path = ''
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
declare
  q text := read_and_claim.queue_name;
  msgs pgmq.message_record[];
  ids bigint[];
  -- How long the read hides what it reads.
  read_vt integer := read_and_claim.visibility_timeout;
  -- How many it reads.
  depth integer := greatest(read_and_claim.qty, coalesce(read_and_claim.read_qty, 0));
  hint integer;
  -- The registered support set, looked up once here for the claim.
  keys jsonb;
  -- Whether the worker's row is on this queue.
  fits boolean;
  read_started timestamptz;
  -- Tasks released for this read before it, as pgflow._start_tasks counts them (NULL: not in
  -- window mode).
  released integer;
begin
  if q is null then
    raise exception 'read_and_claim: queue_name must not be NULL' using errcode = '22004';
  end if;
  if read_and_claim.supported is null then
    -- Before the read: an unregistered worker (PFW01) reads nothing. The worker's row is read
    -- here, and pgflow._registered_claim called only to refuse a worker it does not fit: a call
    -- of that function (a PL/pgSQL call with its settings) cost about 30 µs around an 8 µs lookup,
    -- on every read (bench/results.md, round 29).
    select w.claim_visibility, w.supported_keys, w.queue_name = q into hint, keys, fits
    from pgflow.workers w where w.worker_id = read_and_claim.worker_id;
    if fits is not true then
      perform pgflow._registered_claim(read_and_claim.worker_id, q);
    end if;
    read_vt := coalesce(hint, read_vt);
  end if;
  if depth > read_and_claim.qty then
    read_vt := 0;
  end if;
  -- In window mode (0258_fair_window.sql) a claim releases what its read will take before it
  -- reads, so it reads the tasks whose turn it is (pgflow._release_before_read, which waits for
  -- the queue's turn lock: one claim at a time). Such a read does not wait for messages: it holds
  -- that lock, and what it did not release is released by the short read's own release below.
  if exists (select 1 from pgflow.fair_windows w where w.queue_name = q) then
    released := pgflow._release_before_read(q, depth);
  end if;
  read_started := clock_timestamp();
  if read_and_claim.max_poll_seconds = 0 or released is not null then
    -- A worker woken by notifications reads once without waiting: it waits for the next
    -- notification itself (read_with_poll with no time left returns before reading at all).
    select array_agg(m order by m.msg_id), array_agg(m.msg_id order by m.msg_id)
    into msgs, ids
    from pgmq.read(q, read_vt, depth) m;
  else
    select array_agg(m order by m.msg_id), array_agg(m.msg_id order by m.msg_id)
    into msgs, ids
    from pgmq.read_with_poll(q, read_vt, depth,
                             read_and_claim.max_poll_seconds, read_and_claim.poll_interval_ms) m;
  end if;
  if ids is null then
    -- An empty queue with tasks waiting for their turn (0258_fair_window.sql): release a read's
    -- worth for the next read. Only a queue with a cursor or a window has such tasks.
    if exists (select 1 from pgflow.queue_cursors c where c.queue_name = q)
       or exists (select 1 from pgflow.fair_windows w where w.queue_name = q) then
      perform pgflow._take_turns(q, 0, 0, depth);
    end if;
    return;
  end if;
  -- A slow read (pgflow._slow_read), full or not, may be planned on statistics that say the queue
  -- is empty (0405_queue_statistics.sql). A read that polled is slow too, and then only costs the
  -- look at the statistics.
  if clock_timestamp() - read_started > pgflow._slow_read() then
    perform pgflow._refresh_queue_statistics(q, cardinality(ids));
  end if;

  return query
  -- The visibility the message ends with: set by the claim (claimed, or set back) or by the read.
  select m.msg_id, m.read_ct, m.enqueued_at, coalesce(c.vt, m.vt),
         case when c.disposition = 'claimed' then m.message end,
         -- to_jsonb: PGMQ before 1.5 has no headers column; a claimed row only, never a foreign body.
         case when c.disposition = 'claimed' then to_jsonb(m) -> 'headers' end,
         c.disposition, c.flow_slug, c.run_id, c.step_slug, c.task_index, c.input, c.attempt,
         c.next_read_qty
  from unnest(msgs) m
  join pgflow._start_tasks(q, ids, read_and_claim.worker_id, read_and_claim.supported, read_vt,
                           case when read_vt <> read_and_claim.visibility_timeout
                                then read_and_claim.visibility_timeout end, keys,
                           depth, read_and_claim.qty, coalesce(released, 0)) c
    on c.msg_id = m.msg_id
  order by m.msg_id;

  -- start_tasks stamps started_at with now(), the start of this transaction, which is when the
  -- read began waiting. When the read waited long enough to matter, stamp the tasks claimed here
  -- (started_at = now() singles them out; last_worker_id is NULL for a worker with no row, see
  -- start_tasks) with the time they really started, so stalled recovery measures from there.
  if clock_timestamp() - now() > pgflow._late_start() then
    -- Each id looked up on its own and the task updated by the row version found, as in
    -- start_tasks: a join could scan the queue's every task.
    update pgflow.step_tasks t
    set started_at = clock_timestamp()
    -- The status is checked on the row found, not in the update's conditions: there it would let
    -- the planner walk every started task through step_tasks_started_idx.
    from (select k.tid, k.run_id, k.step_slug, k.task_index
          from unnest(ids) i(mid)
          cross join lateral (
            select t2.ctid as tid, t2.run_id, t2.step_slug, t2.task_index, t2.status
            from pgflow.step_tasks t2
            where t2.queue_name = q and t2.message_id = i.mid
            limit 1
          ) k
          where k.status = 'started') i
    where t.ctid = i.tid
      and t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and (t.last_worker_id = read_and_claim.worker_id or t.last_worker_id is null)
      and t.started_at = now();
  end if;
end;
$$;

-- Report a batch and take the next in one round trip. A busy worker finishes a batch and has as
-- many free slots as it had tasks: it would send complete_tasks on one connection and
-- read_and_claim on another, two transactions and two durable commits per batch, each call paying
-- the fixed cost of a round trip. This does both in one transaction, in that order: exactly
-- pgflow.complete_tasks (same checks, same idempotence; a late or duplicate completion changes
-- nothing), then exactly pgflow.read_and_claim without waiting (max_poll_seconds 0; the worker
-- waits for a notification or polls again itself when the read comes back short). It returns the
-- read's rows.
--
-- Completions first: a step completed here that makes a dependent ready sends its message before
-- the read, so a worker serving the next step on the same queue claims it in this same call.
-- Should any part fail, nothing of it happens: the worker reports and reads again separately.
create or replace function pgflow.complete_and_claim(
  run_ids uuid[],
  step_slugs text[],
  task_indexes integer[],
  outputs jsonb[],
  attempts integer[],
  queue_name text,
  worker_id uuid,
  visibility_timeout integer,
  qty integer,
  supported jsonb default null,
  read_qty integer default null
)
returns setof pgflow.claim_row
language plpgsql
volatile
set search_path = ''
as $$
begin
  -- On a queue in window mode the read waits for the queue's turn lock
  -- (pgflow._release_before_read); the completions come first, outside it, so claims there take
  -- turns only for their release, read and claim. Waiting for the lock while holding what the
  -- completions locked closes no cycle, because the holder, past its own completions, never
  -- waits for such a row: its claim updates only tasks queued in its snapshot whose messages it
  -- read and holds; a completion that fails a run archives the run's messages before it cancels
  -- their tasks (pgflow._fail_run), so it waits for the holder's read instead of holding a task the
  -- holder claims; the rest (runs, step states, its own started tasks, new tasks not yet
  -- committed) no claim locks; limited tasks are released at commit, not here.
  perform count(*) from pgflow.complete_tasks(complete_and_claim.run_ids, complete_and_claim.step_slugs,
    complete_and_claim.task_indexes, complete_and_claim.outputs, complete_and_claim.attempts);
  return query select * from pgflow.read_and_claim(complete_and_claim.queue_name, complete_and_claim.worker_id,
    complete_and_claim.visibility_timeout, complete_and_claim.qty, 0, 50, complete_and_claim.supported,
    complete_and_claim.read_qty);
end;
$$;

-- ---- schemas/0500_complete_task.sql
-- Completing tasks: complete_tasks is the one entry point that completes anything; complete_task
-- (one task, for operators and tests) and complete_and_claim (a worker's batch with its next read,
-- 0410_read_and_claim.sql) call it.
--
-- Late or duplicate completions (the task is no longer started, or its run has moved on) change
-- nothing and raise nothing. The caller passes the attempt it ran (start_tasks and read_and_claim
-- return it with the task): a report for an older attempt (its reply was lost, and the task has
-- since been claimed again) is late too, so it can never complete or fail the attempt that is
-- running now. The attempt is required: a report without one cannot be told from a late one, so it
-- would complete whichever attempt happens to be running. The parameter keeps its NULL default only
-- so that a call without it gets this explanation instead of "function does not exist"; an operator
-- completing a task by hand passes step_tasks.attempts_count.

-- Any number of completions in one call and one transaction, done as a handful of set-based
-- statements whatever the batch's size (lock the runs, complete the tasks, count them off their
-- steps, release the dependents of the steps that completed, count those off their runs, archive
-- the messages once per queue); returns the tasks it completed. Runs are locked in run_id order, so two
-- batches that share runs wait for each other instead of deadlocking; the run lock orders every
-- state change of one run (completions, failures, stalled recovery).
-- Times are stamped after the locks are taken (clock_timestamp(), see 0300_start_flow.sql): a
-- batch that waited for one run's lock must not date its changes to another run before changes
-- committed on that run while it waited.
--
-- The tasks of a batch complete together, then their steps, then the runs; a run that has a step
-- ready after that gets one ready-step pass (a pass leaves no ready step behind, so no other run
-- can be waiting for one). Completions of one run in one batch are therefore applied as one: were
-- that pass to fail the run (a condition with whenUnmet 'fail', a map over a non-array), the
-- batch's other tasks of the run stay completed rather than cancelled, as if they had reported
-- first.
--
-- Cost. Each statement a call runs costs a plan lookup and an executor start whatever the batch's
-- size, and under load that fixed cost is most of a batch's; so a batch runs as few as it can: the
-- dependents' release only when a finished step has dependents, and the archive in one call when
-- the batch has one queue.
--
-- Plans. A worker's session keeps plpgsql's generic plans, made on the statistics of the moment:
-- on a young database (tables never analysed count as ten pages) or one just vacuumed, a plan
-- that scans runs or step states in full, or hashes them, is the cheapest, and stays in use after
-- a burst has made them large, until autovacuum analyses them. So every row here is found by its
-- key, in a nested loop driven by the batch: seq scans are priced out for this function (it only
-- ever needs keyed rows; where no index fits, a scan still runs), generic plans are used from the
-- first call (a custom plan per call costs more than the statement), and no statement that looks a
-- task up by its key also names its status: the planner could then walk every started task
-- through the partial index step_tasks_started_idx (its statistics say few tasks are started; a
-- busy queue has thousands) instead of the primary key. The status is checked on the row found.
create or replace function pgflow.complete_tasks(
  run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[] default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
declare
  locked uuid[];
  done pgflow.step_tasks[];
  queues text[];
  f_runs uuid[];
  f_flows text[];
  f_steps text[];
  releases boolean;
  ready_runs uuid[];
  ready_run uuid;
  -- The plain steps the release started, in (run, step index) order.
  started_runs uuid[];
  started_flows text[];
  started_steps text[];
  grp record;
  missing integer;
begin
  if cardinality(run_ids) is distinct from cardinality(step_slugs)
     or cardinality(run_ids) is distinct from cardinality(task_indexes)
     or cardinality(run_ids) is distinct from cardinality(outputs)
     or cardinality(run_ids) is distinct from cardinality(attempts) then
    raise exception 'complete_tasks: % run ids, % step slugs, % task indexes, % outputs and % attempts',
      cardinality(run_ids), cardinality(step_slugs), cardinality(task_indexes), cardinality(outputs),
      coalesce(cardinality(attempts)::text, 'no')
      using errcode = '22023', hint = 'pass one run id, step slug, task index, output and attempt per task (the attempt is required, as in complete_task)';
  end if;
  missing := array_position(attempts, null);
  if missing is not null then
    raise exception 'complete_task: attempt is required (task % [%] of run %)', step_slugs[missing],
      task_indexes[missing], run_ids[missing]
      using errcode = '22004',
        hint = 'pass the attempt start_tasks or read_and_claim returned with the task; without it a late report could complete a newer attempt';
  end if;
  select array_agg(l.run_id order by l.run_id) into locked
  from (select distinct u.id from unnest(run_ids) u(id) where u.id is not null order by u.id) i
  cross join lateral (
    select r.run_id from pgflow.runs r where r.run_id = i.id and r.status = 'started' limit 1 for update
  ) l;
  if locked is null then
    return;
  end if;

  -- Under the run locks, a started task of the attempt reported is completed; a task named twice
  -- completes once, with the first report of the attempt that is running. The task is updated by
  -- the row version found, so a change since (none can come without the run lock) leaves it alone.
  with completed as (
    update pgflow.step_tasks t
    set status = 'completed', completed_at = clock_timestamp(), output = i.output
    from (select distinct on (u.run_id, u.step_slug, u.task_index)
                 k.tid, u.run_id, u.step_slug, u.task_index, u.output
          from unnest(run_ids, step_slugs, task_indexes, outputs, attempts)
               with ordinality as u(run_id, step_slug, task_index, output, attempt, ord)
          cross join lateral (
            select t2.ctid as tid, t2.status, t2.attempts_count from pgflow.step_tasks t2
            where t2.run_id = u.run_id and t2.step_slug = u.step_slug and t2.task_index = u.task_index
            limit 1
          ) k
          where u.run_id = any (locked) and k.status = 'started' and k.attempts_count = u.attempt
          order by u.run_id, u.step_slug, u.task_index, u.ord) i
    where t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and t.ctid = i.tid
    returning t.*
  )
  select array_agg(c::pgflow.step_tasks), array_agg(distinct c.queue_name) into done, queues
  from completed c;
  if done is null then
    return;
  end if;

  -- Count the tasks off their steps; a step whose last task this was completes in the same
  -- statement. A map step's output is its tasks' outputs in index order (this batch's outputs are
  -- stored already); CASE evaluates the aggregate only for a map's last task.
  with finished as (
    update pgflow.step_states ss
    set remaining_tasks = ss.remaining_tasks - p.n,
        status = case when ss.remaining_tasks = p.n then 'completed' else ss.status end,
        completed_at = case when ss.remaining_tasks = p.n then clock_timestamp() else ss.completed_at end,
        output = case
          when ss.remaining_tasks <> p.n then ss.output
          when p.step_type = 'map' then
            (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
             where t.run_id = p.run_id and t.step_slug = p.step_slug)
          else p.output
        end
    from (select d.run_id, d.step_slug, d.n, d.output, s.step_type, s.releases
          from (select d.run_id, d.flow_slug, d.step_slug, count(*) as n, (array_agg(d.output))[1] as output
                from unnest(done) d group by d.run_id, d.flow_slug, d.step_slug) d
          cross join lateral (
            select s2.step_type,
                   exists (select 1 from pgflow.deps dd
                           where dd.flow_slug = s2.flow_slug and dd.dep_slug = s2.step_slug) as releases
            from pgflow.steps s2
            where s2.flow_slug = d.flow_slug and s2.step_slug = d.step_slug limit 1
          ) s) p
    where ss.run_id = p.run_id and ss.step_slug = p.step_slug
    returning ss.run_id, ss.flow_slug, ss.step_slug, ss.remaining_tasks, p.releases
  )
  select array_agg(f.run_id), array_agg(f.flow_slug), array_agg(f.step_slug), bool_or(f.releases)
  into f_runs, f_flows, f_steps, releases
  from finished f where f.remaining_tasks = 0;

  if f_runs is not null then
    if releases then
      -- Release the dependents of the steps that completed. Only a dependent that still waits
      -- ('created') counts: one that a cascade skipped, or that a resume took over from its source
      -- run, waits for nothing, and counting it down would take its counter below zero.
      --
      -- A dependent that becomes ready starts in this same statement when it is plain (one task,
      -- no condition, a handler's step: a chain's next step), as pgflow._start_ready_steps would
      -- start it and as start_flow starts plain roots; its task is sent below. A run where any
      -- step becoming ready is not plain (a map, a condition, a child flow, an event or sleep: each
      -- may skip steps or fail the run) starts none here and gets the ready-step pass, which starts
      -- all of them in step order as before. Started here, the step's row is updated once in this
      -- transaction, not twice: a second update of a row this transaction wrote checks its foreign
      -- keys again, and the pass costs a plan lookup for each of its statements.
      with released as (
        update pgflow.step_states ss
        set remaining_deps = ss.remaining_deps - r.n,
            status = case when r.start then 'started' else ss.status end,
            started_at = case when r.start then clock_timestamp() else ss.started_at end,
            initial_tasks = case when r.start then 1 else ss.initial_tasks end,
            remaining_tasks = case when r.start then 1 else ss.remaining_tasks end
        from (select g.run_id, g.step_slug, g.n, g.step_index,
                     g.ready and bool_and(g.plain or not g.ready) over (partition by g.run_id) as start
              from (select c.run_id, c.step_slug, c.n, s.step_index, w.remaining_deps = c.n as ready,
                           s.kind = 'task' and s.step_type = 'single' and s.required_input_pattern is null
                             and s.forbidden_input_pattern is null as plain
                    from (select f.run_id, f.flow_slug, d.step_slug, count(*) as n
                          from unnest(f_runs, f_flows, f_steps) as f(run_id, flow_slug, step_slug)
                          join pgflow.deps d on d.flow_slug = f.flow_slug and d.dep_slug = f.step_slug
                          group by f.run_id, f.flow_slug, d.step_slug) c
                    cross join lateral (
                      select s2.step_index, s2.kind, s2.step_type, s2.required_input_pattern,
                             s2.forbidden_input_pattern
                      from pgflow.steps s2 where s2.flow_slug = c.flow_slug and s2.step_slug = c.step_slug
                      limit 1
                    ) s
                    cross join lateral (
                      select w2.remaining_deps from pgflow.step_states w2
                      where w2.run_id = c.run_id and w2.step_slug = c.step_slug and w2.status = 'created'
                      limit 1
                    ) w) g) r
        where ss.run_id = r.run_id and ss.step_slug = r.step_slug and ss.status = 'created'
        returning ss.run_id, ss.flow_slug, ss.step_slug, ss.remaining_deps, ss.status, r.step_index
      )
      select array_agg(distinct r.run_id order by r.run_id)
               filter (where r.remaining_deps = 0 and r.status = 'created'),
             array_agg(r.run_id order by r.run_id, r.step_index) filter (where r.status = 'started'),
             array_agg(r.flow_slug order by r.run_id, r.step_index) filter (where r.status = 'started'),
             array_agg(r.step_slug order by r.run_id, r.step_index) filter (where r.status = 'started')
      into ready_runs, started_runs, started_flows, started_steps
      from released r;
    end if;

    -- Count the steps off their runs; a run's last step completes it with the outputs of its
    -- completed leaf steps. Every run here is started: its lock is held and it was checked.
    update pgflow.runs r
    set remaining_steps = r.remaining_steps - c.n,
        status = case when r.remaining_steps = c.n then 'completed' else r.status end,
        completed_at = case when r.remaining_steps = c.n then clock_timestamp() else r.completed_at end,
        -- Inlined (0090_inline_helpers.sql): this runs for every run a batch completes (every
        -- task of a single-step flow; bench/results.md, round 12).
        output = case when r.remaining_steps = c.n
                      then (select o from pgflow._run_output(c.run_id) o) else r.output end
    from (select f.run_id, count(*) as n from unnest(f_runs) as f(run_id) group by f.run_id) c
    where r.run_id = c.run_id;

    -- The tasks of the plain steps started above, each sent as the ready-step pass would send it.
    for i in 1 .. coalesce(cardinality(started_runs), 0) loop
      perform pgflow._send_task_messages(started_runs[i], started_flows[i], array[started_steps[i]], array[1]);
    end loop;
    if ready_runs is not null then
      foreach ready_run in array ready_runs loop
        perform pgflow._start_ready_steps(ready_run);
      end loop;
    end if;
  end if;

  -- The messages of the completed tasks, one pgmq.archive call per queue (each PGMQ call builds
  -- and plans its statement again).
  if cardinality(queues) = 1 then
    perform pgmq.archive(queues[1], (select array_agg(d.message_id order by d.message_id)
                                     from unnest(done) d where d.message_id is not null));
  else
    for grp in
      select d.queue_name as q, array_agg(d.message_id order by d.message_id) as ids
      from unnest(done) d where d.message_id is not null group by d.queue_name
    loop
      perform pgmq.archive(grp.q, grp.ids);
    end loop;
  end if;
  return query select * from unnest(done);
end;
$$;

-- One task: exactly complete_tasks with one entry.
create or replace function pgflow.complete_task(
  run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer default null
)
returns setof pgflow.step_tasks
language sql
volatile
set search_path = ''
as $$
  select * from pgflow.complete_tasks(array[complete_task.run_id], array[complete_task.step_slug],
    array[complete_task.task_index], array[complete_task.output], array[complete_task.attempt])
$$;

-- ---- schemas/0510_fail_task.sql
-- Keeps one ended attempt of a task in the history: the task row as it was when the attempt ended
-- (its attempt number, worker and start time). Errors are bounded as the table requires.
create or replace function pgflow._record_attempt(
  p_task pgflow.step_tasks, p_outcome text, p_error text, p_stack text
)
returns void
language sql
volatile
set search_path = ''
as $$
  insert into pgflow.task_attempts (run_id, step_slug, task_index, attempt, worker_id, started_at,
                                    outcome, error_message, error_stack)
  values (p_task.run_id, p_task.step_slug, p_task.task_index, greatest(p_task.attempts_count, 1),
          p_task.last_worker_id, p_task.started_at, p_outcome, left(p_error, 2000), left(p_stack, 4000))
  on conflict on constraint task_attempts_pkey do nothing
$$;

-- Failing a task: retry with exponential backoff on the task's own queue snapshot while attempts
-- remain and its message is still there; then the step's whenExhausted decides: fail the step and
-- the run, or skip the step (skip-cascade: and its dependents). The attempt that ended is kept in
-- pgflow.task_attempts with its outcome (failed, or stalled for stalled recovery), worker, times,
-- error and stack. The caller holds the run's lock.
create or replace function pgflow._task_failed(
  p_run_id uuid, p_step_slug text, p_task_index integer, p_error text, p_retry_delay integer,
  p_outcome text default 'failed', p_stack text default null
)
returns pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  task pgflow.step_tasks;
  max_attempts integer;
  base_delay integer;
  when_exhausted text;
begin
  select t.* into task from pgflow.step_tasks t
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index;
  select coalesce(s.opt_max_attempts, f.opt_max_attempts), coalesce(s.opt_base_delay, f.opt_base_delay),
         s.when_exhausted
  into max_attempts, base_delay, when_exhausted
  from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug
  where s.flow_slug = task.flow_slug and s.step_slug = task.step_slug;

  -- Deferred and interrupted attempts (0515) do not count: maxAttempts and the backoff see only
  -- the attempts that ran to a failure.
  if task.attempts_count - task.uncounted_attempts < max_attempts then
    -- base_delay * 2^(attempt - 1): the first retry waits base_delay, each later one twice as long.
    -- The message is made visible again first, and the retry happens only if PGMQ still had it: a
    -- message purged or deleted outside pgflow would leave the task queued with nothing to claim,
    -- and its run waiting forever.
    perform 1 from pgmq.set_vt(task.queue_name, task.message_id, coalesce(p_retry_delay,
      least(base_delay::numeric * power(2::numeric, task.attempts_count - task.uncounted_attempts - 1),
            2147483647)::integer));
    if found then
      perform pgflow._record_attempt(task, p_outcome, p_error, p_stack);
      update pgflow.step_tasks t
      set status = 'queued', error_message = p_error, queued_at = now()
      where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index
      returning * into task;
      return task;
    end if;
    -- Nothing can deliver a retry: the attempts end here, visibly, with the reason.
    p_error := format('%s; not retried: its message %s is gone from queue %s (purged or deleted outside pgflow)',
                      p_error, task.message_id, task.queue_name);
    raise warning 'pgflow: task %.% [%] of run %: %', task.flow_slug, task.step_slug, task.task_index, task.run_id, p_error;
  end if;

  perform pgflow._record_attempt(task, p_outcome, p_error, p_stack);
  update pgflow.step_tasks t
  set status = 'failed', error_message = p_error, failed_at = clock_timestamp()
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index
  returning * into task;
  if when_exhausted = 'fail' then
    perform pgflow._fail_run(p_run_id, p_step_slug, p_error);
  else
    -- The step gives up without failing the run: skipped, with the last error kept on it.
    update pgflow.step_states ss set error_message = p_error
    where ss.run_id = p_run_id and ss.step_slug = p_step_slug;
    perform pgflow._skip_step(p_run_id, p_step_slug, 'handler_failed', when_exhausted = 'skip-cascade');
    perform pgflow._start_ready_steps(p_run_id);
  end if;
  return task;
end;
$$;

-- Like complete_task, a report for an attempt other than the current one is late and changes
-- nothing, and the attempt is required (see complete_task). error_stack (the handler error's stack
-- trace, at most 4,000 characters kept) goes to the attempt's history row only. fail_run: the run
-- fails at once with this error, no retry and no whenExhausted (a run input that fails its schema).
-- outcome: 'failed' (the default: the attempt counts), or an attempt that does not count toward
-- maxAttempts (pgflow._task_uncounted): 'deferred' (the handler asked to be retried after
-- retry_delay seconds, e.g. an HTTP 429's Retry-After) or 'interrupted' (its worker shut down
-- under it; retried at once). retry_delay replaces the backoff, in whole seconds.
create or replace function pgflow.fail_task(
  run_id uuid, step_slug text, task_index integer, error_message text, attempt integer default null,
  error_stack text default null, fail_run boolean default false, outcome text default 'failed',
  retry_delay integer default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  run pgflow.runs;
  task pgflow.step_tasks;
begin
  if fail_task.attempt is null then
    raise exception 'fail_task: attempt is required (task % [%] of run %)', fail_task.step_slug,
      fail_task.task_index, fail_task.run_id
      using errcode = '22004',
        hint = 'pass the attempt start_tasks or read_and_claim returned with the task; without it a late report could fail a newer attempt';
  end if;
  if fail_task.outcome is null or fail_task.outcome not in ('failed', 'deferred', 'interrupted') then
    raise exception 'fail_task: outcome must be failed, deferred or interrupted, not %',
      coalesce(quote_literal(fail_task.outcome), 'NULL')
      using errcode = '22023', hint = 'pass failed, or one of the attempts that do not count';
  end if;
  if fail_task.retry_delay is not null
     and fail_task.retry_delay not between 0 and pgflow._max_retry_delay() then
    raise exception 'fail_task: retry_delay must be 0 to % seconds, not %', pgflow._max_retry_delay(),
      fail_task.retry_delay
      using errcode = '22023', hint = 'a handler that must wait longer should fail, or start a new run later';
  end if;
  if fail_task.outcome = 'deferred' and fail_task.retry_delay is null then
    raise exception 'fail_task: a deferred attempt needs its retry_delay' using errcode = '22004';
  end if;
  select * into run from pgflow.runs r where r.run_id = fail_task.run_id for update;
  if not found or run.status <> 'started' then
    return;
  end if;
  select * into task from pgflow.step_tasks t
  where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index
  for update;
  if not found or task.status <> 'started' or task.attempts_count <> fail_task.attempt then
    return;
  end if;
  if fail_task.fail_run then
    perform pgflow._record_attempt(task, 'failed', fail_task.error_message, fail_task.error_stack);
    update pgflow.step_tasks t
    set status = 'failed', error_message = left(fail_task.error_message, 2000), failed_at = clock_timestamp()
    where t.run_id = task.run_id and t.step_slug = task.step_slug and t.task_index = task.task_index
    returning * into task;
    perform pgflow._fail_run(task.run_id, task.step_slug, coalesce(fail_task.error_message, 'unknown error'));
    return next task;
    return;
  end if;
  if fail_task.outcome <> 'failed' then
    return next pgflow._task_uncounted(task, fail_task.outcome,
                                       coalesce(fail_task.error_message, 'unknown error'),
                                       fail_task.error_stack, coalesce(fail_task.retry_delay, 0));
    return;
  end if;
  return next pgflow._task_failed(task.run_id, task.step_slug, task.task_index,
                                  coalesce(fail_task.error_message, 'unknown error'),
                                  fail_task.retry_delay, 'failed', fail_task.error_stack);
end;
$$;

-- ---- schemas/0515_uncounted_attempts.sql
-- Attempts that do not count toward maxAttempts. A handler that was told "not now" (HTTP 429 with
-- Retry-After) did nothing wrong, and neither did one whose worker shut down under it: neither
-- should bring its task closer to failing. Each is still an attempt in the history, with its own
-- outcome, so an operator sees it.

-- The longest retry delay a handler may ask for, in seconds (one day). A server asking for more is
-- not a rate limit a task should sit out holding its concurrency; the worker refuses it when the
-- handler builds the error, and fail_task refuses it from anyone else.
create or replace function pgflow._max_retry_delay()
returns integer
language sql
immutable
parallel safe
set search_path = ''
as $$ select 86400 $$;

-- How many attempts of one task may end uncounted, per outcome. Without a bound a handler that
-- always defers, or always outlives its worker (an Edge isolate's wall clock), would be retried for
-- ever; past it, each such attempt counts as a failed one, with an error naming the bound.
create or replace function pgflow._max_uncounted(p_outcome text)
returns integer
language sql
immutable
parallel safe
set search_path = ''
as $$ select case p_outcome when 'deferred' then 100 when 'interrupted' then 10 end $$;

-- Ends a started attempt without counting it: its message is made visible again after p_delay
-- seconds, the attempt is kept in the history with p_outcome ('deferred' or 'interrupted'), and
-- the task is queued with the same number of counted attempts. Past the bound of its outcome, or
-- with its message gone, the attempt is failed as a counted one (pgflow._task_failed) with the
-- reason, retried after the same delay while attempts remain. The caller holds the run's lock and
-- has checked that the attempt is the task's current, started one.
create or replace function pgflow._task_uncounted(
  p_task pgflow.step_tasks, p_outcome text, p_error text, p_stack text, p_delay integer
)
returns pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  task pgflow.step_tasks := p_task;
  so_far integer;
begin
  -- Counted in the history rather than on the task: it is only read here, on a path that is rare.
  select count(*) into so_far from pgflow.task_attempts a
  where a.run_id = task.run_id and a.step_slug = task.step_slug and a.task_index = task.task_index
    and a.outcome = p_outcome;
  if so_far >= pgflow._max_uncounted(p_outcome) then
    return pgflow._task_failed(task.run_id, task.step_slug, task.task_index,
      format('%s %s times, the most one task may be without it counting as a failed attempt; %s',
             p_outcome, so_far, p_error), p_delay, 'failed', p_stack);
  end if;
  perform 1 from pgmq.set_vt(task.queue_name, task.message_id, p_delay);
  if not found then
    -- _task_failed says why nothing can deliver a retry.
    return pgflow._task_failed(task.run_id, task.step_slug, task.task_index, p_error, p_delay,
                               'failed', p_stack);
  end if;
  perform pgflow._record_attempt(task, p_outcome, p_error, p_stack);
  update pgflow.step_tasks t
  set status = 'queued', uncounted_attempts = t.uncounted_attempts + 1, queued_at = now()
  where t.run_id = task.run_id and t.step_slug = task.step_slug and t.task_index = task.task_index
  returning * into task;
  return task;
end;
$$;

-- ---- schemas/0520_requeue_stalled_tasks.sql
-- Stalled recovery: a task started more than its effective timeout + 30 s ago, in a started run and
-- step, counts as a failed attempt. While attempts remain it becomes queued and its message visible
-- at once; otherwise its step and run fail, so nothing stays started forever. Safe to call from
-- several connections at once: runs locked by another caller are skipped, not waited for.
create or replace function pgflow.requeue_stalled_tasks()
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  cand record;
  handled integer := 0;
begin
  for cand in
    select t.run_id, t.step_slug, t.task_index, coalesce(s.opt_timeout, f.opt_timeout) as timeout
    from pgflow.step_tasks t
    join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    join pgflow.flows f on f.flow_slug = t.flow_slug
    where t.status = 'started'
      -- A task waiting for its child run (0290_child_flows.sql) has no attempt to take back.
      and t.child_run_id is null
      and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout)
                                                        + pgflow._stalled_margin())
    order by t.started_at
  loop
    perform 1 from pgflow.runs r where r.run_id = cand.run_id and r.status = 'started'
    for update skip locked;
    continue when not found;
    -- Re-check under the run lock: a completion may have won the race.
    perform 1 from pgflow.step_tasks t
    join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
    where t.run_id = cand.run_id and t.step_slug = cand.step_slug and t.task_index = cand.task_index
      and t.status = 'started' and ss.status = 'started'
      and t.started_at < now() - make_interval(secs => cand.timeout + pgflow._stalled_margin());
    continue when not found;
    perform pgflow._task_failed(cand.run_id, cand.step_slug, cand.task_index,
      format('stalled: no completion within %s s (timeout + %s s)', cand.timeout + pgflow._stalled_margin(),
             pgflow._stalled_margin()), 0, 'stalled');
    handled := handled + 1;
  end loop;
  return handled;
end;
$$;

-- ---- schemas/0530_cancel_run.sql
-- Cancelling a run: an operator ends a started run as 'cancelled'. Nothing of it runs again: its
-- queued and started tasks become 'cancelled' and their messages are archived by their exact
-- (queue, message id) snapshots, so on a shared queue no other flow's message and no unknown
-- message is touched; its waiting tasks (flow control) become 'cancelled' too, with nothing to
-- archive; its unfinished steps become 'cancelled'. A worker running one of its tasks
-- learns it (its handler's abort signal fires) and its report is then late: complete_tasks and
-- fail_task change nothing for a run that is not started. A run that already ended is left as it
-- is, and the answer says what it is (cancelled = false); calling this again is harmless.
--
-- security definer, like start_flow: service_role (0900_privileges) can cancel without write
-- access to pgflow's tables or to PGMQ's queues.
-- What cancel_run answers (a type of its own: its columns may not share the parameter's name).
do $$
begin
  create type pgflow.cancel_result as (run_id uuid, flow_slug text, status text, cancelled boolean);
exception when duplicate_object then
  null;
end
$$;

create or replace function pgflow.cancel_run(run_id uuid, reason text default null)
returns pgflow.cancel_result
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  run pgflow.runs;
  started pgflow.step_tasks;
  -- One time for the run and its steps: the cancel is one event.
  at timestamptz;
begin
  -- A run's started descendants (child flows) first, deepest first: a child's end locks the child
  -- and then its parent, so a cancel that took the parent first could deadlock with it. A run
  -- that is no one's parent costs one probe of the partial index on parent_run_id.
  perform 1
  from (with recursive d(run_id, depth) as (
          select c.run_id, 1 from pgflow.runs c
          where c.parent_run_id = cancel_run.run_id and c.status = 'started'
          union all
          select c.run_id, d.depth + 1 from pgflow.runs c join d on c.parent_run_id = d.run_id
          where c.status = 'started')
        select d.run_id, d.depth from d) x
  join pgflow.runs r on r.run_id = x.run_id
  order by x.depth desc, x.run_id
  for update of r;
  select * into run from pgflow.runs r where r.run_id = cancel_run.run_id for update;
  if not found then
    raise exception 'run % does not exist', coalesce(cancel_run.run_id::text, 'NULL')
      using errcode = 'P0002', hint = 'check the run id (pgflow.list_runs lists runs)';
  end if;
  if run.status <> 'started' then
    return (run.run_id, run.flow_slug, run.status, false)::pgflow.cancel_result;
  end if;

  at := clock_timestamp();
  update pgflow.runs r
  set status = 'cancelled', cancelled_at = at, cancel_reason = left(cancel_run.reason, 2000)
  where r.run_id = run.run_id;
  update pgflow.step_states ss
  set status = 'cancelled', cancelled_at = at
  where ss.run_id = run.run_id and ss.status in ('created', 'started');

  -- Waiting tasks first: they have no message, and a release holding one commits its message
  -- before the archive below reads it (0260_flow_control.sql). Then messages, then task rows (the
  -- order _fail_run keeps: a claim holds a message row while it claims the task row). A claim that
  -- won a message before this lock is a started task here.
  update pgflow.step_tasks t set status = 'cancelled' where t.run_id = run.run_id and t.status = 'waiting';
  perform pgflow._archive_task_messages(run.run_id, array['queued', 'started']);
  for started in
    select * from pgflow.step_tasks t where t.run_id = run.run_id and t.status = 'started'
  loop
    perform pgflow._record_attempt(started, 'cancelled',
      'run cancelled' || coalesce(': ' || cancel_run.reason, ''), null);
  end loop;
  update pgflow.step_tasks t
  set status = 'cancelled'
  where t.run_id = run.run_id and t.status in ('queued', 'started');

  return (run.run_id, run.flow_slug, 'cancelled', true)::pgflow.cancel_result;
end;
$$;

-- ---- schemas/0540_restart_run.sql
-- Starting a run again. Both make a NEW run of the same concrete flow with the same input (retry_run
-- may be given a corrected one instead) and leave the source run exactly as it was; the new run records its source (restart_of_run_id) and how it
-- was made (restart_mode). Only a run that failed or was cancelled can be restarted. Its tasks follow
-- the flow's persisted routes, as any run's do. Neither resolves an alias: the source's flow slug
-- is a concrete slug, and a version whose slug is also an alias's name is still that version.
--
-- retry_run runs everything again, with the source's input or, when input is given (not SQL NULL),
-- with that one: a run that failed on bad input is run again with the input corrected, and stays
-- linked to it. resume_run never takes another input: what it reuses was computed from the
-- source's. resume_run takes over what the source finished and what was built on it, and runs the
-- rest:
--   * every completed step is taken over as completed (reused = true, its output kept);
--   * every skipped step that a completed step depends on, directly or through other steps, is
--     taken over as skipped (reused, its skip reason and error kept): the completed step was
--     computed without its output, and a resumed run holds exactly what its reused steps saw;
--   * every other step runs again: failed, cancelled and unfinished steps, and skipped steps that
--     nothing completed was built on (a step skipped because its handler failed gets another
--     attempt, a condition is decided again, a cascade of skips is applied again if its cause
--     skips again);
--   * of a map step that runs again, every completed task is taken over when the map's input
--     array is the same (_start_ready_steps).
-- Only steps that run again wait for their dependencies, and they wait only for dependencies that
-- run again (a step that is taken over never has one that runs again), so no completion counts a
-- step below zero (complete_tasks also counts down only steps that still wait).
--
-- Each call starts one more run unless again => false: then a run already retried or resumed is
-- refused (23505, naming its restart), so a script that restarts a batch of runs twice, or two
-- operators at once, restart each run once. Restarts of one run are serialised for this check.
--
-- security definer, like start_flow: service_role (0900_privileges) can restart runs without write
-- access to pgflow's tables or to PGMQ's queues.

-- The source of a restart: it must exist and have failed or been cancelled, and, unless p_again,
-- must not have been restarted already. Holds a transaction lock on restarting this run until the
-- caller commits, so a concurrent restart of it sees this one.
create or replace function pgflow._restart_source(p_run_id uuid, p_verb text, p_again boolean)
returns pgflow.runs
language plpgsql
volatile
set search_path = ''
as $$
declare
  source pgflow.runs;
  previous pgflow.runs;
begin
  perform pg_advisory_xact_lock(hashtextextended('pgflow.restart:' || coalesce(p_run_id::text, ''), 0));
  select * into source from pgflow.runs r where r.run_id = p_run_id;
  if not found then
    raise exception 'run % does not exist', coalesce(p_run_id::text, 'NULL')
      using errcode = 'P0002', hint = 'check the run id (pgflow.list_runs lists runs)';
  end if;
  if source.status not in ('failed', 'cancelled') then
    raise exception 'run % is %; only failed or cancelled runs can be %', p_run_id, source.status, p_verb
      using errcode = '55000',
        hint = case when source.status = 'started' then 'cancel it first (pgflow.cancel_run), or wait for it to end'
                    else 'a completed run needs no restart; start a new run with pgflow.start_flow' end;
  end if;
  if p_again is distinct from true then
    select * into previous from pgflow.runs r
    where r.restart_of_run_id = p_run_id
    order by r.started_at desc, r.run_id limit 1;
    if found then
      raise exception 'run % was % already, as run %; it was not % again', p_run_id,
        case previous.restart_mode when 'retry' then 'retried' else 'resumed' end, previous.run_id, p_verb
        using errcode = '23505',
          hint = 'look at run ' || previous.run_id || ' (pgflow.get_run), or pass again => true to restart it once more';
    end if;
  end if;
  return source;
end;
$$;

-- Makes the new run of a restart and starts what is ready in it. p_mode 'retry' takes over nothing;
-- 'resume' takes over what the top of this file says.
create or replace function pgflow._restart_run(p_source pgflow.runs, p_mode text)
returns pgflow.runs
language plpgsql
volatile
set search_path = ''
as $$
declare
  new_run_id uuid := gen_random_uuid();
  reused_steps text[];
  created pgflow.runs;
begin
  -- The steps taken over: the completed ones and every step they were built on (each of which
  -- finished: a step starts only after its dependencies did). A skipped step among them stays
  -- skipped; one that is neither completed nor skipped (never expected) would run again.
  if p_mode = 'resume' then
    with recursive built_on(step_slug) as (
      select ss.step_slug from pgflow.step_states ss
      where ss.run_id = p_source.run_id and ss.status = 'completed'
      union
      select d.dep_slug from built_on b
      join pgflow.deps d on d.flow_slug = p_source.flow_slug and d.step_slug = b.step_slug
    )
    select coalesce(array_agg(b.step_slug), '{}') into reused_steps
    from built_on b
    join pgflow.step_states ss on ss.run_id = p_source.run_id and ss.step_slug = b.step_slug
    where ss.status in ('completed', 'skipped');
  else
    reused_steps := '{}';
  end if;

  -- The restart keeps the source's priority: its tasks wait again like the source's did; and its
  -- trace context, so its spans join the source's trace.
  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, restart_of_run_id, restart_mode,
                           priority, traceparent)
  values (new_run_id, p_source.flow_slug, p_source.input,
          (select count(*) from pgflow.steps s where s.flow_slug = p_source.flow_slug)
            - cardinality(reused_steps),
          p_source.run_id, p_mode, p_source.priority, p_source.traceparent);

  -- A step taken over is copied with its outcome; every other step waits for its dependencies
  -- that are not taken over (they run again here).
  insert into pgflow.step_states (run_id, flow_slug, step_slug, status, remaining_deps, remaining_tasks,
                                  initial_tasks, output, skip_reason, error_message, started_at,
                                  completed_at, skipped_at, reused)
  select new_run_id, s.flow_slug, s.step_slug,
         case when kept then prev.status else 'created' end,
         case when kept then 0 else (
           select count(*) from pgflow.deps d
           where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug
             and not (d.dep_slug = any (reused_steps))) end,
         case when kept then 0 end,
         case when kept then prev.initial_tasks end,
         case when kept then prev.output end,
         case when kept then prev.skip_reason end,
         case when kept then prev.error_message end,
         case when kept and prev.status = 'completed' then clock_timestamp() end,
         case when kept and prev.status = 'completed' then clock_timestamp() end,
         case when kept and prev.status = 'skipped' then clock_timestamp() end,
         kept
  from pgflow.steps s
  left join pgflow.step_states prev on prev.run_id = p_source.run_id and prev.step_slug = s.step_slug
  cross join lateral (select s.step_slug = any (reused_steps) as kept) c
  where s.flow_slug = p_source.flow_slug;

  perform pgflow._start_ready_steps(new_run_id);

  -- Nothing left to run (every step was taken over, or finished at once): the run is complete.
  update pgflow.runs r
  set status = 'completed', completed_at = clock_timestamp(), output = (select o from pgflow._run_output(new_run_id) o)
  where r.run_id = new_run_id and r.status = 'started' and r.remaining_steps = 0;

  select * into created from pgflow.runs r where r.run_id = new_run_id;
  return created;
end;
$$;

create or replace function pgflow.retry_run(run_id uuid, again boolean default true, input jsonb default null)
returns pgflow.runs
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  source pgflow.runs := pgflow._restart_source(retry_run.run_id, 'retried', retry_run.again);
begin
  -- The new run is made from this copy of the source's row: the source itself is not changed.
  if retry_run.input is not null then
    source.input := retry_run.input;
  end if;
  return pgflow._restart_run(source, 'retry');
end;
$$;

create or replace function pgflow.resume_run(run_id uuid, again boolean default true)
returns pgflow.runs
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  return pgflow._restart_run(pgflow._restart_source(resume_run.run_id, 'resumed', resume_run.again), 'resume');
end;
$$;

-- ---- schemas/0600_workers.sql
-- The worker registry: registration, heartbeat, stop and deprecation.

create or replace function pgflow.register_worker(
  worker_id uuid,
  queue_name text,
  function_name text,
  supported jsonb default '[]'::jsonb
)
returns pgflow.workers
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  result pgflow.workers;
  fn pgflow.worker_functions;
  fence record;
begin
  if register_worker.worker_id is null or register_worker.queue_name is null or register_worker.function_name is null then
    raise exception 'register_worker: worker_id, queue_name and function_name are required' using errcode = '22004';
  end if;
  if not pgflow.is_valid_function_name(register_worker.function_name) then
    raise exception 'register_worker: invalid function name %', quote_literal(register_worker.function_name)
      using errcode = '22023', hint = 'use 1-128 letters, digits, "_" or "-" (the Edge Function''s name)';
  end if;
  if jsonb_typeof(supported) is distinct from 'array' then
    raise exception 'register_worker: supported must be a JSON array of [flow_slug, step_slug] pairs' using errcode = '22023';
  end if;
  insert into pgflow.worker_functions (function_name) values (register_worker.function_name)
  on conflict (function_name) do update set updated_at = now()
  returning * into fn;
  -- A disabled function (a deploy fence is in place) gets no new workers until its flag is restored.
  -- The error names the open fence, so the operator who started a worker during a deploy knows
  -- which call ends it.
  if not fn.enabled then
    select f.fence_id, f.note into fence
    from pgflow.deploy_fence_functions ff join pgflow.deploy_fences f on f.fence_id = ff.fence_id
    where ff.function_name = fn.function_name and f.ended_at is null
    order by f.fence_id desc limit 1;
    if fence.fence_id is not null then
      raise exception 'worker function % is disabled by open deploy fence % (%); no new worker may register until it ends',
        fn.function_name, fence.fence_id, coalesce(fence.note, 'no note')
        using errcode = '55000',
          hint = format('once the old workers drained (select * from pgflow.deploy_fence_status(%s)), end it: select pgflow.end_deploy_fence(%s)', fence.fence_id, fence.fence_id);
    end if;
    raise exception 'worker function % is disabled (no deploy fence is open); no new worker may register until it is enabled again', fn.function_name
      using errcode = '55000',
        hint = format('enable it: update pgflow.worker_functions set enabled = true where function_name = %L', fn.function_name);
  end if;
  insert into pgflow.workers (worker_id, queue_name, function_name, supported, claim_visibility)
  values (register_worker.worker_id, register_worker.queue_name, register_worker.function_name, register_worker.supported,
          -- The steps' shared timeout + the claim margin, if they share one (NULL for none or
          -- several).
          (select case when count(distinct coalesce(s.opt_timeout, f.opt_timeout)) = 1
                       then min(coalesce(s.opt_timeout, f.opt_timeout)) + pgflow._claim_margin() end
           from jsonb_array_elements(register_worker.supported) e
           join pgflow.steps s on s.flow_slug = e ->> 0 and s.step_slug = e ->> 1
           join pgflow.flows f on f.flow_slug = s.flow_slug
           where jsonb_typeof(e) = 'array'))
  returning * into result;
  -- Every start adds a row; each registration also removes a bounded batch of expired ones, so the
  -- table stays about the size of the retention window without a scheduler.
  perform pgflow.prune_workers(100);
  return result;
end;
$$;

-- Records a heartbeat and tells the worker whether it has been deprecated (it should stop polling).
-- A worker id with no row fails with SQLSTATE PFW01, as in start_tasks.
create or replace function pgflow.heartbeat(worker_id uuid)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  deprecated boolean;
begin
  -- A worker of a disabled function is deprecated too: it stops polling and drains.
  update pgflow.workers w
  set last_heartbeat_at = clock_timestamp(),
      deprecated_at = coalesce(w.deprecated_at, case when not fn.enabled then clock_timestamp() end)
  from pgflow.worker_functions fn
  where w.worker_id = heartbeat.worker_id and fn.function_name = w.function_name
  returning w.deprecated_at is not null into deprecated;
  if not found then
    raise exception 'worker % is not registered', heartbeat.worker_id
      using errcode = 'PFW01', hint = 'register it with pgflow.register_worker first';
  end if;
  return deprecated;
end;
$$;

create or replace function pgflow.mark_worker_stopped(worker_id uuid)
returns void
language sql
volatile
set search_path = ''
as $$
  update pgflow.workers w set stopped_at = coalesce(w.stopped_at, clock_timestamp())
  where w.worker_id = mark_worker_stopped.worker_id
$$;

-- Deprecates every worker of a function that has not stopped, live or silent: they stop polling
-- and drain their in-flight tasks.
create or replace function pgflow.deprecate_workers(function_name text)
returns integer
language sql
volatile
set search_path = ''
as $$
  with deprecated as (
    update pgflow.workers w set deprecated_at = clock_timestamp()
    where w.function_name = deprecate_workers.function_name
      and w.deprecated_at is null and w.stopped_at is null
    returning 1
  )
  select count(*)::integer from deprecated
$$;

-- The workers seen since p_since (pgflow._worker_seen), and whether each is live
-- (pgflow._worker_live: not deprecated, so it takes new work): what the keep-alive, the coverage
-- check and the deploy fence's status read. plpgsql plans this with the actual p_since, so the
-- planner sees how few rows are that recent and reads them by heartbeat range
-- (workers_heartbeat_idx); a cutoff it cannot see (a parameter, clock_timestamp()) looks to it
-- like a third of the table, and it scanned every worker the database ever had instead.
create or replace function pgflow._recent_workers(p_since timestamptz)
returns table (worker_id uuid, queue_name text, function_name text, live boolean, supported jsonb)
language plpgsql
stable
set search_path = ''
as $$
begin
  return query
  select w.worker_id, w.queue_name, w.function_name, pgflow._worker_live(w, p_since), w.supported
  from pgflow.workers w
  where pgflow._worker_seen(w, p_since);
end;
$$;

-- ---- schemas/0610_worker_retention.sql
-- Worker retention. Every worker start adds a row to pgflow.workers (an Edge isolate lives a few
-- minutes), so rows of workers that stopped or went silent are deleted once they are older than the
-- retention: a bounded batch at every registration, or all at once with prune_workers(). A worker
-- that still holds a started task is kept whatever its age: deploy_fence_status counts those tasks
-- by worker, and stalled recovery has not taken them back yet.

-- How long a stopped or silent worker's row is kept: the 'worker_retention' setting, else 7 days.
create or replace function pgflow.worker_retention()
returns interval
language sql
stable
set search_path = ''
as $$
  select coalesce((select (s.value #>> '{}')::interval from pgflow.settings s where s.key = 'worker_retention'),
                  interval '7 days')
$$;

-- Sets the retention (NULL: back to the default). At least one hour, far beyond the live window
-- (pgflow._live_window): a live worker heartbeats every few seconds, so only a worker that is long
-- gone can look that old.
create or replace function pgflow.set_worker_retention(retention interval)
returns interval
language plpgsql
volatile
set search_path = ''
as $$
begin
  if retention is null then
    delete from pgflow.settings s where s.key = 'worker_retention';
  elsif retention < interval '1 hour' then
    raise exception 'set_worker_retention: retention must be at least 1 hour, got %', retention
      using errcode = '22023', hint = 'a live worker heartbeats every few seconds; keep stopped workers for hours or days';
  else
    insert into pgflow.settings (key, value) values ('worker_retention', to_jsonb(retention::text))
    on conflict (key) do update set value = excluded.value, updated_at = now();
  end if;
  return pgflow.worker_retention();
end;
$$;

-- Deletes up to max_rows workers (NULL: all) whose last heartbeat and stop are older than the
-- retention and that hold no started task; returns how many. Rows another session is deleting
-- are skipped, so concurrent registrations never wait on each other here.
create or replace function pgflow.prune_workers(max_rows integer default null)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  cutoff timestamptz := now() - pgflow.worker_retention();
  deleted integer;
begin
  if max_rows is not null and max_rows < 1 then
    raise exception 'prune_workers: max_rows must be at least 1 or NULL (all), got %', max_rows
      using errcode = '22023';
  end if;
  with doomed as (
    select w.worker_id from pgflow.workers w
    where w.last_heartbeat_at < cutoff
      and (w.stopped_at is null or w.stopped_at < cutoff)
      and not exists (select 1 from pgflow.step_tasks t
                      where t.last_worker_id = w.worker_id and t.status = 'started')
    order by w.last_heartbeat_at
    limit max_rows
    for update skip locked
  ), gone as (
    delete from pgflow.workers w using doomed d where w.worker_id = d.worker_id returning 1
  )
  select count(*)::integer into deleted from gone;
  return deleted;
end;
$$;

-- ---- schemas/0700_shared_queue_provisioning.sql
-- Declaring shared queues. Every decision about one queue name is taken under a transaction lock on
-- that name, so concurrent compiles that declare the same queue serialise and both succeed.

-- What a queue name already is, in words an error message can use; null when it is free.
create or replace function pgflow._queue_owner(p_queue text)
returns text
language sql
stable
set search_path = ''
as $$
  select coalesce(
    (select format('the default queue of flow %s', f.flow_slug) from pgflow.flows f
     where lower(f.flow_slug) = p_queue and f.queue_mode = 'flow' limit 1),
    (select format('the private queue of step %s.%s', s.flow_slug, s.step_slug)
     from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug
     where s.queue_name = p_queue and f.queue_mode = 'step' limit 1),
    (select 'an external queue (not created by pgflow)'
     from pgmq.list_queues() q where lower(q.queue_name) = p_queue limit 1)
  )
$$;

-- Checks that a name can be used as a shared queue, without changing anything. Takes the name's
-- lock, which the caller keeps until it commits.
create or replace function pgflow._check_shared_queue(p_queue text, p_flow_slug text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  spellings text[];
begin
  if not pgflow.is_valid_queue_name(p_queue) then
    raise exception 'flow %: invalid shared queue name %', p_flow_slug, coalesce(quote_literal(p_queue), 'NULL')
      using errcode = '22023',
        hint = 'use lowercase letters, digits and single underscores, starting with a letter, at most 47 characters';
  end if;
  perform pgmq.validate_queue_name(p_queue);
  perform pg_advisory_xact_lock(pgflow._queue_lock_key(p_queue));

  select array_agg(q.queue_name::text order by q.queue_name) into spellings
  from pgmq.list_queues() q where lower(q.queue_name) = p_queue;
  if cardinality(spellings) > 1 then
    raise exception 'flow %: queue % is listed by PGMQ under several spellings %; refusing to use it', p_flow_slug, p_queue, spellings
      using errcode = '55000', hint = 'these names share one table pair; drop the extra spellings from pgmq.meta by hand first';
  end if;
  if exists (select 1 from pgflow.shared_queues s where s.queue_name = p_queue) then
    return true;
  end if;
  if spellings is not null then
    raise exception 'flow %: queue % is %, not a shared queue', p_flow_slug, spellings[1], pgflow._queue_owner(p_queue)
      using errcode = '55000', hint = 'route the step to another queue name';
  end if;
  return false;
end;
$$;

-- Declares a shared queue or reuses a declared one: absent → pgmq.create and record the declaration;
-- declared → reuse (recreating the PGMQ queue if someone dropped it); anything else → an error.
create or replace function pgflow._provision_shared_queue(p_queue text, p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if not pgflow._check_shared_queue(p_queue, p_flow_slug) then
    insert into pgflow.shared_queues (queue_name, declared_by_flow) values (p_queue, p_flow_slug);
  end if;
  if not exists (select 1 from pgmq.list_queues() q where q.queue_name = p_queue) then
    perform pgmq.create(p_queue);
  end if;
end;
$$;

-- ---- schemas/0705_own_queue_provisioning.sql
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

-- ---- schemas/0710_flow_shape.sql
-- A stored flow's shape and route plan, in the same JSON form the TypeScript compiler sends
-- (src/compile/shape.ts), and the readable differences between two of them.

create or replace function pgflow._pattern_slot(p_pattern jsonb)
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select case when p_pattern is null then '{"defined": false}'::jsonb
              else jsonb_build_object('defined', true, 'value', p_pattern) end
$$;

create or replace function pgflow._flow_shape(p_flow_slug text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object('steps', coalesce(jsonb_agg(jsonb_build_object(
    'slug', s.step_slug,
    'index', s.step_index,
    'stepType', s.step_type,
    'dependencies', coalesce((select jsonb_agg(d.dep_slug order by d.dep_slug collate "C")
                              from pgflow.deps d
                              where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug), '[]'::jsonb),
    'whenUnmet', s.when_unmet,
    'whenExhausted', s.when_exhausted,
    'requiredInputPattern', pgflow._pattern_slot(s.required_input_pattern),
    'forbiddenInputPattern', pgflow._pattern_slot(s.forbidden_input_pattern)
  ) || case when s.kind = 'flow'  -- only a child-flow step carries the key (0290_child_flows.sql)
            then jsonb_build_object('child', jsonb_build_object('flow', s.child_flow, 'input', s.child_input))
            else '{}'::jsonb end
     || case when s.kind in ('event', 'sleep')  -- only a waiting step carries the key (0280_events.sql)
            then jsonb_build_object('wait', pgflow._wait_shape(s)) else '{}'::jsonb end
  order by s.step_index), '[]'::jsonb))
  from pgflow.steps s
  where s.flow_slug = p_flow_slug
$$;

create or replace function pgflow._flow_route_plan(p_flow_slug text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'mode', f.queue_mode,
    'queues', coalesce((select jsonb_object_agg(s.step_slug, s.queue_name)
                        from pgflow.steps s where s.flow_slug = f.flow_slug), '{}'::jsonb))
  from pgflow.flows f
  where f.flow_slug = p_flow_slug
$$;

-- One line per difference, naming the step and what differs: stored value first, then the new one.
create or replace function pgflow._definition_differences(
  p_stored_shape jsonb, p_shape jsonb, p_stored_routes jsonb, p_routes jsonb
)
returns text[]
language sql
immutable
set search_path = ''
as $$
  select coalesce(array_agg(diff order by ord, diff), '{}')
  from (
    select 0 as ord, format('step count: %s stored, %s new',
      jsonb_array_length(p_stored_shape -> 'steps'), jsonb_array_length(p_shape -> 'steps')) as diff
    where jsonb_array_length(p_stored_shape -> 'steps') <> jsonb_array_length(p_shape -> 'steps')
    union all
    select 1 + i, format('step %s: %s %s stored, %s new', i, k.key,
      coalesce(a.step -> k.key, 'null'), coalesce(b.step -> k.key, 'null'))
    from generate_series(0, greatest(jsonb_array_length(p_stored_shape -> 'steps'),
                                     jsonb_array_length(p_shape -> 'steps')) - 1) as i
    cross join (values ('slug'), ('stepType'), ('dependencies'), ('whenUnmet'), ('whenExhausted'),
                       ('requiredInputPattern'), ('forbiddenInputPattern'), ('child'), ('wait')) as k(key)
    cross join lateral (select p_stored_shape -> 'steps' -> i as step) a
    cross join lateral (select p_shape -> 'steps' -> i as step) b
    where a.step is not null and b.step is not null and (a.step -> k.key) is distinct from (b.step -> k.key)
    union all
    select 100000, format('queue mode: %s stored, %s new', p_stored_routes ->> 'mode', p_routes ->> 'mode')
    where (p_stored_routes ->> 'mode') is distinct from (p_routes ->> 'mode')
    union all
    select 100001, format('route of step %s: queue %s stored, %s new', r.key,
      coalesce(p_stored_routes -> 'queues' ->> r.key, 'none'), coalesce(p_routes -> 'queues' ->> r.key, 'none'))
    from (select jsonb_object_keys(p_stored_routes -> 'queues') as key
          union select jsonb_object_keys(p_routes -> 'queues')) r
    where (p_stored_routes -> 'queues' -> r.key) is distinct from (p_routes -> 'queues' -> r.key)
  ) d
$$;

-- ---- schemas/0715_aliases.sql
-- Aliases: callers start a stable name (thread_triage); runs, tasks, queues and history keep the
-- concrete slug (thread_triage_v2). Compiling a version never moves an alias; an operator moves it
-- with a compare-and-swap after checking that the new version's handlers are deployed.

-- Records the alias a flow carries (create_flow calls it): the first flow with an alias creates
-- the alias pointing at it; a later version with the same alias leaves it where it is. An alias
-- may not take the name of another flow (start_flow would then start the alias's target instead of
-- it); the names lock (pgflow._lock_names) keeps a concurrent create_flow of that name out.
create or replace function pgflow._register_alias(p_flow_slug text, p_alias text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  named text;
begin
  if p_alias is null then
    return;
  end if;
  perform pgflow._lock_names();
  select f.flow_slug into named from pgflow.flows f
  where lower(f.flow_slug) = lower(p_alias) and f.alias is distinct from p_alias
    and f.flow_slug <> p_flow_slug;
  if named is not null then
    raise exception 'flow %: alias % is the slug of flow %, which does not carry it', p_flow_slug, p_alias, named
      using errcode = '23505',
        hint = 'pick an alias no flow uses as its slug, or give that flow the same alias';
  end if;
  insert into pgflow.aliases (alias, flow_slug) values (p_alias, p_flow_slug)
  on conflict on constraint aliases_pkey do nothing;
end;
$$;

-- Moves an alias to another version of it: only if it still points at expected_current (a lost
-- race is an error, nothing changes), only to a compiled flow carrying this alias, and only when
-- a live worker serves every (queue, flow, step) pair of the target's routes, unless forced. The
-- activation is recorded either way it goes through.
create or replace function pgflow.activate_alias(
  alias text, expected_current text, new_target text, force boolean default false
)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  current_target text;
  target_alias text;
  uncovered jsonb;
begin
  select a.flow_slug into current_target from pgflow.aliases a where a.alias = activate_alias.alias for update;
  if not found then
    raise exception 'alias % does not exist', coalesce(quote_literal(activate_alias.alias), 'NULL')
      using errcode = 'P0002', hint = 'an alias is created by the first compile of a flow that carries it';
  end if;
  if current_target is distinct from expected_current then
    raise exception 'alias % points at %, not %: another activation won', activate_alias.alias,
      current_target, coalesce(expected_current, 'NULL')
      using errcode = '40001', hint = 'read it again (pgflow.list_aliases()) and decide again';
  end if;
  select f.alias into target_alias from pgflow.flows f where f.flow_slug = new_target;
  if not found or target_alias is distinct from activate_alias.alias then
    raise exception 'alias %: % is not a compiled version of it', activate_alias.alias, coalesce(new_target, 'NULL')
      using errcode = '22023',
        hint = 'start a worker of the new version (it compiles the flow with its alias), then activate';
  end if;
  select coalesce(jsonb_agg(jsonb_build_object('queue', c.queue_name, 'flow', c.flow_slug, 'step', c.step_slug)
                            order by c.queue_name, c.step_slug), '[]'::jsonb)
  into uncovered
  from pgflow.queue_coverage() c
  where c.flow_slug = new_target and not c.served;
  if jsonb_array_length(uncovered) > 0 and not force then
    raise exception 'alias %: no live worker serves % of %; nothing changed', activate_alias.alias,
      (select string_agg(format('%s/%s on %s', u ->> 'flow', u ->> 'step', u ->> 'queue'), ', ')
       from jsonb_array_elements(uncovered) u), new_target
      using errcode = '55000',
        hint = 'deploy workers for those steps (pgflow coverage shows them), or pass force => true';
  end if;
  update pgflow.aliases a set flow_slug = new_target, updated_at = now() where a.alias = activate_alias.alias;
  insert into pgflow.alias_activations (alias, from_slug, to_slug, forced, uncovered)
  values (activate_alias.alias, current_target, new_target, force and jsonb_array_length(uncovered) > 0, uncovered);
  return jsonb_build_object('alias', activate_alias.alias, 'from', current_target, 'to', new_target,
                            'forced', force and jsonb_array_length(uncovered) > 0, 'uncovered', uncovered);
end;
$$;

-- Every alias with its target and the compiled versions that carry it.
create or replace function pgflow.list_aliases()
returns setof jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'alias', a.alias,
    'flow_slug', a.flow_slug,
    'updated_at', to_char(a.updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'versions', coalesce((select jsonb_agg(f.flow_slug order by f.created_at, f.flow_slug)
                          from pgflow.flows f where f.alias = a.alias), '[]'::jsonb))
  from pgflow.aliases a
  order by a.alias
$$;

-- ---- schemas/0720_ensure_flow_compiled.sql
-- The startup compiler. A worker sends each flow it serves: the shape, the route plan and the
-- runtime options. SQL validates all of it itself, then, under a per-slug transaction lock:
--   missing            → create definitions, routes and queues   → 'compiled'
--   same shape, routes → nothing                                 → 'verified'
--     (options are not part of the identity: supplied options that differ from the stored ones
--     are listed in optionDifferences and not applied; the worker warns about each. The stored
--     options govern every run of the slug, retries of runs already in flight included, and two
--     deployments starting side by side would otherwise overwrite each other's on every start.
--     Local development treats them as differences and recompiles, as it does any change.)
--   different, production → nothing at all, with the differences → 'mismatch'
--   different, local development (pgflow.is_local_development()) → delete the flow's data and
--                        create it again                          → 'recompiled'
--     (with the number of runs and tasks deleted, and of live workers whose claims on the flow
--     were withdrawn: a worker still running the old definition would otherwise claim the new
--     definition's tasks with its old handlers. Its registered support set loses the flow's
--     pairs, so its claims refuse them from the next read on; it tells why in its log.)

-- Every problem with a definition, one line each; empty when it is valid.
create or replace function pgflow._definition_problems(p_flow_slug text, p_shape jsonb, p_routes jsonb)
returns text[]
language plpgsql
stable
set search_path = ''
as $$
declare
  problems text[] := '{}';
  step jsonb;
  i integer := 0;
  slugs text[] := '{}';
  dep jsonb;
  mode text := p_routes ->> 'mode';
  expected text;
  queue text;
  missing text[];
  unknown text[];
begin
  if not pgflow.is_valid_slug(p_flow_slug) then
    return array[format('invalid flow slug %s', coalesce(quote_literal(p_flow_slug), 'NULL'))];
  end if;
  if jsonb_typeof(p_shape -> 'steps') is distinct from 'array' then
    return array['shape must be an object with a "steps" array'];
  end if;
  for step in select value from jsonb_array_elements(p_shape -> 'steps') loop
    if jsonb_typeof(step -> 'slug') is distinct from 'string' or not pgflow.is_valid_slug(step ->> 'slug') then
      problems := problems || format('step %s: invalid slug %s', i, coalesce(step -> 'slug', 'null'));
    elsif lower(step ->> 'slug') = any (select lower(x) from unnest(slugs) x) then
      problems := problems || format('step %s: slug %s is used twice (case-insensitively)', i, step ->> 'slug');
    end if;
    if (step -> 'index') is distinct from to_jsonb(i) then
      problems := problems || format('step %s: index %s does not match its position', i, coalesce(step -> 'index', 'null'));
    end if;
    if (step ->> 'stepType') is null or (step ->> 'stepType') not in ('single', 'map') then
      problems := problems || format('step %s: stepType must be single or map', i);
    end if;
    if (step ->> 'whenUnmet') is null or (step ->> 'whenUnmet') not in ('fail', 'skip', 'skip-cascade')
       or (step ->> 'whenExhausted') is null or (step ->> 'whenExhausted') not in ('fail', 'skip', 'skip-cascade') then
      problems := problems || format('step %s: whenUnmet and whenExhausted must be fail, skip or skip-cascade', i);
    end if;
    if jsonb_typeof(step -> 'dependencies') is distinct from 'array' then
      problems := problems || format('step %s: dependencies must be an array', i);
    else
      for dep in select value from jsonb_array_elements(step -> 'dependencies') loop
        if jsonb_typeof(dep) <> 'string' or not ((dep #>> '{}') = any (slugs)) then
          problems := problems || format('step %s: dependency %s is not an earlier step', i, dep);
        end if;
      end loop;
      if step ->> 'stepType' = 'map' and jsonb_array_length(step -> 'dependencies') > 1 then
        problems := problems || format('step %s: a map step has at most one dependency', i);
      end if;
    end if;
    if jsonb_typeof(step -> 'requiredInputPattern' -> 'defined') is distinct from 'boolean'
       or jsonb_typeof(step -> 'forbiddenInputPattern' -> 'defined') is distinct from 'boolean' then
      problems := problems || format('step %s: patterns must be {"defined": false} or {"defined": true, "value": ...}', i);
    end if;
    problems := problems || pgflow._child_step_problems(step, i);
    problems := problems || pgflow._wait_step_problems(step, i);
    slugs := slugs || (step ->> 'slug');
    i := i + 1;
  end loop;

  if mode is null or mode not in ('flow', 'step', 'routed') then
    return problems || format('route plan mode must be flow, step or routed, got %s', coalesce(p_routes -> 'mode', 'null'));
  end if;
  if jsonb_typeof(p_routes -> 'queues') is distinct from 'object' then
    return problems || 'route plan must have a "queues" object'::text;
  end if;
  select array_agg(s order by s) into missing from unnest(slugs) s where not (p_routes -> 'queues' ? s);
  select array_agg(k order by k) into unknown from jsonb_object_keys(p_routes -> 'queues') k where not (k = any (slugs));
  if missing is not null then
    problems := problems || format('route plan has no queue for step(s) %s', array_to_string(missing, ', '));
  end if;
  if unknown is not null then
    problems := problems || format('route plan names unknown step(s) %s', array_to_string(unknown, ', '));
  end if;
  for i in 0 .. coalesce(array_length(slugs, 1), 0) - 1 loop
    -- A JSON null (or number, object) is not a queue name: say so rather than skip the step.
    if jsonb_typeof(p_routes -> 'queues' -> slugs[i + 1]) <> 'string' then
      problems := problems || format('step %s: queue must be a string, got %s', slugs[i + 1], p_routes -> 'queues' -> slugs[i + 1]);
      continue;
    end if;
    queue := p_routes -> 'queues' ->> slugs[i + 1];
    continue when queue is null;
    begin
      expected := case mode
        when 'flow' then lower(p_flow_slug)
        when 'step' then pgflow.private_queue_name(p_flow_slug, slugs[i + 1], i)
        else queue end;
    exception when others then
      problems := problems || format('step %s: %s', slugs[i + 1], sqlerrm);
      continue;
    end;
    if queue <> expected then
      problems := problems || format('step %s: %s-mode queue must be %s, got %s', slugs[i + 1], mode, expected, queue);
    elsif mode = 'routed' and not pgflow.is_valid_queue_name(queue) then
      problems := problems || format('step %s: invalid shared queue name %s (lowercase letters, digits and single underscores, starting with a letter, at most 47 characters)', slugs[i + 1], quote_literal(queue));
    elsif length(queue) > 47 then
      problems := problems || format('step %s: queue %s is longer than 47 characters', slugs[i + 1], queue);
    else
      begin
        perform pgmq.validate_queue_name(queue);
        perform pgmq.format_table_name(queue, 'q');
      exception when others then
        problems := problems || format('step %s: PGMQ rejects queue %s: %s', slugs[i + 1], queue, sqlerrm);
      end;
    end if;
  end loop;
  return problems;
end;
$$;

-- Every runtime option outside pgflow.option_bounds(), one line each; empty when all are inside.
-- Checked before anything is created, so a value the DSL would refuse (or JSON that is not an
-- integer) is reported with the others instead of failing a cast halfway through the compile.
-- JSON null counts as unset.
create or replace function pgflow._option_problems(p_options jsonb)
returns text[]
language sql
immutable
set search_path = ''
as $$
  with given as (
    select 'flow' as owner, e.key, e.value
    from jsonb_each(case when jsonb_typeof(p_options -> 'flow') = 'object' then p_options -> 'flow' else '{}'::jsonb end) e
    where e.key in ('maxAttempts', 'baseDelay', 'timeout')
    union all
    select 'step ' || s.key, e.key, e.value
    from jsonb_each(case when jsonb_typeof(p_options -> 'steps') = 'object' then p_options -> 'steps' else '{}'::jsonb end) s
    cross join lateral jsonb_each(case when jsonb_typeof(s.value) = 'object' then s.value else '{}'::jsonb end) e
    where e.key in ('maxAttempts', 'baseDelay', 'timeout', 'startDelay')
  )
  select coalesce(array_agg(format('%s: %s must be an integer between %s and %s, got %s',
                                   g.owner, g.key, b.bounds ->> 'min', b.bounds ->> 'max', g.value)
                            order by g.owner, g.key), '{}')
  from given g
  cross join lateral (select pgflow.option_bounds() -> g.key as bounds) b
  where jsonb_typeof(g.value) <> 'null'
    and not (jsonb_typeof(g.value) = 'number' and g.value::text ~ '^-?[0-9]{1,10}$'
             and (g.value::text)::bigint between (b.bounds ->> 'min')::bigint and (b.bounds ->> 'max')::bigint)
$$;

-- Creates a validated definition: shared queues are checked (and locked) first, so a conflict is
-- found before anything changes; then the flow with its alias, its steps and their queues. The
-- names lock comes before the queue locks (the order create_flow takes them in).
create or replace function pgflow._create_flow_from_definition(
  p_flow_slug text, p_shape jsonb, p_routes jsonb, p_options jsonb, p_alias text
)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  step jsonb;
  q text;
  opts jsonb;
  flow_opts jsonb := coalesce(p_options -> 'flow', '{}'::jsonb);
begin
  perform pgflow._lock_names();
  if p_routes ->> 'mode' = 'routed' then
    for q in select distinct value #>> '{}' from jsonb_each(p_routes -> 'queues') order by 1 loop
      perform pgflow._check_shared_queue(q, p_flow_slug);
    end loop;
  end if;
  perform pgflow.create_flow(p_flow_slug,
    (flow_opts ->> 'maxAttempts')::integer,
    (flow_opts ->> 'baseDelay')::integer,
    (flow_opts ->> 'timeout')::integer,
    p_routes ->> 'mode',
    p_alias);
  for step in select value from jsonb_array_elements(p_shape -> 'steps') order by (value ->> 'index')::integer loop
    opts := coalesce(p_options -> 'steps' -> (step ->> 'slug'), '{}'::jsonb);
    perform pgflow.add_step(
      flow_slug => p_flow_slug,
      step_slug => step ->> 'slug',
      deps_slugs => array(select jsonb_array_elements_text(step -> 'dependencies')),
      max_attempts => (opts ->> 'maxAttempts')::integer,
      base_delay => (opts ->> 'baseDelay')::integer,
      timeout => (opts ->> 'timeout')::integer,
      start_delay => coalesce((opts ->> 'startDelay')::integer, 0),
      step_type => step ->> 'stepType',
      required_input_pattern => case when (step -> 'requiredInputPattern' ->> 'defined')::boolean
                                     then step -> 'requiredInputPattern' -> 'value' end,
      forbidden_input_pattern => case when (step -> 'forbiddenInputPattern' ->> 'defined')::boolean
                                      then step -> 'forbiddenInputPattern' -> 'value' end,
      when_unmet => step ->> 'whenUnmet',
      when_exhausted => step ->> 'whenExhausted',
      queue_name => p_routes -> 'queues' ->> (step ->> 'slug'));
    if step ? 'child' then
      update pgflow.steps s
      set kind = 'flow', child_flow = step -> 'child' ->> 'flow',
          child_input = nullif(step -> 'child' -> 'input', 'null'::jsonb)
      where s.flow_slug = p_flow_slug and s.step_slug = step ->> 'slug';
    end if;
    if step ? 'wait' then
      perform pgflow._set_wait(p_flow_slug, step ->> 'slug', step -> 'wait');
    end if;
  end loop;
end;
$$;

-- Every runtime option whose supplied value differs from the stored one, as
-- [{step, option, stored, supplied}] (step NULL for a flow option), in definition order. Unset
-- values compare as what the definition functions store for them: the flow defaults
-- (pgflow.flow_option_default), NULL (inherit) for a step's maxAttempts, baseDelay and timeout, 0 for
-- its startDelay. Run only after _option_problems found nothing, so every value is an integer.
create or replace function pgflow._option_differences(p_flow_slug text, p_options jsonb)
returns jsonb
language sql
stable
set search_path = ''
as $$
  with supplied as (
    select null::text as step_slug, -1 as step_index, o.ord, o.option, o.stored,
           coalesce((nullif(p_options -> 'flow' -> o.option, 'null'::jsonb) #>> '{}')::integer, o.fallback) as supplied
    from pgflow.flows f
    cross join lateral (values ('maxAttempts', f.opt_max_attempts, 0), ('baseDelay', f.opt_base_delay, 1),
                               ('timeout', f.opt_timeout, 2)) as v(option, stored, ord)
    cross join lateral (select v.option, v.stored, v.ord,
                               pgflow.flow_option_default(v.option) as fallback) o
    where f.flow_slug = p_flow_slug
    union all
    select s.step_slug, s.step_index, o.ord, o.option, o.stored,
           coalesce((nullif(p_options -> 'steps' -> s.step_slug -> o.option, 'null'::jsonb) #>> '{}')::integer, o.fallback)
    from pgflow.steps s
    cross join lateral (values ('maxAttempts', s.opt_max_attempts, null::integer, 0),
                               ('baseDelay', s.opt_base_delay, null::integer, 1),
                               ('timeout', s.opt_timeout, null::integer, 2),
                               ('startDelay', s.opt_start_delay, 0, 3)) as o(option, stored, fallback, ord)
    where s.flow_slug = p_flow_slug
  )
  select coalesce(jsonb_agg(jsonb_build_object('step', d.step_slug, 'option', d.option,
                                               'stored', d.stored, 'supplied', d.supplied)
                            order by d.step_index, d.ord), '[]'::jsonb)
  from supplied d
  where d.stored is distinct from d.supplied
$$;

create or replace function pgflow.ensure_flow_compiled(
  flow_slug text,
  shape jsonb,
  route_plan jsonb,
  options jsonb default '{}'::jsonb,
  alias text default null
)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  problems text[];
  existing text;
  differences text[];
  option_differences jsonb;
  q text;
  deleted_runs bigint;
  deleted_tasks bigint;
  withdrawn integer;
begin
  problems := pgflow._definition_problems(ensure_flow_compiled.flow_slug, shape, route_plan)
              || pgflow._option_problems(options)
              || pgflow._flow_control_option_problems(options)
              || case when ensure_flow_compiled.alias is not null
                           and not pgflow.is_valid_slug(ensure_flow_compiled.alias)
                      then array[format('alias %s is not a valid slug (letters, digits and single underscores, starting with a letter)',
                                        quote_literal(ensure_flow_compiled.alias))]
                      else '{}'::text[] end;
  if cardinality(problems) > 0 then
    raise exception 'flow %: invalid definition: %', coalesce(ensure_flow_compiled.flow_slug, 'NULL'),
      array_to_string(problems, '; ') using errcode = '22023';
  end if;
  -- One compile per slug at a time: concurrent workers of the same flow wait here.
  perform pg_advisory_xact_lock(pgflow._flow_lock_key(ensure_flow_compiled.flow_slug));

  select f.flow_slug into existing from pgflow.flows f where lower(f.flow_slug) = lower(ensure_flow_compiled.flow_slug);
  if existing is null then
    -- create_flow refuses a slug that is another alias's name.
    perform pgflow._create_flow_from_definition(ensure_flow_compiled.flow_slug, shape, route_plan, options,
                                                ensure_flow_compiled.alias);
    perform pgflow._apply_flow_control(ensure_flow_compiled.flow_slug, options, true);
    return jsonb_build_object('status', 'compiled', 'differences', '[]'::jsonb,
                              'optionDifferences', '[]'::jsonb);
  end if;
  if existing <> ensure_flow_compiled.flow_slug then
    raise exception 'flow % conflicts with existing flow % (flow slugs are unique case-insensitively)',
      ensure_flow_compiled.flow_slug, existing using errcode = '23505', hint = 'use the existing spelling or a new slug';
  end if;

  differences := pgflow._definition_differences(
    pgflow._flow_shape(existing), shape, pgflow._flow_route_plan(existing), route_plan);
  option_differences := pgflow._option_differences(existing, options);
  -- The alias is part of the definition: a version is deployed under one alias for good.
  differences := differences || array(
    select format('alias: %s stored, %s new', coalesce(f.alias, 'none'), coalesce(ensure_flow_compiled.alias, 'none'))
    from pgflow.flows f
    where f.flow_slug = existing and f.alias is distinct from ensure_flow_compiled.alias);
  if cardinality(differences) = 0 and (jsonb_array_length(option_differences) = 0
                                       or not pgflow.is_local_development()) then
    -- Options that differ are reported, not applied (see the top of this file); concurrency
    -- limits are, to the scopes the stored steps name (0255_limits.sql).
    perform pgflow._apply_flow_control(existing, options, false);
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb,
                              'optionDifferences', option_differences);
  end if;
  if not pgflow.is_local_development() then
    -- Production: change nothing. Existing tasks keep their queue snapshots.
    return jsonb_build_object('status', 'mismatch', 'differences', to_jsonb(differences),
                              'optionDifferences', option_differences);
  end if;
  -- Local development follows the code: changed options are differences like any other.
  differences := differences || array(
    select format('%s: %s %s stored, %s new', coalesce('step ' || (d ->> 'step'), 'flow'), d ->> 'option',
                  coalesce(d ->> 'stored', 'unset'), coalesce(d ->> 'supplied', 'unset'))
    from jsonb_array_elements(option_differences) d);
  -- Local development: check the new shared queues before deleting anything (names lock first,
  -- as in _create_flow_from_definition).
  perform pgflow._lock_names();
  if route_plan ->> 'mode' = 'routed' then
    for q in select distinct value #>> '{}' from jsonb_each(route_plan -> 'queues') order by 1 loop
      perform pgflow._check_shared_queue(q, existing);
    end loop;
  end if;
  -- An alias that keeps pointing at the slug stays: the flow comes back carrying it. One the new
  -- definition drops goes as it would with delete_flow_and_data (or the recompile is refused).
  if exists (select 1 from pgflow.flows f where f.flow_slug = existing
             and f.alias is distinct from ensure_flow_compiled.alias) then
    perform pgflow._release_aliases(existing);
  end if;
  select count(*) into deleted_runs from pgflow.runs r where r.flow_slug = existing;
  select count(*) into deleted_tasks from pgflow.step_tasks t where t.flow_slug = existing;
  perform pgflow._delete_flow_data(existing);
  perform pgflow._create_flow_from_definition(existing, shape, route_plan, options, ensure_flow_compiled.alias);
  perform pgflow._apply_flow_control(existing, options, true);
  -- Live workers registered for the old definition (the compiling worker registers after this):
  -- their claims on the flow are withdrawn. Local development only, so reading every live
  -- worker's pairs here costs nothing that matters.
  with old_workers as (
    select w.worker_id,
           coalesce((select jsonb_agg(e order by o) from jsonb_array_elements(w.supported) with ordinality x(e, o)
                     where e ->> 0 <> existing), '[]'::jsonb) as kept
    from pgflow.workers w
    where w.stopped_at is null
      and exists (select 1 from jsonb_array_elements(w.supported) e where e ->> 0 = existing)
  ), updated as (
    update pgflow.workers w
    set supported = o.kept
    from old_workers o where w.worker_id = o.worker_id
    returning 1
  )
  select count(*) into withdrawn from updated;
  return jsonb_build_object('status', 'recompiled', 'differences', to_jsonb(differences),
                            'optionDifferences', option_differences,
                            'deletedRuns', deleted_runs, 'deletedTasks', deleted_tasks,
                            'withdrawnWorkers', withdrawn);
end;
$$;

-- ---- schemas/0730_delete_flow_and_data.sql
-- Deleting one concrete flow: its definitions, its runtime rows and the queues pgflow created for
-- it (pgflow.created_queues). On every other queue (shared queues, and any queue pgflow did not
-- create) only this flow's tracked messages go, found through its task snapshots: other flows'
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

-- Deletes one flow's data; the caller holds the flow's compile lock (pgflow.flow:<slug>) and has
-- dealt with the aliases that point at it (delete_flow_and_data, or a local-development recompile).
--
-- Lock order, the same as every other writer's: the flow, then each of its runs (in run_id order,
-- as complete_tasks takes them), then messages, then task rows. complete_task, fail_task and
-- stalled recovery take the run first and its task and messages after; a claim takes a message and
-- then its task. So a completion in flight finishes before the delete goes on, and the task and
-- message it created are then seen and removed here; a completion that comes later finds its run
-- gone and changes nothing. Neither fails, and no message of the flow is left behind.
create or replace function pgflow._delete_flow_data(p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  flow pgflow.flows;
  grp record;
  dropped text[];
  own_queue text;
begin
  select * into flow from pgflow.flows f where f.flow_slug = p_flow_slug for update;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(p_flow_slug), 'NULL')
      using errcode = '22023';
  end if;
  perform 1 from pgflow.runs r where r.flow_slug = flow.flow_slug order by r.run_id for update;

  -- The queues dropped with the flow: only those pgflow created for it, that no other flow routes
  -- to, and that PGMQ lists under this one spelling (another spelling shares the table pair, and
  -- dropping it would destroy that queue too).
  select coalesce(array_agg(c.queue_name order by c.queue_name), '{}') into dropped
  from pgflow.created_queues c
  where c.flow_slug = flow.flow_slug
    and not exists (select 1 from pgflow.steps s where s.queue_name = c.queue_name and s.flow_slug <> flow.flow_slug)
    and (select array_agg(q.queue_name::text) from pgmq.list_queues() q where lower(q.queue_name) = c.queue_name)
        = array[c.queue_name];

  -- Every other queue the flow's tasks used keeps everything but this flow's tracked messages,
  -- found through the task snapshots (read after the run locks, so a completion that just
  -- committed is included).
  for grp in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as ids
    from pgflow.step_tasks t
    where t.flow_slug = flow.flow_slug and t.message_id is not null
      and not (t.queue_name = any (dropped))
    group by t.queue_name
    order by t.queue_name
  loop
    perform pgflow._purge_tracked_messages(grp.queue_name, grp.ids);
  end loop;

  foreach own_queue in array dropped loop
    perform pgmq.drop_queue(own_queue);
  end loop;

  delete from pgflow.step_tasks t where t.flow_slug = flow.flow_slug;
  delete from pgflow.step_states ss where ss.flow_slug = flow.flow_slug;
  delete from pgflow.runs r where r.flow_slug = flow.flow_slug;
  delete from pgflow.created_queues c where c.flow_slug = flow.flow_slug;
  delete from pgflow.deps d where d.flow_slug = flow.flow_slug;
  delete from pgflow.steps s where s.flow_slug = flow.flow_slug;
  delete from pgflow.flows f where f.flow_slug = flow.flow_slug;
  -- A queue left with one flow no longer takes turns (0258_fair_window.sql); its window, if any,
  -- went with the waiting tasks deleted above.
  perform pgflow._sync_queue_cursor(c.queue_name) from pgflow.queue_cursors c;
  delete from pgflow.fair_windows w
  where not exists (select 1 from pgflow.queue_cursors c where c.queue_name = w.queue_name);
end;
$$;

-- The aliases that point at a flow about to be deleted. Left alone, an alias would start whatever
-- is compiled under the slug next, an unrelated flow perhaps. An alias whose only version is this
-- flow goes with it; one that other versions carry is not deleted with it: the deletion is refused,
-- naming the activation that points the alias at another version first (an operator's choice,
-- after a coverage check, as every move of an alias is).
--
-- Only the alias the flow carries can point at it (an alias moves only to a version carrying it).
-- Its row is locked before the flow's, the order activate_alias takes them in, so an activation
-- that is moving the alias onto this flow either commits first (and is seen here) or waits and
-- then finds the flow gone.
create or replace function pgflow._release_aliases(p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  carried text;
  target text;
  other text;
begin
  select f.alias into carried from pgflow.flows f where f.flow_slug = p_flow_slug;
  if carried is null then
    return;
  end if;
  select a.flow_slug into target from pgflow.aliases a where a.alias = carried for update;
  if target is distinct from p_flow_slug then
    return;
  end if;
  select f.flow_slug into other from pgflow.flows f
  where f.alias = carried and f.flow_slug <> p_flow_slug
  order by f.created_at desc, f.flow_slug limit 1;
  if other is not null then
    raise exception 'flow % is the target of alias %, which starts it; it was not deleted', p_flow_slug, carried
      using errcode = '55000',
        hint = format('point the alias at another version first, e.g. select pgflow.activate_alias(%L, %L, %L); then delete the flow',
                      carried, p_flow_slug, other);
  end if;
  delete from pgflow.aliases a where a.alias = carried;
end;
$$;

-- Deletes one concrete flow with its data (see the top of this file). Refused while another flow's
-- step runs it as a child (0290_child_flows.sql), or while an alias points at it and other versions
-- carry that alias; an alias whose only version it is goes with it
-- (pgflow._release_aliases).
create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform pg_advisory_xact_lock(pgflow._flow_lock_key(delete_flow_and_data.flow_slug));
  if not exists (select 1 from pgflow.flows f where f.flow_slug = delete_flow_and_data.flow_slug) then
    raise exception 'flow % does not exist', coalesce(quote_literal(delete_flow_and_data.flow_slug), 'NULL')
      using errcode = '22023';
  end if;
  perform pgflow._refuse_deleting_child_flow(delete_flow_and_data.flow_slug);
  perform pgflow._release_aliases(delete_flow_and_data.flow_slug);
  perform pgflow._delete_flow_data(delete_flow_and_data.flow_slug);
end;
$$;

-- ---- schemas/0740_prune.sql
-- Retention. Pruning selects through task snapshots, so one flow's retention never reaches another
-- flow's messages or unknown messages in a shared archive.

-- Deletes terminal runs (completed, failed or cancelled) that ended before now() - retention, with
-- their tasks (and so their attempt history) and their own queue and archive rows, oldest first,
-- at most max_runs of them (NULL: all). Returns the number of runs deleted. A bounded call is one
-- short transaction: a first prune of months of history, or a daily one on a busy project, calls
-- it until it returns less than max_runs, each call committed, so no transaction holds millions of
-- row versions (and vacuum's horizon) at once. Runs another prune is deleting are skipped.
create or replace function pgflow.prune_data_older_than(retention interval, max_runs integer)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  old_runs uuid[];
  cutoff timestamptz;
  grp record;
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_data_older_than: retention must be a non-negative interval, got %', coalesce(retention::text, 'NULL')
      using errcode = '22023';
  end if;
  if max_runs is not null and max_runs < 1 then
    raise exception 'prune_data_older_than: max_runs must be at least 1 or NULL (all), got %', max_runs
      using errcode = '22023', hint = 'prune in batches of a few thousand runs, calling again until fewer come back';
  end if;
  cutoff := now() - retention;
  -- Oldest first along runs_started_at_idx: a bounded call stops after max_runs matches.
  select array_agg(o.run_id) into old_runs
  from (
    select r.run_id from pgflow.runs r
    where r.status in ('completed', 'failed', 'cancelled')
      and coalesce(r.completed_at, r.failed_at, r.cancelled_at) < cutoff
    order by r.started_at
    limit max_runs
    for update skip locked
  ) o;
  if old_runs is null then
    return 0;
  end if;
  for grp in
    select t.queue_name, array_agg(t.message_id) as ids
    from pgflow.step_tasks t
    where t.run_id = any (old_runs) and t.message_id is not null
    group by t.queue_name
  loop
    perform pgflow._purge_tracked_messages(grp.queue_name, grp.ids);
  end loop;
  delete from pgflow.step_tasks t where t.run_id = any (old_runs);
  delete from pgflow.step_states ss where ss.run_id = any (old_runs);
  delete from pgflow.runs r where r.run_id = any (old_runs);
  return cardinality(old_runs);
end;
$$;

-- The same, all at once in one transaction (the form from before batches).
create or replace function pgflow.prune_data_older_than(retention interval)
returns integer
language sql
volatile
set search_path = ''
as $$
  select pgflow.prune_data_older_than(retention, null::integer)
$$;

-- Queue-wide maintenance for one declared shared queue: deletes its archive rows archived before
-- now() - older_than, whoever sent them. Returns the number of rows deleted.
create or replace function pgflow.prune_shared_queue_archive(queue_name text, older_than interval)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  deleted bigint;
begin
  if not exists (select 1 from pgflow.shared_queues s where s.queue_name = prune_shared_queue_archive.queue_name) then
    raise exception 'queue % is not a declared shared queue', coalesce(quote_literal(prune_shared_queue_archive.queue_name), 'NULL')
      using errcode = '22023', hint = 'use prune_data_older_than for flow data; this prunes one shared queue''s archive';
  end if;
  if older_than is null or older_than < interval '0' then
    raise exception 'prune_shared_queue_archive: older_than must be a non-negative interval' using errcode = '22023';
  end if;
  execute format('with gone as (delete from pgmq.%I where archived_at < now() - $1 returning 1) select count(*) from gone',
                 pgmq.format_table_name(prune_shared_queue_archive.queue_name, 'a'))
  into deleted using older_than;
  return deleted;
end;
$$;

-- ---- schemas/0750_queue_support_set.sql
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

-- ---- schemas/0800_coverage.sql
-- The coverage check: per queue, the (flow, step) pairs that need a handler and whether a live
-- worker serves each. A point-in-time operator check, read-only; not a startup gate.
--
-- Pairs: every persisted route (any stored flow can be started), plus the pairs of tasks that are
-- still waiting (for capacity: counted with the queued ones, work like them), queued or started
-- in started runs (work waiting: snapshots never move, so the retries of
-- a route changed since still arrive on the queue the task was created for).
-- Live: a live worker on that queue (pgflow._worker_live: not stopped or deprecated, heartbeat
-- fresher than stale_after; NULL, the default, is the live window of 30 s, pgflow._live_window)
-- lists the pair in its support set.
-- Stale: a started task whose last worker is not seen any more (pgflow._worker_seen: heartbeat
-- older than stale_after, stopped, or no worker row names it); stalled recovery takes it back
-- after the step's timeout + 30 s. A deprecated worker still counts as seen: it finishes what it
-- holds.
-- Status, the first that applies (one place decides it, so the CLI, status and the dashboard agree):
--   MISSING  work waiting and no live worker serves the pair: nothing will run it;
--   STALE    a live worker serves the pair, but a started task is held by a worker that is gone;
--   PARTIAL  a live worker serves the pair, but not every live worker on the queue does: the
--            others read its messages too and hand them back (a moment of this is every deploy
--            that changes a handler set; left so, each of their reads is wasted). Give every
--            worker on a queue the same handler set;
--   ok       a live worker serves the pair (and every live worker on the queue does);
--   idle     a route with no work waiting and no live worker: nothing to do until a run starts.
create or replace function pgflow.queue_coverage(
  queue_name text default null,
  stale_after interval default null
)
returns table (
  queue_name text,
  flow_slug text,
  step_slug text,
  routed boolean,
  queued_tasks bigint,
  started_tasks bigint,
  stale_tasks bigint,
  live_workers bigint,
  served boolean,
  status text
)
language sql
stable
set search_path = ''
as $$
  -- Only the recently seen workers, read once by heartbeat range: not the whole worker history.
  with recent as materialized (
    select w.worker_id, w.queue_name, w.supported, w.live
    from pgflow._recent_workers(clock_timestamp() - coalesce(stale_after, pgflow._live_window())) w
  ),
  -- Work waiting, counted in one pass over the open tasks of started runs.
  work as (
    select t.queue_name, t.flow_slug, t.step_slug,
           count(*) filter (where t.status in ('queued', 'waiting')) as queued,
           count(*) filter (where t.status = 'started') as started,
           count(*) filter (where t.status = 'started' and not exists (
             select 1 from recent w where w.worker_id = t.last_worker_id)) as stale
    from pgflow.step_tasks t
    join pgflow.runs r on r.run_id = t.run_id
    where t.status in ('waiting', 'queued', 'started') and r.status = 'started'
      and (queue_coverage.queue_name is null or t.queue_name = queue_coverage.queue_name)
    group by t.queue_name, t.flow_slug, t.step_slug
  ),
  pairs as (
    select s.queue_name, s.flow_slug, s.step_slug from pgflow.steps s
    -- A step that waits in SQL (0280_events.sql) needs no handler and no worker.
    where s.kind = 'task' and (queue_coverage.queue_name is null or s.queue_name = queue_coverage.queue_name)
    union
    select k.queue_name, k.flow_slug, k.step_slug from work k
  ),
  counted as (
    select p.queue_name, p.flow_slug, p.step_slug,
           exists (select 1 from pgflow.steps s
                   where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug
                     and s.queue_name = p.queue_name) as routed,
           coalesce(k.queued, 0) as queued,
           coalesce(k.started, 0) as started,
           coalesce(k.stale, 0) as stale,
           (select count(*) from recent w
            where w.queue_name = p.queue_name and w.live
              and w.supported @> jsonb_build_array(jsonb_build_array(p.flow_slug, p.step_slug))) as live,
           (select count(*) from recent w where w.queue_name = p.queue_name and w.live) as on_queue
    from pairs p
    left join work k
      on k.queue_name = p.queue_name and k.flow_slug = p.flow_slug and k.step_slug = p.step_slug
  )
  select c.queue_name, c.flow_slug, c.step_slug, c.routed, c.queued, c.started, c.stale, c.live,
         c.live > 0,
         case when c.live = 0 and c.queued + c.started > 0 then 'MISSING'
              when c.stale > 0 then 'STALE'
              when c.live > 0 and c.live < c.on_queue then 'PARTIAL'
              when c.live > 0 then 'ok'
              else 'idle' end
  from counted c
  order by c.queue_name, c.flow_slug, c.step_slug
$$;

-- ---- schemas/0810_deploy_fence.sql
-- Deploy fence helpers. The procedure (docs/operations.md): begin the fence for the complete set of
-- functions being replaced → wait until deploy_fence_status says drained → deploy registries that
-- carry both old and new flow versions while old runs drain → end the fence.

-- Records the functions' enabled flags, disables them and deprecates their workers (they stop
-- polling and finish what they hold). Returns the fence id.
create or replace function pgflow.begin_deploy_fence(function_names text[], note text default null)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  fence bigint;
  busy text[];
begin
  if function_names is null or cardinality(function_names) = 0 then
    raise exception 'begin_deploy_fence: name at least one worker function' using errcode = '22023';
  end if;
  select array_agg(coalesce(quote_literal(f), 'NULL')) into busy
  from unnest(function_names) f where not pgflow.is_valid_function_name(f);
  if busy is not null then
    raise exception 'begin_deploy_fence: invalid function name(s) %', array_to_string(busy, ', ')
      using errcode = '22023', hint = 'use 1-128 letters, digits, "_" or "-" (the Edge Function''s name)';
  end if;
  -- Functions never registered yet get a row, so the fence also keeps them from registering.
  insert into pgflow.worker_functions (function_name)
  select distinct f from unnest(function_names) f
  on conflict (function_name) do nothing;
  perform 1 from pgflow.worker_functions wf where wf.function_name = any (function_names)
  order by wf.function_name for update;

  select array_agg(distinct ff.function_name order by ff.function_name) into busy
  from pgflow.deploy_fence_functions ff join pgflow.deploy_fences f on f.fence_id = ff.fence_id
  where f.ended_at is null and ff.function_name = any (function_names);
  if busy is not null then
    raise exception 'begin_deploy_fence: % already inside an open deploy fence', busy
      using errcode = '55000', hint = 'end that fence first (pgflow.end_deploy_fence)';
  end if;

  insert into pgflow.deploy_fences (note) values (note) returning fence_id into fence;
  insert into pgflow.deploy_fence_functions (fence_id, function_name, was_enabled)
  select fence, wf.function_name, wf.enabled
  from pgflow.worker_functions wf where wf.function_name = any (function_names);
  update pgflow.worker_functions wf set enabled = false, updated_at = now()
  where wf.function_name = any (function_names);
  update pgflow.workers w set deprecated_at = clock_timestamp()
  where w.function_name = any (function_names) and w.deprecated_at is null and w.stopped_at is null;
  return fence;
end;
$$;

-- Per fenced function: live workers, counting the deprecated ones that still drain (seen within
-- stale_after, pgflow._worker_seen; NULL, the default, is the live window, pgflow._live_window),
-- and started tasks held by its workers. drained = both are zero.
create or replace function pgflow.deploy_fence_status(fence_id bigint, stale_after interval default null)
returns table (function_name text, was_enabled boolean, enabled boolean, live_workers bigint, started_tasks bigint, drained boolean)
language sql
stable
set search_path = ''
as $$
  -- Only the recently seen workers, read once by heartbeat range: not the whole worker history.
  with recent as materialized (
    select w.function_name
    from pgflow._recent_workers(clock_timestamp() - coalesce(stale_after, pgflow._live_window())) w
  )
  select ff.function_name, ff.was_enabled, wf.enabled, lw.n, st.n, lw.n = 0 and st.n = 0
  from pgflow.deploy_fence_functions ff
  join pgflow.worker_functions wf on wf.function_name = ff.function_name
  cross join lateral (
    select count(*) as n from recent w where w.function_name = ff.function_name
  ) lw
  cross join lateral (
    select count(*) as n from pgflow.step_tasks t join pgflow.workers w on w.worker_id = t.last_worker_id
    where w.function_name = ff.function_name and t.status = 'started'
  ) st
  where ff.fence_id = deploy_fence_status.fence_id
  order by ff.function_name
$$;

-- Restores exactly the recorded enabled flags and closes the fence.
create or replace function pgflow.end_deploy_fence(fence_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
begin
  update pgflow.deploy_fences f set ended_at = now()
  where f.fence_id = end_deploy_fence.fence_id and f.ended_at is null;
  if not found then
    raise exception 'deploy fence % does not exist or has already ended', end_deploy_fence.fence_id
      using errcode = '22023';
  end if;
  update pgflow.worker_functions wf set enabled = ff.was_enabled, updated_at = now()
  from pgflow.deploy_fence_functions ff
  where ff.fence_id = end_deploy_fence.fence_id and wf.function_name = ff.function_name;
end;
$$;

-- ---- schemas/0820_ensure_workers.sql
-- The keep-alive. Picks the enabled worker functions that have no live worker and whose debounce
-- has passed, records the invocation, and (where Supabase provides pg_net and the project URL is
-- in Vault) pings each function over HTTP so it starts a worker. A disabled function is never
-- pinged: that is what keeps a deploy fence closed. net.http_post and vault.decrypted_secrets are
-- used only when they are members of the pg_net and supabase_vault extensions
-- (pgflow._trusted_integration): this runs as its owner, often from pg_cron, and must never run a
-- function someone planted under those names.
create or replace function pgflow.ensure_workers()
returns table (function_name text, pinged boolean)
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  fn record;
  base_url text;
  auth text;
  can_ping boolean := pgflow._trusted_integration('pg_net') and pgflow._trusted_integration('vault');
begin
  if can_ping then
    execute $q$select max(decrypted_secret) filter (where name = 'supabase_project_url'),
                      coalesce(max(decrypted_secret) filter (where name = 'pgflow_auth_secret'),
                               max(decrypted_secret) filter (where name = 'supabase_service_role_key'))
               from vault.decrypted_secrets$q$ into base_url, auth;
    can_ping := base_url is not null and auth is not null;
  end if;
  for fn in
    update pgflow.worker_functions wf set last_invoked_at = now()
    where wf.enabled
      and (wf.last_invoked_at is null or wf.last_invoked_at < now() - wf.debounce)
      -- Read by heartbeat range (pgflow._recent_workers): this runs every few seconds, and must
      -- not scan every worker the function ever had.
      and not exists (
        select 1 from pgflow._recent_workers(clock_timestamp() - wf.debounce) w
        where w.function_name = wf.function_name and w.live)
    returning wf.function_name
  loop
    if can_ping then
      execute 'select net.http_post(url => $1, headers => $2, body => ''{}''::jsonb)'
      using rtrim(base_url, '/') || '/functions/v1/' || fn.function_name,
            jsonb_build_object('Content-Type', 'application/json', 'Authorization', 'Bearer ' || auth);
    end if;
    function_name := fn.function_name;
    pinged := can_ping;
    return next;
  end loop;
end;
$$;

-- The pg_cron schedule of a keep-alive interval: '<n> seconds' for whole seconds from 1 to 59
-- (pg_cron 1.5 or later runs those), cron syntax for whole minutes that divide an hour. Anything
-- else is refused, naming the value and what is accepted: pg_cron could only run it at another
-- interval than the one asked for (119.6 seconds would become every 2 minutes).
create or replace function pgflow._keep_alive_schedule(p_keep_alive interval)
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  seconds numeric := extract(epoch from p_keep_alive);
begin
  if seconds = pg_catalog.trunc(seconds) then
    if seconds between 1 and 59 then
      return seconds::integer || ' seconds';
    end if;
    if seconds between 60 and 3600 and seconds % 60 = 0 and 60 % (seconds / 60) = 0 then
      return case seconds when 60 then '* * * * *' when 3600 then '0 * * * *'
                          else '*/' || (seconds::integer / 60) || ' * * * *' end;
    end if;
  end if;
  raise exception 'keep_alive % is not an interval pg_cron can run exactly', coalesce(p_keep_alive::text, 'NULL')
    using errcode = '22023',
      hint = 'use whole seconds from 1 to 59 (pg_cron 1.5 or later), or whole minutes that divide an hour (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60)';
end;
$$;

-- Schedules ensure_workers, requeue_stalled_tasks and fire_due_schedules with pg_cron (Supabase
-- has it; elsewhere the worker's own periodic recovery and schedule ticks, and an external
-- keep-alive, do the same job). The keep-alive's
-- schedule is _keep_alive_schedule's, checked before anything else; seconds need pg_cron 1.5 or
-- later (older versions run a job at most once a minute: Debian 12's postgresql-15-cron is 1.4).
create or replace function pgflow.schedule_maintenance(keep_alive interval default '5 seconds')
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  keep_alive_schedule text := pgflow._keep_alive_schedule(keep_alive);
  version text;
  sub_minute boolean;
begin
  if to_regprocedure('cron.schedule(text, text, text)') is null then
    raise exception 'pg_cron is not installed' using errcode = '0A000',
      hint = 'enable pg_cron, or call pgflow.ensure_workers() from an external scheduler';
  end if;
  -- Called with the caller's rights (usually the owner's): only pg_cron's own function.
  if not pgflow._trusted_integration('pg_cron') then
    raise exception 'cron.schedule(text, text, text) is not a member of the pg_cron extension; it was not called'
      using errcode = '42501',
        hint = 'a function of that name was created outside pg_cron: drop it and create extension pg_cron, or call pgflow.ensure_workers() from an external scheduler';
  end if;
  select e.extversion into version from pg_catalog.pg_extension e where e.extname = 'pg_cron';
  sub_minute := pg_catalog.string_to_array(pg_catalog.split_part(version, '-', 1), '.')::integer[]
                >= array[1, 5];
  if keep_alive_schedule like '% seconds' and not sub_minute then
    raise exception 'keep_alive % needs pg_cron 1.5 or later (this database has pg_cron %, which runs jobs at most once a minute)',
      keep_alive, version
      using errcode = '22023',
        hint = 'pass keep_alive => interval ''1 minute'', or upgrade pg_cron';
  end if;
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_ensure_workers', keep_alive_schedule, 'select pgflow.ensure_workers()';
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_requeue_stalled_tasks', case when sub_minute then '15 seconds' else '* * * * *' end,
        'select pgflow.requeue_stalled_tasks()';
  -- One job fires every schedule's ticks (0270_schedules.sql); workers tick too, harmlessly.
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_fire_due_schedules', case when sub_minute then '1 seconds' else '* * * * *' end,
        'select pgflow.fire_due_schedules()';
end;
$$;

-- ---- schemas/0850_run_events.sql
-- Run events: a change of a run's or a step's status wakes whoever watches that run.
--
-- A notification is a wake-up hint, not the event itself: clients read the run with
-- pgflow.get_run and build their events by comparing what they saw before with what they see now
-- (src/client/), so a lost notification, a reconnect or a late subscriber only delays an event,
-- never loses it. That is why the payload is just the run id and never holds inputs, outputs or
-- errors (pg_notify payloads are limited to 8000 bytes, and a listener needs nothing else).
--
-- Only while someone waits for that run (a session registered with pgflow.listen_start, see
-- 0045_listeners.sql): a NOTIFY makes the commit wait for a lock held across every other
-- notifying commit of the server, and most runs have no watcher. A plain LISTEN, without
-- listen_start, hears nothing.
--
-- One channel per run, pgflow_run:<uuid> (47 bytes, under the 63-byte limit on channel names): a
-- client that waits for one run hears only that run, not every run of the database. Postgres
-- delivers identical notifications (same channel, same payload) once per transaction, so a
-- transaction that moves a run through several states (complete_task: the step completes, its
-- dependents start, the run completes) sends one notification for it.
--
-- Where Supabase Realtime is installed (realtime.send exists and is the platform's own, checked on
-- every call by pgflow._trusted_integration so a project that adds Realtime later needs no
-- migration, and a function merely planted under that name is never called), the same hint is
-- broadcast on the private topic pgflow_run:<uuid>, once per run per transaction.
--
-- Row-level triggers limited to the status column (`update of status`) with a `when` clause that
-- Postgres evaluates without calling any function: the function runs only for a real status
-- change (about three times per step), never for the counters the hot path decrements on every
-- task (remaining_tasks, remaining_deps, remaining_steps). Measured against statement-level
-- triggers with transition tables, which fire for every statement that touches the tables and
-- copy their rows: those cost about twice as much (bench/trigger_cost.ts, bench/results.md).

-- Broadcasts a run's hint through Supabase Realtime, once per transaction.
create or replace function pgflow._broadcast_run(p_run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  sent text;
begin
  -- realtime.send inserts a message each time it is called: remember (for this transaction only)
  -- which runs were announced already. A session could forge this setting, but that only silences
  -- its own broadcasts; it is never taken as proof that realtime.send may be called.
  sent := coalesce(current_setting('pgflow.realtime_sent', true), '');
  if position(p_run_id::text in sent) > 0 then
    return;
  end if;
  if not pgflow._trusted_integration('realtime') then
    return;
  end if;
  -- Arguments of exactly the verified signature's types: an exact match is always the function
  -- chosen, whatever other overloads the schema holds.
  perform realtime.send(jsonb_build_object('run_id', p_run_id), 'run_changed'::text,
    ('pgflow_run:' || p_run_id::text)::text, true);
  perform set_config('pgflow.realtime_sent', sent || p_run_id::text || ',', true);
end;
$$;

create or replace function pgflow._run_changed()
returns trigger
language plpgsql
volatile
-- Decides as pgflow._announce does (pgflow._notify_needed, inlined) rather than calling it: this
-- fires about twice per task (a step's status, then the run's), and a nested call of a function
-- with its own settings costs a quarter of what the whole trigger does. security definer for the
-- same reason as _announce: it reads pgflow.listeners whichever role changed the run.
security definer
set search_path = ''
as $$
declare
  run_channel text := 'pgflow_run:' || new.run_id::text;
begin
  if (select n from pgflow._notify_needed(run_channel) n) then
    perform pg_notify(run_channel, new.run_id::text);
  end if;
  -- A schema lookup in the syscache: the common case (no Realtime) costs nothing more.
  if to_regnamespace('realtime') is not null then
    perform pgflow._broadcast_run(new.run_id);
  end if;
  return null;
end;
$$;

create or replace trigger runs_inserted_notify
  after insert on pgflow.runs
  for each row execute function pgflow._run_changed();

create or replace trigger runs_status_notify
  after update of status on pgflow.runs
  for each row when (old.status is distinct from new.status)
  execute function pgflow._run_changed();

create or replace trigger step_states_status_notify
  after update of status on pgflow.step_states
  for each row when (old.status is distinct from new.status)
  execute function pgflow._run_changed();

-- ---- schemas/0860_get_run.sql
-- Reading a run: the run with every step's state, output, error and attempt history as one JSON
-- document, for the client (src/client/) and for supabase-js (rpc('get_run', { run_id })). Null for
-- an unknown run.
--
-- Timestamps are UTC text with microseconds ("2026-12-03T08:00:00.123456Z"): they sort as text
-- and keep the order of events that happened within one millisecond, which a JavaScript Date
-- would lose. Steps come in definition order, which puts every step after its dependencies.
--
-- security invoker: the caller needs select on pgflow.runs, step_states, steps, step_tasks,
-- task_attempts, concurrency_limits, rate_limits and rate_limit_windows, and execute on
-- waiting_reason, rate_waiting_reason, _waiting_why and _rate_recent (service_role has them, see
-- 0900_privileges); a wrapper for other roles decides which runs they may read
-- (docs/permissions.md).

create or replace function pgflow.get_run(run_id uuid)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'run_id', r.run_id,
    'flow_slug', r.flow_slug,
    'status', r.status,
    'input', r.input,
    'output', r.output,
    'error_message', r.error_message,
    'remaining_steps', r.remaining_steps,
    'started_at', to_char(r.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'completed_at', to_char(r.completed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'failed_at', to_char(r.failed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'cancelled_at', to_char(r.cancelled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'cancel_reason', r.cancel_reason,
    'restart_of_run_id', r.restart_of_run_id,
    'restart_mode', r.restart_mode,
    'started_as', r.started_as,
    -- The runs made from this one by retry_run or resume_run ("retried as …"), newest first, at
    -- most 20; list_runs lists them the same way. runs_restart_of_idx holds only restarts.
    'restarts', (select coalesce(jsonb_agg(jsonb_build_object('run_id', x.run_id, 'restart_mode', x.restart_mode,
                   'status', x.status, 'started_at', to_char(x.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                 order by x.started_at desc, x.run_id), '[]'::jsonb)
                 from (select * from pgflow.runs x2 where x2.restart_of_run_id = r.run_id
                       order by x2.started_at desc, x2.run_id limit 20) x),
    'steps', coalesce((
      select jsonb_agg(jsonb_build_object(
        'step_slug', ss.step_slug,
        'step_index', s.step_index,
        'step_type', s.step_type,
        'status', ss.status,
        'output', ss.output,
        'error_message', ss.error_message,
        'skip_reason', ss.skip_reason,
        'initial_tasks', ss.initial_tasks,
        'remaining_tasks', ss.remaining_tasks,
        'started_at', to_char(ss.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'completed_at', to_char(ss.completed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'failed_at', to_char(ss.failed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'skipped_at', to_char(ss.skipped_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'cancelled_at', to_char(ss.cancelled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'reused', ss.reused,
        -- A waiting step (0280_events.sql): the event it waits for ('' for a sleep), its
        -- correlation key and deadline; waiting since started_at. NULL for a task step.
        'kind', s.kind,
        'waiting_for', ss.waiting_for,
        'wait_key', ss.wait_key,
        'wait_until', to_char(ss.wait_until at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        -- Its tasks waiting for capacity or for a rate limit's window (flow control), per (scope,
        -- key), with the reason waiting_tasks gives: a waiting task has no message, so it is
        -- neither queued nor lost. Only a started step of a limited step can have any, so no
        -- other step reads its tasks.
        'waiting', case when ss.status = 'started'
                             and (s.concurrency_scope is not null or s.rate_scope is not null) then coalesce((
          select jsonb_agg(jsonb_build_object(
            'limit_scope', w.scope,
            'limit_key', w.key,
            'tasks', w.n,
            'since', to_char(w.oldest at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
            'in_flight', y.in_flight,
            'max_running', y.max_running,
            'reason', y.reason
          ) order by w.oldest, w.scope, w.key)
          from (select t.not_before is not null as rate,
                       case when t.not_before is not null then t.rate_scope else t.limit_scope end as scope,
                       case when t.not_before is not null then t.rate_key else t.limit_key end as key,
                       count(*) as n, min(t.queued_at) as oldest, min(t.not_before) as next_at
                from pgflow.step_tasks t
                where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.status = 'waiting'
                group by 1, 2, 3) w
          cross join lateral pgflow._waiting_why(w.rate, w.scope, w.key, w.next_at) y
        ), '[]'::jsonb) else '[]'::jsonb end,
        -- The attempts that ended other than by completing (the newest 100 of the step).
        'attempts', coalesce((
          select jsonb_agg(jsonb_build_object(
            'task_index', a.task_index,
            'attempt', a.attempt,
            'worker_id', a.worker_id,
            'started_at', to_char(a.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
            'ended_at', to_char(a.ended_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
            'outcome', a.outcome,
            'error_message', a.error_message,
            'error_stack', a.error_stack
          ) order by a.task_index, a.attempt)
          from (select * from pgflow.task_attempts a2
                where a2.run_id = ss.run_id and a2.step_slug = ss.step_slug
                order by a2.ended_at desc limit 100) a
        ), '[]'::jsonb)
      ) || case when s.kind = 'flow' then jsonb_build_object(
        -- A child-flow step (0290_child_flows.sql): the flow it runs and its child runs by task
        -- index (the first 1,000; with their status now).
        'child_flow', s.child_flow,
        'children', coalesce((
          select jsonb_agg(jsonb_build_object('task_index', t.task_index, 'run_id', t.child_run_id,
                                              'status', c.status) order by t.task_index)
          from (select * from pgflow.step_tasks t2
                where t2.run_id = ss.run_id and t2.step_slug = ss.step_slug and t2.child_run_id is not null
                order by t2.task_index limit 1000) t
          left join pgflow.runs c on c.run_id = t.child_run_id
        ), '[]'::jsonb)) else '{}'::jsonb end
      order by s.step_index)
      from pgflow.step_states ss
      join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
      where ss.run_id = r.run_id
    ), '[]'::jsonb)
  ) || case when r.parent_run_id is not null then jsonb_build_object(
    -- A child run (0290_child_flows.sql): the run, step and task waiting for it.
    'parent', jsonb_build_object('run_id', r.parent_run_id, 'step_slug', r.parent_step_slug,
                                 'task_index', r.parent_task_index)) else '{}'::jsonb end
  from pgflow.runs r
  where r.run_id = get_run.run_id
$$;

-- The same document as text: what the supabase-js client calls (rpc('get_run_text', { run_id })).
-- PostgREST answers with it as one JSON string, which supabase-js's JSON.parse reads exactly; the
-- document itself would be read by JSON.parse whole, and V8's can read an escaped key of an input
-- or output as another key, and rounds numbers beyond 2^53. The client reads the text with its
-- own exact parser. Null for an unknown run; security invoker, like get_run.
create or replace function pgflow.get_run_text(run_id uuid)
returns text
language sql
stable
set search_path = ''
as $$
  select pgflow.get_run(get_run_text.run_id)::text
$$;

-- Searching runs, newest first: by flow, status, start time, run id prefix and whether the run was
-- restarted (retried or resumed) already (each optional), at most max_rows (1 to 1,000). Each run
-- as a small JSON document (no input or output) with the runs made from it (restarts), times as
-- get_run writes them. security invoker, like get_run. flow_slug may name an alias: then the runs
-- of every version carrying it (an operator asking for "order" means the order flow, whichever
-- version ran, and however the run was started).
create or replace function pgflow.list_runs(
  flow_slug text default null,
  status text default null,
  since timestamptz default null,
  run_id_prefix text default null,
  max_rows integer default 50,
  restarted boolean default null
)
returns setof jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  slugs text[];
begin
  if list_runs.flow_slug is not null then
    slugs := array[list_runs.flow_slug]
      || array(select f.flow_slug from pgflow.flows f where f.alias = list_runs.flow_slug);
  end if;
  if max_rows is null or max_rows < 1 or max_rows > 1000 then
    raise exception 'list_runs: max_rows must be between 1 and 1000, got %', coalesce(max_rows::text, 'NULL')
      using errcode = '22023';
  end if;
  if list_runs.status is not null
     and list_runs.status not in ('started', 'completed', 'failed', 'cancelled') then
    raise exception 'list_runs: unknown status %', quote_literal(list_runs.status)
      using errcode = '22023', hint = 'a run is started, completed, failed or cancelled';
  end if;
  if run_id_prefix is not null and run_id_prefix !~ '^[0-9a-fA-F-]{1,36}$' then
    raise exception 'list_runs: run_id_prefix % is not the start of a run id', quote_literal(run_id_prefix)
      using errcode = '22023', hint = 'give hexadecimal digits and dashes, e.g. ''3f2a''';
  end if;
  return query
  select jsonb_build_object(
    'run_id', r.run_id,
    'flow_slug', r.flow_slug,
    'status', r.status,
    'started_at', to_char(r.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'completed_at', to_char(r.completed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'failed_at', to_char(r.failed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'cancelled_at', to_char(r.cancelled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'restart_of_run_id', r.restart_of_run_id,
    'restart_mode', r.restart_mode,
    'started_as', r.started_as,
    'error_message', r.error_message,
    -- As in get_run (not a shared function: the caller would need the right to execute it).
    'restarts', (select coalesce(jsonb_agg(jsonb_build_object('run_id', x.run_id, 'restart_mode', x.restart_mode,
                   'status', x.status, 'started_at', to_char(x.started_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                 order by x.started_at desc, x.run_id), '[]'::jsonb)
                 from (select * from pgflow.runs x2 where x2.restart_of_run_id = r.run_id
                       order by x2.started_at desc, x2.run_id limit 20) x)
  )
  from pgflow.runs r
  -- One probe of runs_restart_of_idx per run looked at, as the newest runs are read: written as
  -- a lateral join, because an EXISTS under the OR below would be planned as a hash of every
  -- restart ever made (tens of milliseconds with a long history).
  left join lateral (select true as yes from pgflow.runs x where x.restart_of_run_id = r.run_id limit 1) was
    on list_runs.restarted is not null
  where (slugs is null or r.flow_slug = any (slugs))
    and (list_runs.status is null or r.status = list_runs.status)
    and (since is null or r.started_at >= since)
    and (run_id_prefix is null or r.run_id::text like lower(run_id_prefix) || '%')
    and (list_runs.restarted is null or coalesce(was.yes, false) = list_runs.restarted)
  order by r.started_at desc, r.run_id
  limit max_rows;
end;
$$;

-- ---- schemas/0870_trace_spans.sql
-- Run and step spans (docs/telemetry.md). A run and its steps outlive any process, so no span is
-- held open for them: once one has ended, the worker whose report ended it emits its span from the
-- rows' times. Two workers may settle the last tasks of a run at once; a row here says whose the
-- span is, so each is emitted once. Written only by workers that export spans: without telemetry
-- this table stays empty and nothing on the task path reads it.

create table if not exists pgflow.emitted_spans (
  run_id uuid not null,
  -- The step's slug, or '' for the run's own span (a slug is never empty).
  step_slug text not null,
  constraint emitted_spans_pkey primary key (run_id, step_slug),
  -- Pruning or deleting a run drops its markers with it.
  constraint emitted_spans_run_fkey foreign key (run_id) references pgflow.runs (run_id)
    on delete cascade
);

-- One ended span, as claim_ended_spans and sweep_ended_spans hand it out: the step's, or the run's
-- ('' as its step_slug); its times in microseconds since the epoch; the run's flow, alias and
-- traceparent; the step's task count (null for the run).
do $$
begin
  create type pgflow.ended_span as (
    run_id uuid,
    step_slug text,
    status text,
    started_us bigint,
    ended_us bigint,
    flow_slug text,
    started_as text,
    traceparent text,
    tasks integer
  );
exception when duplicate_object then
  null;
end
$$;

-- The spans reports may have ended, each returned to one caller only: for each (run_ids[i],
-- step_slugs[i]), that step once it is completed, failed, skipped or cancelled; and once the run
-- itself has ended, the run ('' as its step_slug) with every ended step of it not yet handed out
-- (steps skipped or cancelled without a report of their own). One call takes a worker's whole
-- batch of reports: one transaction, one commit. Times are microseconds since the epoch; a step
-- that never started (skipped, cancelled) starts when it ended.
create or replace function pgflow.claim_ended_spans(run_ids uuid[], step_slugs text[])
returns setof pgflow.ended_span
language sql
volatile
set search_path = ''
as $$
  with reported as (
    select distinct u.run_id, u.step_slug
    from unnest(claim_ended_spans.run_ids, claim_ended_spans.step_slugs) as u (run_id, step_slug)
  ),
  run as (
    select r.run_id, r.flow_slug, r.status, r.started_as, r.traceparent, r.started_at,
           coalesce(r.completed_at, r.failed_at, r.cancelled_at) as ended_at
    from pgflow.runs r
    where r.run_id in (select reported.run_id from reported)
  ),
  ended as (
    select ss.run_id, ss.step_slug, ss.status,
           coalesce(ss.started_at, ss.completed_at, ss.failed_at, ss.skipped_at, ss.cancelled_at)
             as started_at,
           coalesce(ss.completed_at, ss.failed_at, ss.skipped_at, ss.cancelled_at) as ended_at,
           ss.initial_tasks
    from pgflow.step_states ss
    join run on run.run_id = ss.run_id
    where ss.status in ('completed', 'failed', 'skipped', 'cancelled')
      and (run.status <> 'started'
           or exists (select 1 from reported
                      where reported.run_id = ss.run_id and reported.step_slug = ss.step_slug))
    union all
    select run.run_id, '', run.status, run.started_at, run.ended_at, null
    from run
    where run.status <> 'started'
  ),
  claimed as (
    insert into pgflow.emitted_spans (run_id, step_slug)
    select e.run_id, e.step_slug from ended e where e.ended_at is not null
    on conflict on constraint emitted_spans_pkey do nothing
    returning emitted_spans.run_id, emitted_spans.step_slug
  )
  select e.run_id, e.step_slug, e.status,
         (extract(epoch from e.started_at) * 1000000)::bigint,
         (extract(epoch from e.ended_at) * 1000000)::bigint,
         run.flow_slug, run.started_as, run.traceparent, e.initial_tasks
  from ended e
  join claimed c on c.run_id = e.run_id and c.step_slug = e.step_slug
  join run on run.run_id = e.run_id
  -- A run's span after its steps': in one request, its children come first.
  order by e.run_id, e.step_slug = '', e.started_at;
$$;

-- Runs end without any worker's report too: cancel_run (and its child runs with it), stalled
-- recovery failing a run, a wait timing out in the tick, an event or a child run completing the
-- last step. Their spans are found by a sweep that workers exporting spans call on a timer: it
-- walks the runs by start time, a bounded page per call, and claims through claim_ended_spans the
-- ended runs whose span nobody took. One row, shared by every worker, so the pages of a pass are
-- not walked once per worker.
create table if not exists pgflow.span_sweep (
  only_row boolean not null default true,
  -- When the first sweep ran: runs that ended before it are not the sweep's, so turning spans on
  -- does not send the spans of a backlog of old runs.
  since timestamptz not null default now(),
  -- Where the current pass stopped, by (started_at, run_id); null: the next call starts a pass.
  scanned_at timestamptz,
  scanned_run uuid,
  constraint span_sweep_pkey primary key (only_row),
  constraint span_sweep_one_row check (only_row),
  constraint span_sweep_cursor_whole check ((scanned_at is null) = (scanned_run is null))
);

-- One page of the sweep: looks at up to max_scanned runs started within horizon, after where the
-- last call stopped (the runs_started_at_idx index; no index on the end times, which every run's
-- end would pay for with telemetry off), and claims the spans of the ended ones not yet emitted,
-- with their ended steps not yet emitted. At the newest run the pass ends and the next call starts
-- over: a run that was still started when a pass saw it is found by the next pass. A caller that
-- finds another one sweeping returns nothing at once (skip locked) rather than waiting.
create or replace function pgflow.sweep_ended_spans(
  max_scanned integer default 1000,
  horizon interval default '7 days'
)
returns setof pgflow.ended_span
language plpgsql
volatile
set search_path = ''
-- The page's bounds change every call; a generic plan, made for unknown bounds, took 37.5 ms a call
-- against 7.8 ms with 200,000 runs kept (bench/telemetry_sweep.ts).
set plan_cache_mode = force_custom_plan
as $$
declare
  sweep pgflow.span_sweep;
  scanned integer;
  due uuid[];
  last_at timestamptz;
  last_run uuid;
begin
  if max_scanned is null or max_scanned not between 1 and 100000 then
    raise exception 'max_scanned must be between 1 and 100000, got %', coalesce(max_scanned::text, 'NULL')
      using errcode = '22023', hint = 'pass a page size such as 1000';
  end if;
  if horizon is null or horizon <= interval '0' then
    raise exception 'horizon must be a positive interval, got %', coalesce(horizon::text, 'NULL')
      using errcode = '22023', hint = 'pass how far back runs may have started, such as ''7 days''';
  end if;
  select * into sweep from pgflow.span_sweep for update skip locked;
  if not found then
    -- Locked by another sweeper (inserting now would wait for it), or the very first sweep.
    perform 1 from pgflow.span_sweep;
    if found then
      return;
    end if;
    insert into pgflow.span_sweep (only_row) values (true)
    on conflict on constraint span_sweep_pkey do nothing;
    select * into sweep from pgflow.span_sweep for update skip locked;
    if not found then
      return;
    end if;
  end if;

  with page as (
    select r.run_id, r.started_at, r.status,
           coalesce(r.completed_at, r.failed_at, r.cancelled_at) as ended_at
    from pgflow.runs r
    where r.started_at >= greatest(sweep.scanned_at, now() - horizon)
      and (sweep.scanned_at is null or (r.started_at, r.run_id) > (sweep.scanned_at, sweep.scanned_run))
    order by r.started_at, r.run_id
    limit max_scanned
  )
  select count(*)::integer,
         coalesce(array_agg(p.run_id) filter (
           where p.status <> 'started' and p.ended_at >= sweep.since
             and not exists (select 1 from pgflow.emitted_spans e
                             where e.run_id = p.run_id and e.step_slug = '')), '{}'),
         (array_agg(p.started_at order by p.started_at desc, p.run_id desc))[1],
         (array_agg(p.run_id order by p.started_at desc, p.run_id desc))[1]
  into scanned, due, last_at, last_run
  from page p;

  update pgflow.span_sweep s
  set scanned_at = case when scanned < max_scanned then null else last_at end,
      scanned_run = case when scanned < max_scanned then null else last_run end
  where s.only_row;

  return query
  select * from pgflow.claim_ended_spans(due, array_fill(''::text, array[cardinality(due)]));
end;
$$;

-- ---- schemas/0900_privileges.sql
-- No pgflow function is executable by PUBLIC (and so by anon or authenticated on Supabase). The
-- owner (postgres on Supabase) runs workers and maintenance. Grants are explicit and documented in
-- docs/permissions.md.
revoke execute on all functions in schema pgflow from public;

-- service_role (supabase-js with the service key; server code only) may start runs, read them and
-- act on them: start_flow, start_flows, cancel_run, retry_run and resume_run (security definer, so no write
-- access to tables or queues is needed), get_run, get_run_text, list_runs and waiting_tasks (read
-- with the caller's select rights) and select on the definition and run tables, the attempt
-- history and the concurrency limits. Nothing else: it
-- cannot claim, complete or fail tasks, change definitions or touch workers. Where the role does not exist (plain Postgres) it is created
-- without login, so the grant model is the same everywhere; grant it to your own backend role. A
-- migrating role that may not create roles skips this with a notice, and nothing is granted.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'service_role') then
    begin
      create role service_role nologin;
    exception when insufficient_privilege or duplicate_object then
      raise notice 'pgflow: role service_role was not created: %', sqlerrm;
    end;
  end if;
  if exists (select 1 from pg_roles where rolname = 'service_role') then
    grant usage on schema pgflow to service_role;
    grant execute on function pgflow.start_flow(text, jsonb, uuid, integer, text) to service_role;
    grant execute on function pgflow.start_flows(text, jsonb, integer, text) to service_role;
    grant execute on function pgflow.get_run(uuid), pgflow.get_run_text(uuid) to service_role;
    grant execute on function pgflow.cancel_run(uuid, text) to service_role;
    grant execute on function pgflow.retry_run(uuid, boolean, jsonb) to service_role;
    grant execute on function pgflow.resume_run(uuid, boolean) to service_role;
    grant execute on function pgflow.list_runs(text, text, timestamptz, text, integer, boolean) to service_role;
    grant execute on function pgflow.list_aliases() to service_role;
    -- A client that LISTENs for its runs says so, or nothing is sent (0045_listeners.sql).
    grant execute on function pgflow.listen_start(text[]), pgflow.listen_stop(text[]),
      pgflow.listen_barrier(text[]) to service_role;
    -- Waiting tasks and why they wait (flow control): get_run reads them for its steps, and a
    -- client may list them per queue.
    grant execute on function pgflow.waiting_tasks(text),
      pgflow.waiting_reason(text, text, bigint, integer),
      pgflow.rate_waiting_reason(text, text, integer, interval, timestamptz),
      pgflow._waiting_why(boolean, text, text, timestamptz),
      pgflow._rate_recent(text, text, interval, timestamptz) to service_role;
    -- Events (0280_events.sql): sending one completes a wait, so it is a server's act, like
    -- start_flow; an end user's send goes through a wrapper that checks the run is theirs.
    grant execute on function pgflow.send_event(text, jsonb, uuid, text, text, interval),
      pgflow.create_wait_token(uuid, text, interval), pgflow.send_event_with_token(text, jsonb) to service_role;
    grant select on pgflow.flows, pgflow.steps, pgflow.deps, pgflow.runs, pgflow.step_states,
      pgflow.step_tasks, pgflow.task_attempts, pgflow.aliases, pgflow.concurrency_limits,
      pgflow.rate_limits, pgflow.rate_limit_windows, pgflow.fair_windows, pgflow.queue_cursors to service_role;
  end if;
end
$$;

-- ---- schemas/0910_schedule_privileges.sql
-- Who may manage schedules (docs/permissions.md): service_role, as it may start runs. The write
-- functions are security definer (0270_schedules.sql), so it needs no write access to the tables;
-- it reads them to list schedules and their ticks. Firing ticks (fire_due_schedules) stays with the
-- owner: pg_cron's job and the workers run as the owner. 0900 created service_role where it could.
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'service_role') then
    grant execute on function
      pgflow.create_schedule(text, text, text, jsonb, text, interval, text, integer, boolean),
      pgflow.update_schedule(text, text, text, jsonb, text, interval, text, integer),
      pgflow.pause_schedule(text), pgflow.resume_schedule(text), pgflow.delete_schedule(text),
      pgflow.list_schedules(), pgflow.cron_next_times(text, text, timestamptz, integer)
      to service_role;
    grant select on pgflow.schedules, pgflow.schedule_ticks to service_role;
  end if;
end
$$;

insert into pgflow.migrations (name) values ('20261205001154_pgflow_base') on conflict (name) do nothing;

commit;
