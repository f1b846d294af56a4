-- pgflow_operator_views: what an operator needs to see what the engine is doing (issue 18).
-- - start_tasks (and so read_and_claim) returns the owning task's identity (flow, run, step,
--   index) for unclaimed messages too, so a worker can say which flow and step a message it cannot
--   claim needs. Input, attempt and bodies stay claimed-only.
-- - ensure_flow_compiled reports options that differ from the stored ones (optionDifferences)
--   instead of ignoring them silently; production still applies none of them, local development
--   recompiles (docs/upgrade.md).
-- - queue_coverage tells work waiting from routes that merely exist: new columns stale_tasks and
--   status (MISSING, STALE, ok, idle); its return type changes, so it is dropped and created again.
-- Existing data is not touched; every statement replaces a function (brief catalog locks only).
--
-- Changes:
-- - replace function pgflow.start_tasks(queue_name text, msg_ids bigint[], worker_id uuid, supported jsonb)
-- - create function pgflow._option_differences(p_flow_slug text, p_options jsonb)
-- - replace function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, route_plan jsonb, options jsonb)
-- - replace function pgflow.queue_coverage(queue_name text, stale_after interval) (dropped and created again)
-- - privileges on function pgflow._option_differences(p_flow_slug text, p_options jsonb)
-- - privileges on function pgflow.queue_coverage(queue_name text, stale_after interval)
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if exists (select 1 from pgflow.migrations m where m.name = '20261203190000_pgflow_operator_views') then
    raise exception 'pgflow migration 20261203190000_pgflow_operator_views is already applied to this database; nothing was changed'
      using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
  end if;
end
$$;

set local lock_timeout = '5s';

-- ---- schemas/0400_start_tasks.sql: pgflow.start_tasks(queue_name text, msg_ids bigint[], worker_id uuid, supported jsonb)
-- supported => NULL claims against the set the worker registered (pgflow.workers.supported, keyed
-- once by register_worker): a worker with 1,000 pairs then sends none of them with each batch.
-- A worker id with no row (never registered, or its row deleted since) fails with SQLSTATE PFW01,
-- pgflow's own code for an unregistered worker (class PF is used by neither Postgres nor the SQL
-- standard), so a caller tells it from every other error by its code alone. With explicit pairs
-- such a worker still claims (its poll falls back to them): the tasks it claims then record no
-- last_worker_id, which can only name a registered worker.
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
  -- The support set keyed as pgflow._support_keys builds it.
  sup_keys jsonb;
  c_msg bigint[];
  c_run uuid[];
  c_step text[];
  c_idx integer[];
  c_att integer[];
  c_off integer[];
  changed integer;
  malformed boolean;
  reg_queue text;
  -- The worker id stamped on claimed tasks: NULL for a worker with no row (see above).
  stamp uuid := start_tasks.worker_id;
