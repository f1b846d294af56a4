-- Starting a run. Status times are clock_timestamp() under the run's lock (see 0250_run_progress.sql).

-- Creates a run of a flow and starts its root steps. Every task's message is sent to its step's
-- routed queue in the same transaction that records the task's queue snapshot and message id.
--
-- security definer: a client role granted only this function (service_role, see 0900_privileges
-- and docs/permissions.md) can start a run without write access to pgflow's tables or to PGMQ's
-- queues. It is safe because search_path is pinned to '' and every name is schema-qualified.
--
-- priority (from -1000 to 1000, default 0) ranks the run's tasks that wait for capacity: each is
-- released before waiting tasks of a lower priority (docs/flow-control.md).
--
-- traceparent (a W3C trace context, '00-<trace id>-<span id>-<flags>', default NULL) puts the run
-- in the caller's trace: workers make every attempt's and step's span a child of it, hours later
-- and in other processes (docs/telemetry.md). A malformed one is refused, naming it.
create or replace function pgflow.start_flow(
  flow_slug text, input jsonb, run_id uuid default null, priority integer default 0,
  traceparent text default null
)
returns pgflow.runs
language plpgsql
volatile
security definer
set search_path = ''
as $$
#variable_conflict use_column
declare
  flow pgflow.flows;
  new_run_id uuid := coalesce(start_flow.run_id, gen_random_uuid());
  result pgflow.runs;
  target text;
  started_as text;
  step_count integer;
  roots text[];
  plain_roots boolean;
begin
  -- An alias wins over a slug (no flow may take an alias's name unless it carries that alias).
  select a.flow_slug into target from pgflow.aliases a where a.alias = start_flow.flow_slug;
  if found then
    started_as := start_flow.flow_slug;
  else
    target := start_flow.flow_slug;
  end if;
  select * into flow from pgflow.flows f where f.flow_slug = target;
  if not found and started_as is not null then
    raise exception 'alias % points at flow %, which does not exist', started_as, target
      using errcode = '22023', hint = 'compile that version, or activate another (pgflow.activate_alias)';
  end if;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(start_flow.flow_slug), 'NULL')
      using errcode = '22023', hint = 'check the slug, or start a worker for the flow so it is compiled';
  end if;
  if start_flow.input is null then
    raise exception 'flow %: input must not be SQL NULL', flow.flow_slug
      using errcode = '22004', hint = 'pass a JSON value, for example ''{}''::jsonb or ''null''::jsonb';
  end if;
  -- The default priority (nearly every run) is not checked against the bounds: a start pays nothing.
  if start_flow.priority is distinct from 0 then
    perform pgflow._check_run_priority(flow.flow_slug, start_flow.priority);
  end if;
  if start_flow.traceparent is not null
     and start_flow.traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' then
    raise exception 'traceparent % is not a W3C trace context', quote_literal(start_flow.traceparent)
      using errcode = '22023',
            hint = 'pass ''00-<32 hex trace id>-<16 hex span id>-<2 hex flags>'' in lowercase, or NULL';
  end if;
  -- A generated id is new; a given one may be taken (the primary key would say so less clearly).
  if start_flow.run_id is not null and exists (select 1 from pgflow.runs r where r.run_id = new_run_id) then
    raise exception 'run % already exists', new_run_id using errcode = '23505';
  end if;

  select count(*),
         array_agg(s.step_slug order by s.step_index) filter (where s.deps_count = 0),
         bool_and(s.deps_count > 0 or (s.kind = 'task' and s.step_type = 'single' and s.required_input_pattern is null
                                      and s.forbidden_input_pattern is null))
  into step_count, roots, plain_roots
  from pgflow.steps s where s.flow_slug = flow.flow_slug;
  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, started_as, priority, traceparent)
  values (new_run_id, flow.flow_slug, start_flow.input, step_count, started_as, start_flow.priority,
          start_flow.traceparent)
  returning * into result;

  if plain_roots then
    -- Every root step is one task with no condition (most flows): each starts as it is created,
    -- exactly as pgflow._start_ready_steps would start it, without that function's passes over
    -- the run (a third of a start_flow's server time, which is in every run's pickup latency).
    insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps, status, started_at,
                                    initial_tasks, remaining_tasks)
    select new_run_id, s.flow_slug, s.step_slug, s.deps_count,
           case when s.deps_count = 0 then 'started' else 'created' end,
           case when s.deps_count = 0 then clock_timestamp() end,
           case when s.deps_count = 0 then 1 end,
           case when s.deps_count = 0 then 1 end
    from pgflow.steps s where s.flow_slug = flow.flow_slug;
    perform pgflow._send_task_messages(new_run_id, flow.flow_slug, roots,
                                       array_fill(1, array[cardinality(roots)]));
  else
    insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps)
    select new_run_id, s.flow_slug, s.step_slug, s.deps_count
    from pgflow.steps s where s.flow_slug = flow.flow_slug;
    perform pgflow._start_ready_steps(new_run_id);
  end if;

  -- A flow without steps has nothing to wait for.
  if step_count = 0 then
    update pgflow.runs r set status = 'completed', completed_at = clock_timestamp(), output = '{}'::jsonb
    where r.run_id = new_run_id and r.status = 'started' and r.remaining_steps = 0;
  end if;

  -- The row as inserted is the row to return unless the start moved the run on: a ready-step pass
  -- may end it (a condition that fails it, steps that all finish at once), and so does a flow
  -- without steps.
  if not plain_roots or step_count = 0 then
    select * into result from pgflow.runs r where r.run_id = new_run_id;
  end if;
  return result;
end;
$$;
