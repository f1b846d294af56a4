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
