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
