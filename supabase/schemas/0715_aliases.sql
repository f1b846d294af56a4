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
