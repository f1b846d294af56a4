-- Generated from supabase/schemas/ by local/new_migration.ts.
-- One transaction: applied whole or not at all, however it is run (psql -f, supabase db push,
-- pgflow migrate).
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if to_regclass('pgflow.migrations') is not null then
    if exists (select 1 from pgflow.migrations m where m.name = '20261202163423_pgflow_base') then
      raise exception 'pgflow migration 20261202163423_pgflow_base is already applied to this database; nothing was changed'
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

-- ---- schemas/0030_definitions.sql
-- Flow definitions: flows, their steps and the dependencies between steps. The shape (steps, order,
-- dependencies, types, conditions) is kept apart from the route (steps.queue_name) and from the
-- runtime-tunable options (opt_*).

create table if not exists pgflow.flows (
  flow_slug text not null,
  opt_max_attempts integer not null default 3,
  opt_base_delay integer not null default 1,
  opt_timeout integer not null default 60,
  queue_mode text not null default 'flow',
  created_at timestamptz not null default now(),
  constraint flows_pkey primary key (flow_slug),
  constraint flows_slug_is_valid check (pgflow.is_valid_slug(flow_slug)),
  constraint flows_max_attempts_range check (opt_max_attempts >= 1),
  constraint flows_base_delay_range check (opt_base_delay >= 1),
  constraint flows_timeout_range check (opt_timeout >= 3),
  constraint flows_queue_mode_known check (queue_mode in ('flow', 'step', 'routed'))
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
  created_at timestamptz not null default now(),
  constraint steps_pkey primary key (flow_slug, step_slug),
  constraint steps_flow_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint steps_index_key unique (flow_slug, step_index),
  constraint steps_slug_is_valid check (pgflow.is_valid_slug(step_slug)),
  constraint steps_index_range check (step_index >= 0),
  constraint steps_type_known check (step_type in ('single', 'map')),
  constraint steps_deps_count_range check (deps_count >= 0),
  constraint steps_max_attempts_range check (opt_max_attempts is null or opt_max_attempts >= 1),
  constraint steps_base_delay_range check (opt_base_delay is null or opt_base_delay >= 1),
  constraint steps_timeout_range check (opt_timeout is null or opt_timeout >= 3),
  constraint steps_start_delay_range check (opt_start_delay >= 0),
  constraint steps_when_unmet_known check (when_unmet in ('fail', 'skip', 'skip-cascade')),
  constraint steps_when_exhausted_known check (when_exhausted in ('fail', 'skip', 'skip-cascade')),
  constraint steps_map_single_dep check (step_type <> 'map' or deps_count <= 1),
  constraint steps_queue_name_length check (length(queue_name) between 1 and 47)
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

-- ---- schemas/0035_workers.sql
-- Workers and the functions that host them. A worker polls exactly one queue. worker_functions
-- carries the enable flag the deploy fence and the keep-alive respect.

create table if not exists pgflow.workers (
  worker_id uuid not null,
  queue_name text not null,
  function_name text not null,
  started_at timestamptz not null default now(),
  last_heartbeat_at timestamptz not null default now(),
  deprecated_at timestamptz,
  stopped_at timestamptz,
  constraint workers_pkey primary key (worker_id)
);

create index if not exists workers_queue_heartbeat_idx on pgflow.workers (queue_name, last_heartbeat_at);
create index if not exists workers_function_idx on pgflow.workers (function_name);

create table if not exists pgflow.worker_functions (
  function_name text not null,
  enabled boolean not null default true,
  debounce interval not null default '6 seconds',
  last_invoked_at timestamptz,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint worker_functions_pkey primary key (function_name),
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
  constraint runs_pkey primary key (run_id),
  constraint runs_flow_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint runs_status_known check (status in ('started', 'completed', 'failed')),
  constraint runs_remaining_steps_range check (remaining_steps >= 0)
);

create index if not exists runs_flow_status_idx on pgflow.runs (flow_slug, status);

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
  constraint step_states_pkey primary key (run_id, step_slug),
  constraint step_states_run_fkey foreign key (run_id) references pgflow.runs (run_id),
  constraint step_states_step_fkey foreign key (flow_slug, step_slug) references pgflow.steps (flow_slug, step_slug),
  constraint step_states_status_known check (status in ('created', 'started', 'completed', 'failed', 'skipped')),
  constraint step_states_remaining_deps_range check (remaining_deps >= 0),
  constraint step_states_remaining_tasks_range check (remaining_tasks is null or remaining_tasks >= 0)
);

