-- Route plans: a queue given as JSON null (or any non-string) is a problem with the definition.
-- Before, a null queue was skipped by the check, so a flow- or step-mode plan with a null queue was
-- accepted and silently sent to the default queue, while TypeScript (routeFlow) rejects it.

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

revoke execute on all functions in schema pgflow from public;
