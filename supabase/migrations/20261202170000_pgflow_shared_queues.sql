-- Shared queues with multi-flow dispatch: the maintenance upgrade on top of pgflow_base.
-- Adds the shared-queue declarations and settings, the startup compiler (ensure_flow_compiled),
-- flow deletion and pruning through task snapshots, and the worker support-set query. Existing
-- runs, tasks and messages are not touched; see docs/upgrade.md.
--
-- Lock waits are bounded: if a worker holds a definition table for longer than lock_timeout, the
-- migration fails and rolls back completely instead of queueing every worker behind it.
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if to_regclass('pgflow.migrations') is not null then
    if exists (select 1 from pgflow.migrations m where m.name = '20261202170000_pgflow_shared_queues') then
      raise exception 'pgflow migration 20261202170000_pgflow_shared_queues is already applied to this database; nothing was changed'
        using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
    end if;
  end if;
end
$$;

set local lock_timeout = '5s';

do $$
begin
  if to_regclass('pgflow.flows') is null then
    raise exception 'pgflow_shared_queues needs the pgflow_base migration first';
  end if;
end
$$;

-- Keep definitions still while the compiler changes underneath them; runtime tables stay writable.
lock table pgflow.flows, pgflow.steps, pgflow.deps in share row exclusive mode;

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
create table if not exists pgflow.settings (
  key text not null,
  value jsonb not null,
  updated_at timestamptz not null default now(),
  constraint settings_pkey primary key (key),
  constraint settings_key_known check (key in ('local_development'))
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

  -- A plain flow's steps all share the flow's default queue, which must not be a declared shared
  -- queue: its messages would mix with other flows' under a name pgflow gave away.
  if queue_mode = 'flow' then
    perform pg_advisory_xact_lock(hashtext('pgflow.queue:' || lower(flow_slug)));
    if exists (select 1 from pgflow.shared_queues s where s.queue_name = lower(create_flow.flow_slug)) then
      raise exception 'flow %: its default queue % is a declared shared queue', flow_slug, lower(flow_slug)
        using errcode = '55000', hint = 'use another flow slug, or route this flow with routeFlow()';
    end if;
    perform pgmq.create(lower(flow_slug))
    where not exists (select 1 from pgmq.list_queues() q where q.queue_name = lower(create_flow.flow_slug));
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

  if flow.queue_mode = 'routed' then
    perform pgflow._provision_shared_queue(resolved_queue, flow.flow_slug);
  else
    perform pgmq.create(resolved_queue)
    where not exists (select 1 from pgmq.list_queues() q where q.queue_name = resolved_queue);
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
  return created;
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
  perform pg_advisory_xact_lock(hashtext('pgflow.queue:' || p_queue));

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
  ) order by s.step_index), '[]'::jsonb))
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
                       ('requiredInputPattern'), ('forbiddenInputPattern')) as k(key)
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

-- ---- schemas/0720_ensure_flow_compiled.sql
-- The startup compiler. A worker sends each flow it serves: the shape, the route plan and the
-- runtime options. SQL validates all of it itself, then, under a per-slug transaction lock:
--   missing            → create definitions, routes and queues   → 'compiled'
--   same shape, routes → nothing                                 → 'verified'
--   different, production → nothing at all, with the differences → 'mismatch'
--   different, local development (pgflow.is_local_development()) → delete the flow's data and
--                        create it again                          → 'recompiled'

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
    slugs := slugs || (step ->> 'slug');
    i := i + 1;
  end loop;

  if mode is null or mode not in ('flow', 'step', 'routed') then
    return problems || format('route plan mode must be flow, step or routed, got %s', coalesce(p_routes -> 'mode', 'null'));
  end if;
  if jsonb_typeof(p_routes -> 'queues') is distinct from 'object' then
    return problems || 'route plan must have a "queues" object';
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