begin
  if q is null then
    raise exception 'start_tasks: queue_name must not be NULL' using errcode = '22004';
  end if;
  if supported is null then
    -- The registered set, already keyed: one primary-key lookup whatever the set's size.
    select w.queue_name, coalesce(w.supported_keys, pgflow._support_keys(w.supported))
    into reg_queue, sup_keys
    from pgflow.workers w where w.worker_id = start_tasks.worker_id;
    if not found then
      raise exception 'start_tasks: worker % is not registered, so it has no recorded support set', start_tasks.worker_id
        using errcode = 'PFW01', hint = 'register it with pgflow.register_worker, or pass the supported pairs';
    end if;
    -- A set registered for another queue says nothing about this one.
    if reg_queue is distinct from q then
      raise exception 'start_tasks: worker % is registered for queue %, not %', start_tasks.worker_id,
        quote_literal(reg_queue), quote_literal(q)
        using errcode = '22023', hint = 'claim on the queue the worker registered, or pass the supported pairs';
    end if;
  -- One pass over the pairs both checks and unpacks them: this cost grows with the set and is
  -- paid per batch, which is why workers claim against their registered set instead.
  elsif jsonb_typeof(supported) = 'array' then
    select coalesce(jsonb_object_agg(
             case when jsonb_typeof(e) = 'array' then coalesce(e ->> 0, '') || chr(31) || coalesce(e ->> 1, '') else '' end,
             true), '{}'::jsonb),
           bool_or(case when jsonb_typeof(e) <> 'array' then true
                        when jsonb_array_length(e) <> 2 then true
                        else jsonb_typeof(e -> 0) <> 'string' or jsonb_typeof(e -> 1) <> 'string' end)
    into sup_keys, malformed
    from jsonb_array_elements(supported) e;
    -- Key-share locked, as the foreign key would: the row cannot vanish before the claim.
    perform 1 from pgflow.workers w where w.worker_id = start_tasks.worker_id for key share;
    if not found then
      stamp := null;
    end if;
  end if;
  if supported is not null and (jsonb_typeof(supported) <> 'array' or malformed) then
    raise exception 'start_tasks: supported must be a JSON array of [flow_slug, step_slug] pairs, got %',
      left(coalesce(supported::text, 'NULL'), 200) using errcode = '22023';
  end if;

  with claimed as (
    update pgflow.step_tasks t
    set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
        last_worker_id = stamp
    -- One index lookup per id: `message_id = any (msg_ids)` let the planner scan every task the
    -- queue ever had.
    from (select distinct m from unnest(msg_ids) m where m is not null) i(mid),
         pgflow.runs r, pgflow.step_states ss
    where t.queue_name = q
      and t.message_id = i.mid
      and t.status = 'queued'
      and sup_keys ? (t.flow_slug || chr(31) || t.step_slug)
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
           when not (sup_keys ? (t.flow_slug || chr(31) || t.step_slug)) then 'unsupported'
           when t.status = 'started' then 'started'
           else 'ineligible'
         end,
         -- The task's identity whenever one owns the message (claimed or not), so the worker can
         -- say which flow and step an unclaimed message needs; input and attempt only if claimed.
         t.flow_slug,
         t.run_id,
         t.step_slug,
         t.task_index,
         -- The handler input, built here rather than in a helper function: a SQL function with
         -- its own search_path is planned again on every call, and this runs once per claimed task.
         case when c.mid is not null then
           case
             when s.step_type = 'map' and s.deps_count = 0 then r.input -> t.task_index
             when s.step_type = 'map' then
               (select ss.output -> t.task_index
                from pgflow.deps d
                join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = d.dep_slug
                where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug)
             when s.deps_count = 0 then r.input
             else (select coalesce(jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
                   from pgflow.deps d
                   join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = d.dep_slug
                   where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug
                     and ss.status = 'completed')
           end
         end,
         c.attempt
  from ids i
  left join claimed c on c.mid = i.mid
  left join pgflow.step_tasks t on t.queue_name = q and t.message_id = i.mid
  left join pgflow.steps s on c.mid is not null and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
  left join pgflow.runs r on c.mid is not null and r.run_id = t.run_id
  order by i.mid;
end;
$$;

-- ---- schemas/0720_ensure_flow_compiled.sql: pgflow._option_differences(p_flow_slug text, p_options jsonb)
-- Every runtime option whose supplied value differs from the stored one, as
-- [{step, option, stored, supplied}] (step NULL for a flow option), in definition order. Unset
-- values compare as what the definition functions store for them: the flow defaults (maxAttempts 3,
-- baseDelay 1, timeout 60), NULL (inherit) for a step's maxAttempts, baseDelay and timeout, 0 for
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
    cross join lateral (values ('maxAttempts', f.opt_max_attempts, 3, 0), ('baseDelay', f.opt_base_delay, 1, 1),
                               ('timeout', f.opt_timeout, 60, 2)) as o(option, stored, fallback, ord)
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

-- ---- schemas/0720_ensure_flow_compiled.sql: pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, route_plan jsonb, options jsonb)
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
  option_differences jsonb;
  q text;
begin
  problems := pgflow._definition_problems(ensure_flow_compiled.flow_slug, shape, route_plan)
              || pgflow._option_problems(options);
  if cardinality(problems) > 0 then
    raise exception 'flow %: invalid definition: %', coalesce(ensure_flow_compiled.flow_slug, 'NULL'),
      array_to_string(problems, '; ') using errcode = '22023';
  end if;
  -- One compile per slug at a time: concurrent workers of the same flow wait here.
  perform pg_advisory_xact_lock(hashtext('pgflow.flow:' || lower(ensure_flow_compiled.flow_slug)));

  select f.flow_slug into existing from pgflow.flows f where lower(f.flow_slug) = lower(ensure_flow_compiled.flow_slug);
  if existing is null then
    perform pgflow._create_flow_from_definition(ensure_flow_compiled.flow_slug, shape, route_plan, options);
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
  if cardinality(differences) = 0 and (jsonb_array_length(option_differences) = 0
                                       or not pgflow.is_local_development()) then
    -- Options that differ are reported, not applied (see the top of this file).
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
  -- Local development: check the new shared queues before deleting anything.
  if route_plan ->> 'mode' = 'routed' then
    for q in select distinct value #>> '{}' from jsonb_each(route_plan -> 'queues') order by 1 loop
      perform pgflow._check_shared_queue(q, existing);
    end loop;
  end if;
  perform pgflow.delete_flow_and_data(existing);
  perform pgflow._create_flow_from_definition(existing, shape, route_plan, options);
  return jsonb_build_object('status', 'recompiled', 'differences', to_jsonb(differences),
                            'optionDifferences', option_differences);
end;
$$;

-- ---- schemas/0800_coverage.sql: pgflow.queue_coverage(queue_name text, stale_after interval)
-- The coverage check: per queue, the (flow, step) pairs that need a handler and whether a live
-- worker serves each. A point-in-time operator check, read-only; not a startup gate.
--
-- Pairs: every persisted route (any stored flow can be started), plus the pairs of tasks that are
-- still queued or started in started runs (work waiting: snapshots never move, so the retries of
-- a route changed since still arrive on the queue the task was created for).
-- Live: a worker on that queue, not stopped or deprecated, whose heartbeat is fresher than
-- stale_after, lists the pair in its support set.
-- Stale: a started task whose last worker is not seen any more (heartbeat older than stale_after,
-- stopped, or no worker row names it); stalled recovery takes it back after the step's timeout
-- + 30 s. A deprecated worker still counts as seen: it finishes what it holds.
-- Status, the first that applies (one place decides it, so the CLI, status and the dashboard agree):
--   MISSING  work waiting and no live worker serves the pair: nothing will run it;
--   STALE    a live worker serves the pair, but a started task is held by a worker that is gone;
--   ok       a live worker serves the pair;
--   idle     a route with no work waiting and no live worker: nothing to do until a run starts.
-- Its return type or parameter names changed: it is dropped and created again.
drop function pgflow.queue_coverage(queue_name text, stale_after interval);
create or replace function pgflow.queue_coverage(
  queue_name text default null,
  stale_after interval default '30 seconds'
)
returns table (
  queue_name text,
  flow_slug text,
  step_slug text,
  routed boolean,
  queued_tasks bigint,
  started_tasks bigint,
  stale_tasks bigint,
  live_workers bigint,
  served boolean,
  status text
)
language sql
stable
set search_path = ''
as $$
  -- Only the recently seen workers, read once by heartbeat range: not the whole worker history.
  with recent as materialized (
    select w.worker_id, w.queue_name, w.supported, w.deprecated
    from pgflow._recent_workers(clock_timestamp() - stale_after) w
  ),
  -- Work waiting, counted in one pass over the open tasks of started runs.
  work as (
    select t.queue_name, t.flow_slug, t.step_slug,
           count(*) filter (where t.status = 'queued') as queued,
           count(*) filter (where t.status = 'started') as started,
           count(*) filter (where t.status = 'started' and not exists (
             select 1 from recent w where w.worker_id = t.last_worker_id)) as stale
    from pgflow.step_tasks t
    join pgflow.runs r on r.run_id = t.run_id
    where t.status in ('queued', 'started') and r.status = 'started'
      and (queue_coverage.queue_name is null or t.queue_name = queue_coverage.queue_name)
    group by t.queue_name, t.flow_slug, t.step_slug
  ),
  pairs as (
    select s.queue_name, s.flow_slug, s.step_slug from pgflow.steps s
    where queue_coverage.queue_name is null or s.queue_name = queue_coverage.queue_name
    union
    select k.queue_name, k.flow_slug, k.step_slug from work k
  ),
  counted as (
    select p.queue_name, p.flow_slug, p.step_slug,
           exists (select 1 from pgflow.steps s
                   where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug
                     and s.queue_name = p.queue_name) as routed,
           coalesce(k.queued, 0) as queued,
           coalesce(k.started, 0) as started,
           coalesce(k.stale, 0) as stale,
           (select count(*) from recent w
            where w.queue_name = p.queue_name and not w.deprecated
              and w.supported @> jsonb_build_array(jsonb_build_array(p.flow_slug, p.step_slug))) as live
    from pairs p
    left join work k
      on k.queue_name = p.queue_name and k.flow_slug = p.flow_slug and k.step_slug = p.step_slug
  )
  select c.queue_name, c.flow_slug, c.step_slug, c.routed, c.queued, c.started, c.stale, c.live,
         c.live > 0,
         case when c.live = 0 and c.queued + c.started > 0 then 'MISSING'
              when c.stale > 0 then 'STALE'
              when c.live > 0 then 'ok'
              else 'idle' end
  from counted c
  order by c.queue_name, c.flow_slug, c.step_slug
$$;

-- ---- privileges on function pgflow._option_differences(p_flow_slug text, p_options jsonb)
revoke all on function pgflow._option_differences(p_flow_slug text, p_options jsonb) from public;

-- ---- privileges on function pgflow.queue_coverage(queue_name text, stale_after interval)
revoke all on function pgflow.queue_coverage(queue_name text, stale_after interval) from public;

insert into pgflow.migrations (name) values ('20261203190000_pgflow_operator_views') on conflict (name) do nothing;

commit;
