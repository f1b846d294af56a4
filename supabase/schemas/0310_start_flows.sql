-- Starting many runs of one flow in one call: a bulk import, a backfill, a fan-out from a client.

-- What start_flows checks before it starts anything, raising with the bad value named: the flow
-- (an alias is resolved before a slug: no flow may take an alias's name unless it carries that
-- alias; started_as is the alias, else NULL), the priority (the default, nearly every run, is not
-- checked against the bounds) and the traceparent. The same checks, in the same words, as
-- start_flow's own: start_flow keeps its copy inline, since a nested call on its path (once per
-- run) measured slower.
create or replace function pgflow._start_target(
  p_name text, p_priority integer, p_traceparent text, out flow pgflow.flows, out started_as text
)
language plpgsql
stable
set search_path = ''
as $$
declare
  target text;
begin
  select a.flow_slug into target from pgflow.aliases a where a.alias = p_name;
  if found then
    started_as := p_name;
  else
    target := p_name;
  end if;
  select * into flow from pgflow.flows f where f.flow_slug = target;
  if not found and started_as is not null then
    raise exception 'alias % points at flow %, which does not exist', started_as, target
      using errcode = '22023', hint = 'compile that version, or activate another (pgflow.activate_alias)';
  end if;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(p_name), 'NULL')
      using errcode = '22023', hint = 'check the slug, or start a worker for the flow so it is compiled';
  end if;
  if p_priority is distinct from 0 then
    perform pgflow._check_run_priority(flow.flow_slug, p_priority);
  end if;
  if p_traceparent is not null and p_traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' then
    raise exception 'traceparent % is not a W3C trace context', quote_literal(p_traceparent)
      using errcode = '22023',
            hint = 'pass ''00-<32 hex trace id>-<16 hex span id>-<2 hex flags>'' in lowercase, or NULL';
  end if;
end;
$$;

