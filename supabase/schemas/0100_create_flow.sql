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