create table if not exists pgflow.step_tasks (
  run_id uuid not null,
  flow_slug text not null,
  step_slug text not null,
  task_index integer not null default 0,
  status text not null default 'queued',
  -- Snapshot of the step's route when the task was created; never changes afterwards.
  queue_name text not null,
  message_id bigint,
  attempts_count integer not null default 0,
  output jsonb,
  error_message text,
  last_worker_id uuid,
  queued_at timestamptz not null default now(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  constraint step_tasks_pkey primary key (run_id, step_slug, task_index),
  constraint step_tasks_step_state_fkey foreign key (run_id, step_slug) references pgflow.step_states (run_id, step_slug),
  constraint step_tasks_step_fkey foreign key (flow_slug, step_slug) references pgflow.steps (flow_slug, step_slug),
  constraint step_tasks_worker_fkey foreign key (last_worker_id) references pgflow.workers (worker_id) on delete set null,
  constraint step_tasks_status_known check (status in ('queued', 'started', 'completed', 'failed', 'cancelled')),
  constraint step_tasks_task_index_range check (task_index >= 0),
  constraint step_tasks_attempts_range check (attempts_count >= 0)
);

-- A message id means nothing without its queue: (queue_name, message_id) identifies one task.
create unique index if not exists step_tasks_message_key on pgflow.step_tasks (queue_name, message_id)
  where message_id is not null;
-- Stalled recovery scans started tasks.
create index if not exists step_tasks_started_idx on pgflow.step_tasks (started_at)
  where status = 'started';
create index if not exists step_tasks_run_status_idx on pgflow.step_tasks (run_id, status);

-- ---- schemas/0100_create_flow.sql
-- Definition functions the startup compiler builds on. Both are idempotent for identical input and
-- refuse a different definition under an existing slug instead of silently changing it.

create or replace function pgflow.create_flow(
  flow_slug text,
  max_attempts integer default 3,
  base_delay integer default 1,
  timeout integer default 60,
  queue_mode text default 'flow'
)
returns pgflow.flows
language plpgsql
volatile
set search_path = ''
as $$
declare
  existing pgflow.flows;
  created pgflow.flows;
begin
  if not pgflow.is_valid_slug(flow_slug) then
    raise exception 'invalid flow slug %', coalesce(quote_literal(flow_slug), 'NULL')
      using errcode = '22023',
        hint = 'use letters, digits and single underscores, starting with a letter, at most 128 characters, not "run"';
  end if;
  if max_attempts is null or max_attempts < 1 then
    raise exception 'flow %: max_attempts must be at least 1, got %', flow_slug, coalesce(max_attempts::text, 'NULL')
      using errcode = '22023';
  end if;
  if base_delay is null or base_delay < 1 then
    raise exception 'flow %: base_delay must be at least 1 second, got %', flow_slug, coalesce(base_delay::text, 'NULL')
      using errcode = '22023';
  end if;
  if timeout is null or timeout < 3 then
    raise exception 'flow %: timeout must be at least 3 seconds, got %', flow_slug, coalesce(timeout::text, 'NULL')
      using errcode = '22023';
  end if;
  if queue_mode is null or queue_mode not in ('flow', 'step', 'routed') then
    raise exception 'flow %: queue_mode must be flow, step or routed, got %', flow_slug, coalesce(queue_mode, 'NULL')
      using errcode = '22023';
  end if;

  select * into existing from pgflow.flows f where lower(f.flow_slug) = lower(create_flow.flow_slug);
  if found then
    if existing.flow_slug = create_flow.flow_slug
       and existing.opt_max_attempts = max_attempts and existing.opt_base_delay = base_delay
       and existing.opt_timeout = timeout and existing.queue_mode = create_flow.queue_mode then
      return existing;
    end if;
    raise exception 'flow % already exists with a different definition (existing: slug %, max_attempts %, base_delay %, timeout %, queue_mode %)',
      flow_slug, existing.flow_slug, existing.opt_max_attempts, existing.opt_base_delay, existing.opt_timeout, existing.queue_mode
      using errcode = '23505', hint = 'use a new concrete slug for a new version (for example ' || flow_slug || '_v2)';
  end if;

  insert into pgflow.flows (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout, queue_mode)
  values (flow_slug, max_attempts, base_delay, timeout, queue_mode)
  returning * into created;

  -- A plain flow's steps all share the flow's default queue.
  if queue_mode = 'flow' then
    perform pgmq.create(lower(flow_slug));
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
  if max_attempts < 1 or base_delay < 1 or timeout < 3 or start_delay is null or start_delay < 0 then
    raise exception 'step %.%: options out of range (max_attempts %, base_delay %, timeout %, start_delay %)',
      flow_slug, step_slug, max_attempts, base_delay, timeout, start_delay
      using errcode = '22023', hint = 'max_attempts >= 1, base_delay >= 1, timeout >= 3, start_delay >= 0';
  end if;
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

  perform pgmq.create(resolved_queue)
  where not exists (select 1 from pgmq.list_queues() q where q.queue_name = resolved_queue);

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
  return created;
end;
$$;

-- ---- schemas/0200_messages.sql
-- Sending and archiving task messages. Only PGMQ's public functions are used, and every call names
-- the queue from the task's snapshot: a flow slug never stands in for a queue.

-- Sends one message per queued task of the run that has none yet, batched per (queue, delay), and
-- records each message id on its task in the same transaction.
create or replace function pgflow._send_task_messages(p_run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
  ids bigint[];
begin
  for grp in
    select t.queue_name, s.opt_start_delay as delay,
           array_agg(t.step_slug order by t.step_slug, t.task_index) as steps,
           array_agg(t.task_index order by t.step_slug, t.task_index) as idxs,
           -- The body is informational only: the claim reads ids, never bodies.
           array_agg(jsonb_build_object('flow_slug', t.flow_slug, 'run_id', t.run_id,
                                        'step_slug', t.step_slug, 'task_index', t.task_index)
                     order by t.step_slug, t.task_index) as msgs
    from pgflow.step_tasks t
    join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    where t.run_id = p_run_id and t.status = 'queued' and t.message_id is null
    group by t.queue_name, s.opt_start_delay
  loop
    -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
    select array_agg(id order by id) into ids
    from pgmq.send_batch(grp.queue_name, grp.msgs, grp.delay) as id;
    update pgflow.step_tasks t
    set message_id = u.id
    from unnest(grp.steps, grp.idxs, ids) as u(step_slug, task_index, id)
    where t.run_id = p_run_id and t.step_slug = u.step_slug and t.task_index = u.task_index;
  end loop;
end;
$$;

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

-- ---- schemas/0300_start_flow.sql
-- Starting runs and steps.

-- Completes a step with its output, releases its dependents and counts it off the run; completes the
-- run when it was the last step. The caller holds the run's lock.
create or replace function pgflow._complete_step(p_run_id uuid, p_step_slug text, p_output jsonb)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  remaining integer;
  flow text;
begin
  update pgflow.step_states ss
  set status = 'completed', output = p_output, completed_at = now(), remaining_tasks = 0
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug
  returning ss.flow_slug into flow;

  update pgflow.step_states ss
  set remaining_deps = ss.remaining_deps - 1
  from pgflow.deps d
  where ss.run_id = p_run_id and d.flow_slug = flow and d.dep_slug = p_step_slug
    and ss.step_slug = d.step_slug;

  update pgflow.runs r set remaining_steps = r.remaining_steps - 1
  where r.run_id = p_run_id
  returning r.remaining_steps into remaining;

  if remaining = 0 then
    -- The run's output: the outputs of its leaf steps (steps nothing depends on).
    update pgflow.runs r
    set status = 'completed', completed_at = now(),
        output = coalesce((
          select jsonb_object_agg(ss.step_slug, ss.output)
          from pgflow.step_states ss
          where ss.run_id = p_run_id and ss.status = 'completed'
            and not exists (select 1 from pgflow.deps d
                            where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
        ), '{}'::jsonb)
    where r.run_id = p_run_id;
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
  set status = 'failed', failed_at = now(), error_message = p_error
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug;

  update pgflow.runs r
  set status = 'failed', failed_at = now(), error_message = p_error
  where r.run_id = p_run_id;

  update pgflow.step_tasks t
  set status = 'cancelled'
  where t.run_id = p_run_id and t.status in ('queued', 'started');

  perform pgflow._archive_task_messages(p_run_id, array['cancelled', 'failed']);
end;
$$;

-- Starts every step whose dependencies are done, creates its tasks and sends their messages.
-- Steps with no tasks (an empty map) complete at once, which can make further steps ready, so this
-- repeats until nothing changes. The caller holds the run's lock.
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
  task_count integer;
  progressed boolean := true;
begin
  while progressed loop
    progressed := false;
    select * into run from pgflow.runs r where r.run_id = p_run_id;
    exit when run.status <> 'started';
    for ready in
      select ss.step_slug, s.step_type, s.deps_count,
             -- A map step has at most one dependency: the one it maps over.
             (select min(d.dep_slug) from pgflow.deps d
              where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug) as map_dep
      from pgflow.step_states ss
      join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
      where ss.run_id = p_run_id and ss.status = 'created' and ss.remaining_deps = 0
      order by s.step_index
    loop
      if ready.step_type = 'single' then
        task_count := 1;
      else
        -- A map step fans out over the run input (root map) or its one dependency's output.
        if ready.deps_count = 0 then
          source := run.input;
        else
          select ss.output into source from pgflow.step_states ss
          where ss.run_id = p_run_id and ss.step_slug = ready.map_dep;
        end if;
        if jsonb_typeof(source) is distinct from 'array' then
          perform pgflow._fail_run(p_run_id, ready.step_slug, format(
            '[TYPE_VIOLATION] map step %s needs an array to map over, got %s',
            ready.step_slug, coalesce(jsonb_typeof(source), 'nothing')));
          return;
        end if;
        task_count := jsonb_array_length(source);
      end if;

      update pgflow.step_states ss
      set status = 'started', started_at = now(), initial_tasks = task_count, remaining_tasks = task_count
      where ss.run_id = p_run_id and ss.step_slug = ready.step_slug;

      if task_count = 0 then
        perform pgflow._complete_step(p_run_id, ready.step_slug, '[]'::jsonb);
        progressed := true;
      else
        insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name)
        select p_run_id, run.flow_slug, ready.step_slug, i, s.queue_name
        from pgflow.steps s, generate_series(0, task_count - 1) as i
        where s.flow_slug = run.flow_slug and s.step_slug = ready.step_slug;
      end if;
    end loop;
  end loop;
  perform pgflow._send_task_messages(p_run_id);
end;
$$;

-- Creates a run of a flow and starts its root steps. Every task's message is sent to its step's
-- routed queue in the same transaction that records the task's queue snapshot and message id.
create or replace function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid default null)
returns pgflow.runs
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  flow pgflow.flows;
  new_run_id uuid := coalesce(start_flow.run_id, gen_random_uuid());
  result pgflow.runs;
begin
  select * into flow from pgflow.flows f where f.flow_slug = start_flow.flow_slug;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(start_flow.flow_slug), 'NULL')
      using errcode = '22023', hint = 'check the slug, or start a worker for the flow so it is compiled';
  end if;
  if start_flow.input is null then
    raise exception 'flow %: input must not be SQL NULL', flow.flow_slug
      using errcode = '22004', hint = 'pass a JSON value, for example ''{}''::jsonb or ''null''::jsonb';
  end if;
  if exists (select 1 from pgflow.runs r where r.run_id = new_run_id) then
    raise exception 'run % already exists', new_run_id using errcode = '23505';
  end if;

  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
  values (new_run_id, flow.flow_slug, start_flow.input,
          (select count(*) from pgflow.steps s where s.flow_slug = flow.flow_slug));

  insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps)
  select new_run_id, s.flow_slug, s.step_slug, s.deps_count
  from pgflow.steps s where s.flow_slug = flow.flow_slug;

  perform pgflow._start_ready_steps(new_run_id);

  -- A flow without steps has nothing to wait for.
  update pgflow.runs r set status = 'completed', completed_at = now(), output = '{}'::jsonb
  where r.run_id = new_run_id and r.status = 'started' and r.remaining_steps = 0;

  select * into result from pgflow.runs r where r.run_id = new_run_id;
  return result;