-- Creates a validated definition: shared queues are checked (and locked) first, so a conflict is
-- found before anything changes; then the flow, its steps and their queues.
create or replace function pgflow._create_flow_from_definition(
  p_flow_slug text, p_shape jsonb, p_routes jsonb, p_options jsonb
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
  if p_routes ->> 'mode' = 'routed' then
    for q in select distinct value #>> '{}' from jsonb_each(p_routes -> 'queues') order by 1 loop
      perform pgflow._check_shared_queue(q, p_flow_slug);
    end loop;
  end if;
  perform pgflow.create_flow(p_flow_slug,
    coalesce((flow_opts ->> 'maxAttempts')::integer, 3),
    coalesce((flow_opts ->> 'baseDelay')::integer, 1),
    coalesce((flow_opts ->> 'timeout')::integer, 60),
    p_routes ->> 'mode');
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
  end loop;
end;
$$;

create or replace function pgflow.ensure_flow_compiled(
  flow_slug text,
  shape jsonb,
  route_plan jsonb,
  options jsonb default '{}'::jsonb
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
  q text;
begin
  problems := pgflow._definition_problems(ensure_flow_compiled.flow_slug, shape, route_plan);
  if cardinality(problems) > 0 then
    raise exception 'flow %: invalid definition: %', coalesce(ensure_flow_compiled.flow_slug, 'NULL'),
      array_to_string(problems, '; ') using errcode = '22023';
  end if;
  -- One compile per slug at a time: concurrent workers of the same flow wait here.
  perform pg_advisory_xact_lock(hashtext('pgflow.flow:' || lower(ensure_flow_compiled.flow_slug)));

  select f.flow_slug into existing from pgflow.flows f where lower(f.flow_slug) = lower(ensure_flow_compiled.flow_slug);
  if existing is null then
    perform pgflow._create_flow_from_definition(ensure_flow_compiled.flow_slug, shape, route_plan, options);
    return jsonb_build_object('status', 'compiled', 'differences', '[]'::jsonb);
  end if;
  if existing <> ensure_flow_compiled.flow_slug then
    raise exception 'flow % conflicts with existing flow % (flow slugs are unique case-insensitively)',
      ensure_flow_compiled.flow_slug, existing using errcode = '23505', hint = 'use the existing spelling or a new slug';
  end if;

  differences := pgflow._definition_differences(
    pgflow._flow_shape(existing), shape, pgflow._flow_route_plan(existing), route_plan);
  if cardinality(differences) = 0 then
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb);
  end if;
  if not pgflow.is_local_development() then
    -- Production: change nothing. Existing tasks keep their queue snapshots.
    return jsonb_build_object('status', 'mismatch', 'differences', to_jsonb(differences));
  end if;
  -- Local development: check the new shared queues before deleting anything.
  if route_plan ->> 'mode' = 'routed' then
    for q in select distinct value #>> '{}' from jsonb_each(route_plan -> 'queues') order by 1 loop
      perform pgflow._check_shared_queue(q, existing);
    end loop;
  end if;
  perform pgflow.delete_flow_and_data(existing);
  perform pgflow._create_flow_from_definition(existing, shape, route_plan, options);
  return jsonb_build_object('status', 'recompiled', 'differences', to_jsonb(differences));
end;
$$;

-- ---- schemas/0730_delete_flow_and_data.sql
-- Deleting one concrete flow: its definitions, its runtime rows and its own queues. On shared
-- queues only this flow's tracked messages go (found through its task snapshots): other flows'
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

create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  flow pgflow.flows;
  grp record;
  own_queue text;
begin
  perform pg_advisory_xact_lock(hashtext('pgflow.flow:' || lower(delete_flow_and_data.flow_slug)));
  select * into flow from pgflow.flows f where f.flow_slug = delete_flow_and_data.flow_slug for update;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(delete_flow_and_data.flow_slug), 'NULL')
      using errcode = '22023';
  end if;

  -- Messages on shared queues: only this flow's, through its snapshots.
  for grp in
    select t.queue_name, array_agg(t.message_id) as ids
    from pgflow.step_tasks t
    where t.flow_slug = flow.flow_slug and t.message_id is not null
      and exists (select 1 from pgflow.shared_queues s where s.queue_name = t.queue_name)
    group by t.queue_name
  loop
    perform pgflow._purge_tracked_messages(grp.queue_name, grp.ids);
  end loop;

  -- The flow's own queues: its default queue (flow mode) or its private step queues (step mode).
  -- Collected before the steps go; snapshots of older routes count too.
  for own_queue in
    select distinct q from (
      select s.queue_name as q from pgflow.steps s
      where s.flow_slug = flow.flow_slug and flow.queue_mode in ('flow', 'step')
      union
      select t.queue_name from pgflow.step_tasks t
      where t.flow_slug = flow.flow_slug
        and not exists (select 1 from pgflow.shared_queues s where s.queue_name = t.queue_name)
        -- A prefix comparison, not LIKE: underscores in the slug must not act as wildcards.
        and (t.queue_name = lower(flow.flow_slug)
             or left(t.queue_name, length(flow.flow_slug) + 2) = lower(flow.flow_slug) || '__')
    ) own
    order by 1
  loop
    -- Never drop a queue another flow still routes to.
    continue when exists (select 1 from pgflow.steps s where s.queue_name = own_queue and s.flow_slug <> flow.flow_slug);
    if exists (select 1 from pgmq.list_queues() q where q.queue_name = own_queue) then
      perform pgmq.drop_queue(own_queue);
    end if;
  end loop;

  delete from pgflow.step_tasks t where t.flow_slug = flow.flow_slug;
  delete from pgflow.step_states ss where ss.flow_slug = flow.flow_slug;
  delete from pgflow.runs r where r.flow_slug = flow.flow_slug;
  delete from pgflow.deps d where d.flow_slug = flow.flow_slug;
  delete from pgflow.steps s where s.flow_slug = flow.flow_slug;
  delete from pgflow.flows f where f.flow_slug = flow.flow_slug;
