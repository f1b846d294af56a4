-- How a run moves forward: the messages of started steps' tasks are sent, steps become ready,
-- start, complete, are skipped or fail the run, and the run completes. Every function here is
-- called with the run's lock held (start_flow, the completion and failure paths, stalled recovery).
--
-- Status times (started_at, completed_at, failed_at, skipped_at of steps and runs) are
-- clock_timestamp(), read while the run's lock is held, not now(): now() is when the transaction
-- began, and a transaction that waited for a run's lock would stamp its changes earlier than
-- changes another transaction committed on that run meanwhile. A client orders a run's events by
-- these times (src/client/diff.ts), so a dependent could appear to start before the dependency
-- that released it completed. Under the lock, every later change of a run gets a later time.

-- Creates the tasks of steps just started (p_steps, with p_counts tasks each; with p_skip_existing,
-- but for the indexes that already have a task) and sends one message per task, batched per (queue, delay) in send_batch calls of at most 1,000; each task is inserted
-- with its queue snapshot and message id in the same transaction, and channel pgflow_queue:<queue>
-- is notified for every queue that got messages visible at once. A task of a step with a
-- concurrency limit is inserted waiting instead, and released at commit (0260_flow_control.sql).
-- A task of a rate-limited step carries its rate scope and key (0262_rate_limits.sql).
create or replace function pgflow._send_task_messages(
  p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[], p_skip_existing boolean default false,
  p_sources jsonb[] default null
)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
  ids bigint[];
  batch_size constant integer := 1000;
  one_queue text;
  one_delay integer;
  one_id bigint;
  one_limited boolean;
  room integer;
  cur bigint;
  one_msg jsonb;
  slice_end integer;
  -- PGMQ 1.5+ has send(queue, msg, headers, timestamptz) and send_batch(queue, msgs, headers,
  -- timestamptz), which its integer-delay forms reach through SQL wrappers planned on every call
  -- (about 0.05 ms a call, in every start and chain hop: bench/results.md, round 32). The same
  -- visibility either way; the catalog lookup keeps PGMQ before 1.5, which has neither, working.
  direct_send constant boolean :=
    to_regprocedure('pgmq.send(text,jsonb,jsonb,timestamp with time zone)') is not null;