end;
$$;

-- ---- schemas/0400_start_tasks.sql
-- The claim. A worker that read messages from one queue claims the tasks behind them by exact
-- (queue, message id) identity, restricted to the (flow, step) pairs it has handlers for. Only an
-- eligible queued task in the support set is claimed; every other message is reported and left
-- exactly as it was.

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
#variable_conflict use_column
declare
  q text := start_tasks.queue_name;
  sup_flows text[];
  sup_steps text[];
  c_msg bigint[];
  c_run uuid[];
  c_step text[];
  c_idx integer[];
  c_att integer[];
  c_off integer[];
  changed integer;
begin
  if q is null then
    raise exception 'start_tasks: queue_name must not be NULL' using errcode = '22004';
  end if;
  if jsonb_typeof(supported) is distinct from 'array' or exists (
       select 1 from jsonb_array_elements(supported) e
       where jsonb_typeof(e) <> 'array' or jsonb_array_length(e) <> 2
          or jsonb_typeof(e -> 0) <> 'string' or jsonb_typeof(e -> 1) <> 'string') then
    raise exception 'start_tasks: supported must be a JSON array of [flow_slug, step_slug] pairs, got %',
      left(coalesce(supported::text, 'NULL'), 200) using errcode = '22023';
  end if;
  select array_agg(e ->> 0), array_agg(e ->> 1) into sup_flows, sup_steps
  from jsonb_array_elements(supported) e;

  with claimed as (
    update pgflow.step_tasks t
    set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
        last_worker_id = start_tasks.worker_id
    from pgflow.runs r, pgflow.step_states ss
    where t.queue_name = q
      and t.message_id = any (msg_ids)
      and t.status = 'queued'
      and (t.flow_slug, t.step_slug) in (select * from unnest(sup_flows, sup_steps))
      and r.run_id = t.run_id and r.status = 'started'
      and ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
    returning t.message_id, t.run_id, t.flow_slug, t.step_slug, t.task_index, t.attempts_count
  )
  select array_agg(c.message_id), array_agg(c.run_id), array_agg(c.step_slug),
         array_agg(c.task_index), array_agg(c.attempts_count),
         array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2)
  into c_msg, c_run, c_step, c_idx, c_att, c_off
  from claimed c
  join pgflow.steps s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
  join pgflow.flows f on f.flow_slug = c.flow_slug;

  if c_msg is not null then
    -- Hide each claimed message for the effective timeout + 2 s, and make sure it happened: a claim
    -- whose message is gone would otherwise run with nothing guarding it.
    select count(*) into changed from pgflow.set_vt_batch(q, c_msg, c_off);
    if changed <> cardinality(c_msg) then
      raise exception 'start_tasks: queue % holds only % of the % claimed messages %', q, changed,
        cardinality(c_msg), c_msg using errcode = '55000';
    end if;
  end if;

  return query
  with ids as (select distinct m as mid from unnest(msg_ids) m where m is not null),
  claimed as (
    select * from unnest(c_msg, c_run, c_step, c_idx, c_att) as c(mid, run_id, step_slug, task_index, attempt)
  )
  select i.mid,
         case
           when c.mid is not null then 'claimed'
           when t.run_id is null then 'unknown'
           when not ((t.flow_slug, t.step_slug) in (select * from unnest(sup_flows, sup_steps))) then 'unsupported'
           when t.status = 'started' then 'started'
           else 'ineligible'
         end,
         case when c.mid is not null then t.flow_slug end,
         case when c.mid is not null then t.run_id end,
         case when c.mid is not null then t.step_slug end,
         case when c.mid is not null then t.task_index end,
         case when c.mid is not null then pgflow._task_input(t.run_id, t.flow_slug, t.step_slug, t.task_index) end,
         c.attempt
  from ids i
  left join claimed c on c.mid = i.mid
  left join pgflow.step_tasks t on t.queue_name = q and t.message_id = i.mid
  order by i.mid;