end;
$$;

-- ---- schemas/0740_prune.sql
-- Retention. Pruning selects through task snapshots, so one flow's retention never reaches another
-- flow's messages or unknown messages in a shared archive.

-- Deletes terminal runs (completed or failed) that ended before now() - retention, with their tasks
-- and their own queue and archive rows. Returns the number of runs deleted.
create or replace function pgflow.prune_data_older_than(retention interval)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  old_runs uuid[];
  grp record;
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_data_older_than: retention must be a non-negative interval, got %', coalesce(retention::text, 'NULL')
      using errcode = '22023';
  end if;
  select array_agg(r.run_id) into old_runs
  from pgflow.runs r
  where r.status in ('completed', 'failed')
    and coalesce(r.completed_at, r.failed_at) < now() - retention;
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

-- ---- upgrade of existing data
-- Routed steps created before this release become declarations, so their queues stay usable. A
-- routed queue that is also a flow's default queue or a private step queue cannot be shared: the
-- upgrade stops and names it rather than guessing.
do $$
declare
  conflicts text[];
begin
  select array_agg(distinct format('%s (routed by %s.%s, but %s)', s.queue_name, s.flow_slug, s.step_slug, owner.what))
  into conflicts
  from pgflow.steps s
  join pgflow.flows f on f.flow_slug = s.flow_slug and f.queue_mode = 'routed'
  cross join lateral (
    select coalesce(
      (select 'the default queue of flow ' || f2.flow_slug from pgflow.flows f2
       where f2.queue_mode = 'flow' and lower(f2.flow_slug) = s.queue_name limit 1),
      (select 'the private queue of ' || s2.flow_slug || '.' || s2.step_slug from pgflow.steps s2
       join pgflow.flows f3 on f3.flow_slug = s2.flow_slug and f3.queue_mode = 'step'
       where s2.queue_name = s.queue_name limit 1)) as what
  ) owner
  where owner.what is not null;
  if conflicts is not null then
    raise exception 'pgflow_shared_queues: routed queues collide with other queues: %', array_to_string(conflicts, '; ')
      using hint = 'route those steps to their own queue names (a new concrete flow slug), then apply this migration';
  end if;
end
$$;

insert into pgflow.shared_queues (queue_name, declared_by_flow)
select s.queue_name, min(s.flow_slug)
from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug and f.queue_mode = 'routed'
group by s.queue_name
on conflict (queue_name) do nothing;

-- ---- schemas/0900_privileges.sql
-- No pgflow function is executable by PUBLIC (and so by anon or authenticated on Supabase); the
-- service role and postgres own the engine. Grants, where needed, are documented and explicit.
revoke execute on all functions in schema pgflow from public;

commit;