begin
  -- One task of one step (a flow's root step, a chain's next step): one send and one insert,
  -- without the grouping below, which costs a start_flow about a fifth of its time. The same
  -- rows, message and notification as the general path.
  if cardinality(p_steps) = 1 and p_counts[1] = 1 and not p_skip_existing then
    -- Whether the queue is shared (it has a cursor, 0258_fair_window.sql) is read in this same
    -- statement: a flow alone on its queue runs no statement more for fairness.
    select s.queue_name, s.opt_start_delay, s.concurrency_scope is not null or s.rate_scope is not null,
           (select c.claimed_msg_id from pgflow.queue_cursors c where c.queue_name = s.queue_name)
    into one_queue, one_delay, one_limited, cur
    from pgflow.steps s where s.flow_slug = p_flow_slug and s.step_slug = p_steps[1];
  end if;
  -- A shared queue in window mode, or a transaction past its window (0258_fair_window.sql): the
  -- task waits for its turn, and the queue is announced so a reader's claim releases it.
  if one_limited is false and one_delay = 0 and cur is not null then
    select w.room, w.cursor into room, cur from pgflow._window_room(one_queue, 1) w;
  end if;
  if room = 0 then
    insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status, priority, input)
    select p_run_id, p_flow_slug, p_steps[1], 0, one_queue, 'waiting', r.priority + s.priority, p_sources[1] -> 0
    from pgflow.runs r, pgflow.steps s
    where r.run_id = p_run_id and s.flow_slug = p_flow_slug and s.step_slug = p_steps[1];
    perform pgflow._announce('pgflow_queue:' || one_queue, '');
    return;
  end if;
  if one_limited is false then
    one_msg := jsonb_build_object('flow_slug', p_flow_slug, 'run_id', p_run_id,
                                  'step_slug', p_steps[1], 'task_index', 0);
    if direct_send then
      select pgmq.send(one_queue, one_msg, null::jsonb, clock_timestamp() + make_interval(secs => one_delay))
      into one_id;
    else
      select pgmq.send(one_queue, one_msg, one_delay) into one_id;
    end if;
    insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, message_id, input)
    values (p_run_id, p_flow_slug, p_steps[1], 0, one_queue, one_id, p_sources[1] -> 0);
    if cur is not null then
      perform pgflow._note_depth(one_queue, cur, one_id);
    end if;
    if one_delay = 0 then
      perform pgflow._announce('pgflow_queue:' || one_queue, '');
    end if;
    return;
  end if;
  -- The tasks of steps with a concurrency limit are created waiting, without a message, with
  -- their priority and their key; the release at commit sends what capacity allows
  -- (0260_flow_control.sql). The key is read once, here, from the run input or the task's input.
  -- A map task's element is kept on its row as in the general path below.
  insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status, priority,
                                 limit_scope, limit_key, rate_scope, rate_key, input)
  select p_run_id, p_flow_slug, s.step_slug, i, s.queue_name, 'waiting', r.priority + s.priority,
         s.concurrency_scope,
         pgflow._task_limit_key(s.concurrency_key, s.concurrency_key_from, s.step_type, r.input, x.input,
                                p_run_id, p_flow_slug, s.step_slug, i),
         s.rate_scope,
         case when s.rate_scope is not null then
           pgflow._task_limit_key(s.rate_key, s.rate_key_from, s.step_type, r.input, x.input,
                                  p_run_id, p_flow_slug, s.step_slug, i) end,
         x.input
  from unnest(p_steps, p_counts, p_sources) as n(step_slug, task_count, source)
  join pgflow.steps s on s.flow_slug = p_flow_slug and s.step_slug = n.step_slug
  join pgflow.runs r on r.run_id = p_run_id
  cross join lateral (
    select g.i, null::jsonb from generate_series(0, n.task_count - 1) as g(i) where n.source is null
    union all
    select (e.ord - 1)::integer, e.value
    from jsonb_array_elements(n.source) with ordinality as e(value, ord) where n.source is not null
  ) as x(i, input)
  where s.concurrency_scope is not null
    and (not p_skip_existing
         or not exists (select 1 from pgflow.step_tasks t
                        where t.run_id = p_run_id and t.step_slug = s.step_slug and t.task_index = i));
  for grp in
    select s.queue_name, s.opt_start_delay as delay,
           array_agg(s.step_slug order by s.step_slug, i) as steps,
           array_agg(i order by s.step_slug, i) as idxs,
           array_agg(x.input order by s.step_slug, i) as inputs,
           -- A rate-limited task is sent at once like any other, with its scope, key and
           -- priority: its window is checked when it is claimed (0262_rate_limits.sql).
           array_agg(s.rate_scope order by s.step_slug, i) as rate_scopes,
           -- A task waiting for its queue's turn (0258_fair_window.sql) is ordered by priority.
           array_agg(s.priority order by s.step_slug, i) as step_prios,
           array_agg(case when s.rate_scope is not null then
                       (select r.priority from pgflow.runs r where r.run_id = p_run_id) + s.priority
                     else 0 end order by s.step_slug, i) as priorities,
           array_agg(case when s.rate_scope is not null then
                       pgflow._task_limit_key(s.rate_key, s.rate_key_from, s.step_type,
                                              (select r.input from pgflow.runs r where r.run_id = p_run_id),
                                              x.input, p_run_id, p_flow_slug, s.step_slug, i) end
                     order by s.step_slug, i) as rate_keys,
           -- The body is informational only: the claim reads ids, never bodies.
           array_agg(jsonb_build_object('flow_slug', p_flow_slug, 'run_id', p_run_id,
                                        'step_slug', s.step_slug, 'task_index', i)
                     order by s.step_slug, i) as msgs
    -- p_sources, when given, holds each map step's array (NULL for a single step); unnest pads a
    -- missing p_sources with NULLs.
    from unnest(p_steps, p_counts, p_sources) as n(step_slug, task_count, source)
    join pgflow.steps s on s.flow_slug = p_flow_slug and s.step_slug = n.step_slug
    -- A map's elements in one pass over its array (jsonb_array_elements decompresses it once).
    cross join lateral (
      select g.i, null::jsonb from generate_series(0, n.task_count - 1) as g(i) where n.source is null
      union all
      select (e.ord - 1)::integer, e.value
      from jsonb_array_elements(n.source) with ordinality as e(value, ord) where n.source is not null
    ) as x(i, input)
    -- A resumed run's map may hold tasks reused from its source run already: those are done.
    where s.concurrency_scope is null
      and (not p_skip_existing
       or not exists (select 1 from pgflow.step_tasks t
                      where t.run_id = p_run_id and t.step_slug = s.step_slug and t.task_index = i))
    -- Rate-limited tasks apart: they never wait for their queue's turn.
    group by s.queue_name, s.opt_start_delay, s.rate_scope is not null
  loop
    -- What the queue's window has room for is sent; the rest waits for its turn
    -- (0258_fair_window.sql). A delayed or rate-limited task is always sent.
    room := cardinality(grp.msgs);
    cur := null;
    if grp.delay = 0 and grp.rate_scopes[1] is null then
      select w.room, w.cursor into room, cur from pgflow._window_room(grp.queue_name, room) w;
      if room < cardinality(grp.msgs) then
        insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status, priority, input)
        select p_run_id, p_flow_slug, u.step_slug, u.task_index, grp.queue_name, 'waiting',
               (select r.priority from pgflow.runs r where r.run_id = p_run_id) + u.priority, u.input
        from unnest(grp.steps[room + 1:], grp.idxs[room + 1:], grp.inputs[room + 1:], grp.step_prios[room + 1:])
          as u(step_slug, task_index, input, priority);
        perform pgflow._announce('pgflow_queue:' || grp.queue_name, '');
      end if;
    end if;
    -- Large maps go out in slices so one statement never carries an unbounded array.
    for slice_start in 1 .. room by batch_size loop
      slice_end := least(slice_start + batch_size - 1, room);
      -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
      if direct_send then
        select array_agg(id order by id) into ids
        from pgmq.send_batch(grp.queue_name, grp.msgs[slice_start:slice_end],
                             null::jsonb[], clock_timestamp() + make_interval(secs => grp.delay)) as id;
      else
        select array_agg(id order by id) into ids
        from pgmq.send_batch(grp.queue_name, grp.msgs[slice_start:slice_end], grp.delay) as id;
      end if;
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, message_id, input,
                                     rate_scope, rate_key, priority)
      select p_run_id, p_flow_slug, u.step_slug, u.task_index, grp.queue_name, u.id, u.input, u.rate_scope, u.rate_key,
             u.priority
      from unnest(grp.steps[slice_start:slice_end],
                  grp.idxs[slice_start:slice_end], ids,
                  grp.inputs[slice_start:slice_end],
                  grp.rate_scopes[slice_start:slice_end],
                  grp.rate_keys[slice_start:slice_end],
                  grp.priorities[slice_start:slice_end])
        as u(step_slug, task_index, id, input, rate_scope, rate_key, priority);
    end loop;
    if cur is not null and room > 0 then
      perform pgflow._note_depth(grp.queue_name, cur, ids[cardinality(ids)]);
    end if;
    -- Wakes the workers waiting on the queue, if any waits (0045_listeners.sql: busy workers read
    -- again anyway, and a NOTIFY would serialise this commit with every other one that sends
    -- one). Sent in this transaction, so it is delivered at commit or never: a worker never wakes
    -- before the messages are visible to its read. A delayed
    -- group is not announced (nothing to read yet); the workers' fallback poll finds it. Equal
    -- notifications of one transaction are folded into one by Postgres.
    if grp.delay = 0 and room > 0 then
      perform pgflow._announce('pgflow_queue:' || grp.queue_name, '');
    end if;
  end loop;
