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
