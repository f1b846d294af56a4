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