end;
$$;

-- Completes a step with its output, releases its dependents and counts it off the run; completes the
-- run when it was the last step. The caller holds the run's lock.
create or replace function pgflow._complete_step(p_run_id uuid, p_step_slug text, p_output jsonb)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  flow text;
begin
  update pgflow.step_states ss
  set status = 'completed', output = p_output, completed_at = clock_timestamp(), remaining_tasks = 0
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug
  returning ss.flow_slug into flow;

  -- Only dependents that still wait count it: one skipped by a cascade, or taken over by a resume
  -- from its source run, waits for nothing (see complete_tasks).
  update pgflow.step_states ss
  set remaining_deps = ss.remaining_deps - 1
  from pgflow.deps d
  where ss.run_id = p_run_id and d.flow_slug = flow and d.dep_slug = p_step_slug
    and ss.step_slug = d.step_slug and ss.status = 'created';

  perform pgflow._count_off_step(p_run_id);
end;
$$;

-- Counts a finished (completed or skipped) step off its run and completes the run, with its
-- output, when none is left.
create or replace function pgflow._count_off_step(p_run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  remaining integer;
begin
  update pgflow.runs r set remaining_steps = r.remaining_steps - 1
  where r.run_id = p_run_id
  returning r.remaining_steps into remaining;
  if remaining = 0 then
    update pgflow.runs r
    set status = 'completed', completed_at = clock_timestamp(),
        output = (select o from pgflow._run_output(p_run_id) o)
    where r.run_id = p_run_id and r.status = 'started';
  end if;
end;
$$;

-- Skips a step: its outstanding tasks are cancelled and their messages archived, and it is counted
-- off the run. 'skip' releases its dependents (which run without its key); a cascade skips every
-- dependent that has not started, transitively. The caller holds the run's lock.
create or replace function pgflow._skip_step(p_run_id uuid, p_step_slug text, p_reason text, p_cascade boolean)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  flow text;
  dependent text;
begin
  update pgflow.step_states ss
  set status = 'skipped', skip_reason = p_reason, skipped_at = clock_timestamp(), remaining_tasks = 0
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug and ss.status in ('created', 'started')
  returning ss.flow_slug into flow;
  if flow is null then
    return;
  end if;
  -- Waiting tasks first (no message to archive): a release that holds one has committed its
  -- message before the archive below reads the tasks (0260_flow_control.sql). Then messages, then
  -- task rows: a concurrent read_and_claim holds a message row while it claims the task row, so
  -- the opposite order could deadlock with it.
  update pgflow.step_tasks t set status = 'cancelled'
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.status = 'waiting';
  perform pgflow._archive_step_messages(p_run_id, p_step_slug, array['queued', 'started', 'failed']);
  update pgflow.step_tasks t set status = 'cancelled'
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.status in ('queued', 'started');
  perform pgflow._count_off_step(p_run_id);

  if p_cascade then
    for dependent in
      select d.step_slug from pgflow.deps d
      join pgflow.step_states ss on ss.run_id = p_run_id and ss.step_slug = d.step_slug
      where d.flow_slug = flow and d.dep_slug = p_step_slug and ss.status = 'created'
    loop
      perform pgflow._skip_step(p_run_id, dependent, 'dependency_skipped', true);
    end loop;
  else
    update pgflow.step_states ss
    set remaining_deps = ss.remaining_deps - 1
    from pgflow.deps d
    where ss.run_id = p_run_id and d.flow_slug = flow and d.dep_slug = p_step_slug
      and ss.step_slug = d.step_slug and ss.status = 'created';
  end if;
end;
$$;

-- Fails the run: the step (if given) and the run become failed, every outstanding task is cancelled,
-- and the messages of all of them are archived in every queue they touched.
create or replace function pgflow._fail_run(p_run_id uuid, p_step_slug text, p_error text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  update pgflow.step_states ss
  set status = 'failed', failed_at = clock_timestamp(), error_message = p_error
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug;

  update pgflow.runs r
  set status = 'failed', failed_at = clock_timestamp(), error_message = p_error
  where r.run_id = p_run_id;

  -- Waiting tasks first (see _skip_step), then messages, then task rows: a concurrent
  -- read_and_claim holds a message row while it claims the task row, so the opposite order could
  -- deadlock with it. A claim that wins the message starts its task, which is cancelled right
  -- after; its completion is then ignored. pgflow.complete_and_claim, which waits for its queue's
  -- turn lock after its completions, relies on this order too (0410_read_and_claim.sql).
  update pgflow.step_tasks t set status = 'cancelled' where t.run_id = p_run_id and t.status = 'waiting';
  perform pgflow._archive_task_messages(p_run_id, array['queued', 'started', 'failed']);
  update pgflow.step_tasks t
  set status = 'cancelled'
  where t.run_id = p_run_id and t.status in ('queued', 'started');
end;
$$;

-- Starts every step whose dependencies are done: evaluates its condition, creates its tasks and
-- sends their messages. Steps that finish at once (an empty map, a skip) can make further steps
-- ready, so this repeats until nothing changes. The caller holds the run's lock.
--
-- The tasks of the started steps are created at the end, by _send_task_messages, with their
-- message ids: inserted once rather than inserted and then updated (an update in the creating
-- transaction also checks every foreign key again, and touches every index). A pass that fails
-- the run creates them without messages first, so _fail_run cancels them with the rest.
create or replace function pgflow._start_ready_steps(p_run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  run pgflow.runs;
  ready record;
  source jsonb;
  cond_input jsonb;
  task_count integer;
  progressed boolean := true;
  -- The steps started by this call and their task counts, in start order.
  new_steps text[] := '{}';
  new_counts integer[] := '{}';
  -- Each started step's array to map over, NULL for a single step.
  new_sources jsonb[] := '{}';
  fail_step text;
  fail_error text;
  reused_count integer;
  reused_any boolean := false;
  child_outcome text;
  -- Whether a step of this pass did more than note itself as started (skipped, completed, started
  -- children or a wait): only then can a later step of the pass find the run ended or itself
  -- skipped, and only then are they looked up again.
  disturbed boolean := false;
begin
  <<pass>>
  while progressed loop
    progressed := false;
    select * into run from pgflow.runs r where r.run_id = p_run_id;
    exit when run.status <> 'started';
    for ready in
      select ss.step_slug, s.step_type, s.deps_count, s.required_input_pattern, s.forbidden_input_pattern,
             s.when_unmet, s.kind,
             -- A map step has at most one dependency: the one it maps over.
             (select min(d.dep_slug) from pgflow.deps d
              where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug) as map_dep
      from pgflow.step_states ss
      join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
      where ss.run_id = p_run_id and ss.status = 'created' and ss.remaining_deps = 0
      order by s.step_index
    loop
      -- An earlier step of this pass may have failed the run or cascaded a skip onto this one.
      if disturbed then
        exit when (select r.status from pgflow.runs r where r.run_id = p_run_id) <> 'started';
        continue when (select ss.status from pgflow.step_states ss
                       where ss.run_id = p_run_id and ss.step_slug = ready.step_slug) <> 'created';
      end if;

      -- Conditions: if / ifNot are containment patterns on the run input (root steps) or on the
      -- object of completed dependency outputs (dependent steps).
      if ready.required_input_pattern is not null or ready.forbidden_input_pattern is not null then
        cond_input := case when ready.deps_count = 0 then run.input
                           else (select o from pgflow._dependency_outputs(p_run_id, run.flow_slug, ready.step_slug) o) end;
        if not ((ready.required_input_pattern is null or cond_input @> ready.required_input_pattern)
                and (ready.forbidden_input_pattern is null or not cond_input @> ready.forbidden_input_pattern)) then
          if ready.when_unmet = 'fail' then
            fail_step := ready.step_slug;
            fail_error := format('[CONDITION_UNMET] step %s: its if/ifNot condition does not hold', ready.step_slug);
            exit pass;
          end if;
          perform pgflow._skip_step(p_run_id, ready.step_slug, 'condition_unmet', ready.when_unmet = 'skip-cascade');
          disturbed := true;
          progressed := true;
          continue;
        end if;
      end if;

      if ready.step_type = 'single' then
        task_count := 1;
      else
        -- A map step fans out over the run input (root map) or its one dependency's output.
        if ready.deps_count = 0 then
          source := run.input;
        else
          if (select ss.status from pgflow.step_states ss
              where ss.run_id = p_run_id and ss.step_slug = ready.map_dep) = 'skipped' then
            -- Nothing to map over: the map is skipped like its source, and releases its dependents.
            perform pgflow._skip_step(p_run_id, ready.step_slug, 'dependency_skipped', false);
            disturbed := true;
            progressed := true;
            continue;
          end if;
          select ss.output into source from pgflow.step_states ss
          where ss.run_id = p_run_id and ss.step_slug = ready.map_dep;
        end if;
        if jsonb_typeof(source) is distinct from 'array' then
          fail_step := ready.step_slug;
          fail_error := format('[TYPE_VIOLATION] map step %s needs an array to map over, got %s',
            ready.step_slug, coalesce(jsonb_typeof(source), 'nothing'));
          exit pass;
        end if;
        task_count := jsonb_array_length(source);
      end if;

      -- A resumed run reuses the tasks its source run completed of this map, when it maps over
      -- the same array (then element i is the same element).
      reused_count := 0;
      if run.restart_mode = 'resume' and ready.step_type = 'map' and task_count > 0
         and source = (case when ready.deps_count = 0
                            then (select r.input from pgflow.runs r where r.run_id = run.restart_of_run_id)
                            else (select ss.output from pgflow.step_states ss
                                  where ss.run_id = run.restart_of_run_id and ss.step_slug = ready.map_dep) end) then
        insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, status, output,
                                       attempts_count, last_worker_id, started_at, completed_at)
        select p_run_id, t.flow_slug, t.step_slug, t.task_index, t.queue_name, 'completed', t.output,
               t.attempts_count, t.last_worker_id, t.started_at, t.completed_at
        from pgflow.step_tasks t
        where t.run_id = run.restart_of_run_id and t.step_slug = ready.step_slug
          and t.status = 'completed' and t.task_index < task_count;
        get diagnostics reused_count = row_count;
      end if;

      update pgflow.step_states ss
      set status = 'started', started_at = clock_timestamp(), initial_tasks = task_count,
          remaining_tasks = task_count - reused_count
      where ss.run_id = p_run_id and ss.step_slug = ready.step_slug;

      if task_count = 0 or reused_count = task_count or ready.kind <> 'task' then
        disturbed := true;
      end if;
      if task_count = 0 then
        perform pgflow._complete_step(p_run_id, ready.step_slug, '[]'::jsonb);
        progressed := true;
      elsif reused_count = task_count then
        perform pgflow._complete_step(p_run_id, ready.step_slug,
          (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
           where t.run_id = p_run_id and t.step_slug = ready.step_slug));
        progressed := true;
      elsif ready.kind = 'flow' then
        -- A child-flow step starts its child runs here and has no message (0290_child_flows.sql).
        child_outcome := pgflow._start_child_runs(p_run_id, ready.step_slug, task_count,
                                                  case when ready.step_type = 'map' then source end);
        if child_outcome = 'completed' then
          progressed := true;
        elsif child_outcome is not null then
          fail_step := ready.step_slug;
          fail_error := child_outcome;
          exit pass;
        end if;
      elsif ready.kind in ('event', 'sleep') then
        -- A waiting step has no task and no message (0280_events.sql).
        if pgflow._start_wait(p_run_id, ready.step_slug) then
          progressed := true;
        end if;
      else
        reused_any := reused_any or reused_count > 0;
        new_steps := new_steps || ready.step_slug;
        new_counts := new_counts || task_count;
        new_sources := array_append(new_sources, case when ready.step_type = 'map' then source end);
      end if;
    end loop;
  end loop;
  if fail_step is not null then
    insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name)
    select p_run_id, run.flow_slug, n.step_slug, i, s.queue_name
    from unnest(new_steps, new_counts) as n(step_slug, task_count)
    join pgflow.steps s on s.flow_slug = run.flow_slug and s.step_slug = n.step_slug
    cross join generate_series(0, n.task_count - 1) as i
    on conflict on constraint step_tasks_pkey do nothing;
    perform pgflow._fail_run(p_run_id, fail_step, fail_error);
    return;
  end if;
  if cardinality(new_steps) > 0 then
    perform pgflow._send_task_messages(p_run_id, run.flow_slug, new_steps, new_counts, reused_any, new_sources);
  end if;
end;
$$;
