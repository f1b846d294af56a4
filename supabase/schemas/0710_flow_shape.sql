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