-- Sends one message per run for each of the given root steps (one task each), in send_batch calls
-- of at most 1,000, and inserts each task with its queue snapshot and message id in the same
-- transaction; announces each queue that got messages visible at once. The set-based twin of
-- _send_task_messages' one-task path for many runs: the same rows, messages and notifications.
-- Only for steps without a concurrency limit (their tasks wait instead of being sent).
create or replace function pgflow._send_root_messages(p_run_ids uuid[], p_flow_slug text, p_steps text[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  root record;
  ids bigint[];
  batch_size constant integer := 1000;
  slice uuid[];
begin
  for root in
    select s.step_slug, s.queue_name, s.opt_start_delay as delay
    from pgflow.steps s where s.flow_slug = p_flow_slug and s.step_slug = any(p_steps)
    order by s.step_index
  loop
    -- Bounded slices: one statement never carries an unbounded array of messages.
    for slice_start in 1 .. cardinality(p_run_ids) by batch_size loop
      slice := p_run_ids[slice_start:slice_start + batch_size - 1];
      -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
      select array_agg(id order by id) into ids
      from pgmq.send_batch(
        root.queue_name,
        -- The body is informational only: the claim reads ids, never bodies.
        (select array_agg(jsonb_build_object('flow_slug', p_flow_slug, 'run_id', u.run_id,
                                             'step_slug', root.step_slug, 'task_index', 0)
                          order by u.ord)
         from unnest(slice) with ordinality as u(run_id, ord)),
        root.delay) as id;
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, message_id)
      select u.run_id, p_flow_slug, root.step_slug, 0, root.queue_name, u.id
      from unnest(slice, ids) as u(run_id, id);
    end loop;
    -- As in _send_task_messages: delivered at commit or never; a delayed step is found by polls.
    if root.delay = 0 then
      perform pgflow._announce('pgflow_queue:' || root.queue_name, '');
    end if;
  end loop;
end;
$$;

-- Starts one run of flow_slug (or of the flow alias flow_slug points at) per element of inputs, a
-- JSON array, all with the same priority and traceparent (as start_flow's). Returns the new runs'
-- ids in the order of inputs, and the concrete flow they run. Either every run starts or none
-- does: a refused element refuses the call, naming its index (0-based, as in the array).
--
-- Set-based: the runs, their step states, and (for roots that are single steps without a
-- condition or a concurrency limit, most flows) their tasks and messages are written by one
-- statement each, whatever the count, where 10,000 start_flow calls would run 10,000 times
-- everything start_flow does. Other roots (a condition to evaluate on each input, a map over
-- it, a concurrency limit) are started run by run, exactly as start_flow starts them.
--
-- At most 100,000 inputs a call: one transaction writes every run, and its locks and WAL grow
-- with them; split larger imports into several calls.
--
-- security definer, granted like start_flow (0900_privileges): a client allowed to start a run
-- may start several, and needs no write access to pgflow's tables or PGMQ's queues.
create or replace function pgflow.start_flows(
  flow_slug text, inputs jsonb, priority integer default 0, traceparent text default null,
  out run_ids uuid[], out run_flow_slug text
)
language plpgsql
volatile
security definer
set search_path = ''
as $$
#variable_conflict use_column
declare
  max_inputs constant integer := 100000;
  checked record;
  flow pgflow.flows;
  started_as text;
  run_count integer;
  bad_index bigint;
  step_count integer;
  roots text[];
  plain_roots boolean;
  limited_roots boolean;
  map_root boolean;
  one_run uuid;
begin
  select * into checked
  from pgflow._start_target(start_flows.flow_slug, start_flows.priority, start_flows.traceparent);
  flow := checked.flow;
  started_as := checked.started_as;
  if jsonb_typeof(start_flows.inputs) is distinct from 'array' then
    raise exception 'flow %: inputs must be a JSON array of run inputs, got %', flow.flow_slug,
      coalesce(jsonb_typeof(start_flows.inputs), 'SQL NULL')
      using errcode = '22023', hint = 'pass one element per run, for example ''[{"id": 1}, {"id": 2}]''::jsonb';
  end if;
  run_count := jsonb_array_length(start_flows.inputs);
  if run_count > max_inputs then
    raise exception 'flow %: % inputs in one call, at most % are accepted', flow.flow_slug, run_count, max_inputs
      using errcode = '54000', hint = 'split the inputs into several start_flows calls';
  end if;
  run_flow_slug := flow.flow_slug;
  run_ids := '{}';
  if run_count = 0 then
    return;
  end if;

  select count(*),
         array_agg(s.step_slug order by s.step_index) filter (where s.deps_count = 0),
         bool_and(s.deps_count > 0 or (s.step_type = 'single' and s.required_input_pattern is null
                                      and s.forbidden_input_pattern is null)),
         bool_or(s.deps_count = 0 and s.concurrency_scope is not null),
         bool_or(s.deps_count = 0 and s.step_type = 'map')
  into step_count, roots, plain_roots, limited_roots, map_root
  from pgflow.steps s where s.flow_slug = flow.flow_slug;

  -- start_flow would start such a run and fail it at once (nothing to map over); in a bulk start
  -- a wrong element is far likelier a caller's mistake than a run wanted failed, so it is refused.
  if map_root then
    select e.ord - 1 into bad_index
    from jsonb_array_elements(start_flows.inputs) with ordinality as e(value, ord)
    where jsonb_typeof(e.value) <> 'array'
    order by e.ord limit 1;
    if found then
      raise exception 'flow %: inputs[%] is a JSON %, but the flow''s root step maps over its input', flow.flow_slug,
        bad_index, jsonb_typeof(start_flows.inputs -> bad_index::integer)
        using errcode = '22023', hint = 'pass an array as every element (an empty one for no tasks)';
    end if;
  end if;

  -- The ids first, in input order: they are the answer, and the rows below follow them.
  select array_agg(gen_random_uuid() order by g.i) into run_ids
  from generate_series(1, run_count) as g(i);
  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, started_as, priority, traceparent)
  select u.run_id, flow.flow_slug, e.value, step_count, started_as, start_flows.priority,
         start_flows.traceparent
  from unnest(run_ids) with ordinality as u(run_id, ord)
  join jsonb_array_elements(start_flows.inputs) with ordinality as e(value, ord) on e.ord = u.ord;

  if plain_roots then
    -- As start_flow: every root is one task with no condition, started as it is created.
    insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps, status, started_at,
                                    initial_tasks, remaining_tasks)
    select u.run_id, s.flow_slug, s.step_slug, s.deps_count,
           case when s.deps_count = 0 then 'started' else 'created' end,
           case when s.deps_count = 0 then clock_timestamp() end,
           case when s.deps_count = 0 then 1 end,
           case when s.deps_count = 0 then 1 end
    from unnest(run_ids) as u(run_id)
    cross join pgflow.steps s where s.flow_slug = flow.flow_slug;
    if limited_roots then
      -- Tasks over a limit wait in pgflow's rows with their run's priority and key.
      foreach one_run in array run_ids loop
        perform pgflow._send_task_messages(one_run, flow.flow_slug, roots,
                                           array_fill(1, array[cardinality(roots)]));
      end loop;
    elsif roots is not null then
      perform pgflow._send_root_messages(run_ids, flow.flow_slug, roots);
    end if;
  else
    insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps)
    select u.run_id, s.flow_slug, s.step_slug, s.deps_count
    from unnest(run_ids) as u(run_id)
    cross join pgflow.steps s where s.flow_slug = flow.flow_slug;
    foreach one_run in array run_ids loop
      perform pgflow._start_ready_steps(one_run);
    end loop;
  end if;

  -- A flow without steps has nothing to wait for.
  if step_count = 0 then
    update pgflow.runs r set status = 'completed', completed_at = clock_timestamp(), output = '{}'::jsonb
    where r.run_id = any(run_ids) and r.status = 'started' and r.remaining_steps = 0;
  end if;
end;
$$;