end;
$$;

-- The handler input of one task: the run input for a root step; one element for a map task; an
-- object of completed dependency outputs for a dependent step (skipped dependencies are absent).
create or replace function pgflow._task_input(p_run_id uuid, p_flow_slug text, p_step_slug text, p_task_index integer)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select case
    when s.step_type = 'map' and s.deps_count = 0 then
      (select r.input -> p_task_index from pgflow.runs r where r.run_id = p_run_id)
    when s.step_type = 'map' then
      (select ss.output -> p_task_index
       from pgflow.deps d
       join pgflow.step_states ss on ss.run_id = p_run_id and ss.step_slug = d.dep_slug
       where d.flow_slug = p_flow_slug and d.step_slug = p_step_slug)
    when s.deps_count = 0 then
      (select r.input from pgflow.runs r where r.run_id = p_run_id)
    else
      (select coalesce(jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
       from pgflow.deps d
       join pgflow.step_states ss on ss.run_id = p_run_id and ss.step_slug = d.dep_slug
       where d.flow_slug = p_flow_slug and d.step_slug = p_step_slug and ss.status = 'completed')
  end
  from pgflow.steps s
  where s.flow_slug = p_flow_slug and s.step_slug = p_step_slug
$$;

-- ---- schemas/0500_complete_task.sql
-- Completing a task. Late or duplicate completions (the task is no longer started, or its run or step
-- has moved on) change nothing and raise nothing.
create or replace function pgflow.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  run pgflow.runs;
  task pgflow.step_tasks;
  left_tasks integer;
  step_output jsonb;
  kind text;
begin
  -- The run lock orders every state change of one run: completions, failures and stalled recovery.
  select * into run from pgflow.runs r where r.run_id = complete_task.run_id for update;
  if not found or run.status <> 'started' then
    return;
  end if;
  select * into task from pgflow.step_tasks t
  where t.run_id = complete_task.run_id and t.step_slug = complete_task.step_slug
    and t.task_index = complete_task.task_index
  for update;
  if not found or task.status <> 'started' then
    return;
  end if;

  update pgflow.step_tasks t
  set status = 'completed', completed_at = now(), output = complete_task.output
  where t.run_id = task.run_id and t.step_slug = task.step_slug and t.task_index = task.task_index
  returning * into task;
  perform pgmq.archive(task.queue_name, task.message_id);

  update pgflow.step_states ss
  set remaining_tasks = ss.remaining_tasks - 1
  where ss.run_id = task.run_id and ss.step_slug = task.step_slug
  returning ss.remaining_tasks into left_tasks;

  if left_tasks = 0 then
    select s.step_type into kind from pgflow.steps s
    where s.flow_slug = task.flow_slug and s.step_slug = task.step_slug;
    if kind = 'map' then
      select jsonb_agg(t.output order by t.task_index) into step_output
      from pgflow.step_tasks t where t.run_id = task.run_id and t.step_slug = task.step_slug;
    else
      step_output := task.output;
    end if;
    perform pgflow._complete_step(task.run_id, task.step_slug, step_output);
    perform pgflow._start_ready_steps(task.run_id);
  end if;
  return next task;
end;
$$;

-- ---- schemas/0510_fail_task.sql
-- Failing a task: retry with exponential backoff on the task's own queue snapshot while attempts
-- remain, else fail the step and the run. The caller holds the run's lock.
create or replace function pgflow._task_failed(
  p_run_id uuid, p_step_slug text, p_task_index integer, p_error text, p_retry_delay integer
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
begin
  select t.* into task from pgflow.step_tasks t
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index;
  select coalesce(s.opt_max_attempts, f.opt_max_attempts), coalesce(s.opt_base_delay, f.opt_base_delay)
  into max_attempts, base_delay
  from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug
  where s.flow_slug = task.flow_slug and s.step_slug = task.step_slug;

  if task.attempts_count < max_attempts then
    update pgflow.step_tasks t
    set status = 'queued', error_message = p_error, queued_at = now()
    where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index
    returning * into task;
    -- base_delay * 2^(attempt - 1): the first retry waits base_delay, each later one twice as long.
    perform pgmq.set_vt(task.queue_name, task.message_id, coalesce(p_retry_delay,
      least(base_delay::numeric * power(2::numeric, task.attempts_count - 1), 2147483647)::integer));
  else
    update pgflow.step_tasks t
    set status = 'failed', error_message = p_error, failed_at = now()
    where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index
    returning * into task;
    perform pgflow._fail_run(p_run_id, p_step_slug, p_error);
  end if;
  return task;
end;
$$;

create or replace function pgflow.fail_task(run_id uuid, step_slug text, task_index integer, error_message text)
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
  select * into run from pgflow.runs r where r.run_id = fail_task.run_id for update;
  if not found or run.status <> 'started' then
    return;
  end if;
  select * into task from pgflow.step_tasks t
  where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index
  for update;
  if not found or task.status <> 'started' then
    return;
  end if;
  return next pgflow._task_failed(task.run_id, task.step_slug, task.task_index,
                                  coalesce(fail_task.error_message, 'unknown error'), null);
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
      and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
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
      and t.started_at < now() - make_interval(secs => cand.timeout + 30);
    continue when not found;
    perform pgflow._task_failed(cand.run_id, cand.step_slug, cand.task_index,
      format('stalled: no completion within %s s (timeout + 30 s)', cand.timeout + 30), 0);
    handled := handled + 1;
  end loop;
  return handled;
end;
$$;

-- ---- schemas/0600_workers.sql
-- The worker registry: registration, heartbeat, stop and deprecation.

create or replace function pgflow.register_worker(worker_id uuid, queue_name text, function_name text)
returns pgflow.workers
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  result pgflow.workers;
begin
  if register_worker.worker_id is null or register_worker.queue_name is null or register_worker.function_name is null then
    raise exception 'register_worker: worker_id, queue_name and function_name are required' using errcode = '22004';
  end if;
  insert into pgflow.worker_functions (function_name) values (register_worker.function_name)
  on conflict (function_name) do update set updated_at = now();
  insert into pgflow.workers (worker_id, queue_name, function_name)
  values (register_worker.worker_id, register_worker.queue_name, register_worker.function_name)
  returning * into result;
  return result;
end;
$$;

-- Records a heartbeat and tells the worker whether it has been deprecated (it should stop polling).
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
  update pgflow.workers w set last_heartbeat_at = clock_timestamp()
  where w.worker_id = heartbeat.worker_id
  returning w.deprecated_at is not null into deprecated;
  if not found then
    raise exception 'worker % is not registered', heartbeat.worker_id
      using errcode = '22023', hint = 'register it with pgflow.register_worker first';
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

-- Deprecates every live worker of a function: they stop polling and drain their in-flight tasks.
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

-- ---- schemas/0900_privileges.sql
-- No pgflow function is executable by PUBLIC (and so by anon or authenticated on Supabase); the
-- service role and postgres own the engine. Grants, where needed, are documented and explicit.
revoke execute on all functions in schema pgflow from public;

commit;
