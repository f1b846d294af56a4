-- Fixes from the adversarial review (issue 14), on top of the first release:
-- - a plain or step-mode flow never adopts an existing queue: create_flow and add_step refuse a
--   name PGMQ already lists under any spelling, naming it; the queues pgflow creates for a flow are
--   recorded (pgflow.created_queues) and deletion drops only those;
-- - delete_flow_and_data locks the flow's runs before messages and tasks, the order completions
--   take: it no longer deadlocks with complete_task, and leaves none of the flow's messages behind;
-- - every numeric option is bounded by one table (pgflow.option_bounds(), the same as the DSL's), in
--   the definition functions, the compiler and the table checks: no value can overflow a claim or
--   stalled recovery;
-- - worker retention: expired worker rows are pruned (pgflow.prune_workers, a batch at every
--   registration, pgflow.set_worker_retention), and the keep-alive, coverage and fence reads read
--   only recently seen workers, by heartbeat range;
-- - a retry or stalled recovery whose message is gone fails the task visibly instead of queueing
--   it with nothing to claim;
-- - worker function names are validated where they are stored (the keep-alive builds a URL path
--   from them);
-- - complete_task, complete_tasks and fail_task require the attempt;
-- - service_role may start runs (start_flow is security definer) and read them.
-- Function signatures do not change. Existing data: option values above the new bounds are lowered
-- to them, worker rows with names the keep-alive could not use are deleted (each with a notice),
-- and the queues existing plain and step-mode flows were given by pgflow are recorded.
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if to_regclass('pgflow.migrations') is not null then
    if exists (select 1 from pgflow.migrations m where m.name = '20261203100000_pgflow_review_fixes') then
      raise exception 'pgflow migration 20261203100000_pgflow_review_fixes is already applied to this database; nothing was changed'
        using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
    end if;
  end if;
end
$$;

set local lock_timeout = '5s';

-- ---- schemas/0020_names.sql: pgflow.is_valid_function_name
-- Worker function names (Supabase Edge Function names): 1-128 letters, digits, '_' or '-', the same
-- rule as the worker's functionName option (src/worker/config.ts). The keep-alive puts the name
-- into a URL path (/functions/v1/<name>), so nothing else ('/', '.', '?', '%', spaces) may appear.
create or replace function pgflow.is_valid_function_name(function_name text)
returns boolean
language sql
immutable
set search_path = ''
as $$
  select function_name is not null and function_name ~ '^[A-Za-z0-9_-]{1,128}$'
$$;

-- ---- schemas/0025_option_bounds.sql
-- The accepted range of every numeric flow and step option: integers, both ends included, durations
-- in seconds. The TypeScript DSL validates against the same table (OPTION_BOUNDS in
-- src/dsl/options.ts); both are tested against tests/fixtures/option_bounds.json.
--
-- The maxima keep every value SQL derives from an option far inside integer: a claim hides a
-- message for timeout + 2 s, stalled recovery waits timeout + 30 s, a retry waits
-- base_delay * 2^(attempt - 1) (capped). Without them one flow's timeout near 2^31 made every claim
-- batch on its queue fail, and stalled recovery fail for the whole database.
create or replace function pgflow.option_bounds()
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select '{
    "maxAttempts": {"min": 1, "max": 1000},
    "baseDelay": {"min": 1, "max": 31536000},
    "timeout": {"min": 3, "max": 31536000},
    "startDelay": {"min": 0, "max": 31536000}
  }'::jsonb
$$;

-- Whether a value is inside its option's bounds; NULL (an unset step option) is. The table checks
-- call this, so a value written directly into pgflow.flows or pgflow.steps is held to the same
-- table as the definition functions.
create or replace function pgflow.option_in_bounds(option_name text, option_value integer)
returns boolean
language sql
immutable
set search_path = ''
as $$
  select option_value is null
    or (option_value >= (pgflow.option_bounds() -> option_name ->> 'min')::integer
        and option_value <= (pgflow.option_bounds() -> option_name ->> 'max')::integer)
$$;

-- Raises, naming the option (as the DSL spells it and as SQL does) and the value, when a value is
-- outside its bounds, or NULL where a value is required. p_where names the flow or step.
create or replace function pgflow._check_option(
  p_where text, p_option text, p_sql_name text, p_value integer, p_required boolean
)
returns void
language plpgsql
immutable
set search_path = ''
as $$
declare
  b jsonb := pgflow.option_bounds() -> p_option;
begin
  if (p_value is null and p_required) or not pgflow.option_in_bounds(p_option, p_value) then
    raise exception '%: % (%) must be an integer between % and %, got %', p_where, p_option, p_sql_name,
      b ->> 'min', b ->> 'max', coalesce(p_value::text, 'NULL')
      using errcode = '22023',
        hint = format('%s is %s from %s to %s', p_option,
                      case when p_option = 'maxAttempts' then 'a count' else 'a number of seconds' end,
                      b ->> 'min', b ->> 'max');
  end if;
end;
$$;

-- Existing option values above the bounds are lowered to them: such a value broke every claim on
-- its queue, or stalled recovery for the whole database, so no working flow can have one.
do $$
declare
  r record;
begin
  for r in
    select 'flow ' || f.flow_slug as what from pgflow.flows f
    where not (pgflow.option_in_bounds('maxAttempts', f.opt_max_attempts)
               and pgflow.option_in_bounds('baseDelay', f.opt_base_delay)
               and pgflow.option_in_bounds('timeout', f.opt_timeout))
    union all
    select 'step ' || s.flow_slug || '.' || s.step_slug from pgflow.steps s
    where not (pgflow.option_in_bounds('maxAttempts', s.opt_max_attempts)
               and pgflow.option_in_bounds('baseDelay', s.opt_base_delay)
               and pgflow.option_in_bounds('timeout', s.opt_timeout)
               and pgflow.option_in_bounds('startDelay', s.opt_start_delay))
  loop
    raise notice 'pgflow: % has options above pgflow.option_bounds(); they are lowered to the bounds', r.what;
  end loop;
end
$$;
update pgflow.flows f
set opt_max_attempts = least(f.opt_max_attempts, 1000), opt_base_delay = least(f.opt_base_delay, 31536000),
    opt_timeout = least(f.opt_timeout, 31536000)
where f.opt_max_attempts > 1000 or f.opt_base_delay > 31536000 or f.opt_timeout > 31536000;
update pgflow.steps s
set opt_max_attempts = least(s.opt_max_attempts, 1000), opt_base_delay = least(s.opt_base_delay, 31536000),
    opt_timeout = least(s.opt_timeout, 31536000), opt_start_delay = least(s.opt_start_delay, 31536000)
where s.opt_max_attempts > 1000 or s.opt_base_delay > 31536000 or s.opt_timeout > 31536000
   or s.opt_start_delay > 31536000;

alter table pgflow.flows
  drop constraint flows_max_attempts_range,
  drop constraint flows_base_delay_range,
  drop constraint flows_timeout_range,
  add constraint flows_max_attempts_range check (pgflow.option_in_bounds('maxAttempts', opt_max_attempts)),
  add constraint flows_base_delay_range check (pgflow.option_in_bounds('baseDelay', opt_base_delay)),
  add constraint flows_timeout_range check (pgflow.option_in_bounds('timeout', opt_timeout));
alter table pgflow.steps
  drop constraint steps_max_attempts_range,
  drop constraint steps_base_delay_range,
  drop constraint steps_timeout_range,
  drop constraint steps_start_delay_range,
  add constraint steps_max_attempts_range check (pgflow.option_in_bounds('maxAttempts', opt_max_attempts)),
  add constraint steps_base_delay_range check (pgflow.option_in_bounds('baseDelay', opt_base_delay)),
  add constraint steps_timeout_range check (pgflow.option_in_bounds('timeout', opt_timeout)),
  add constraint steps_start_delay_range check (pgflow.option_in_bounds('startDelay', opt_start_delay));

-- Worker function names the keep-alive could not put into a URL path. The worker has always refused
-- them (its functionName option), so only hand-written SQL can have stored one; such rows are
-- deleted, each with a notice, before the names are checked where they are stored.
do $$
declare
  r record;
begin
  for r in
    select wf.function_name from pgflow.worker_functions wf where not pgflow.is_valid_function_name(wf.function_name)
    union
    select w.function_name from pgflow.workers w where not pgflow.is_valid_function_name(w.function_name)
  loop
    raise notice 'pgflow: deleting the workers and worker function of invalid function name %', quote_literal(r.function_name);
  end loop;
end
$$;
delete from pgflow.workers w where not pgflow.is_valid_function_name(w.function_name);
delete from pgflow.deploy_fence_functions ff where not pgflow.is_valid_function_name(ff.function_name);
delete from pgflow.worker_functions wf where not pgflow.is_valid_function_name(wf.function_name);
alter table pgflow.workers
  add constraint workers_function_name_is_valid check (pgflow.is_valid_function_name(function_name));
alter table pgflow.worker_functions
  add constraint worker_functions_name_is_valid check (pgflow.is_valid_function_name(function_name));

-- Indexes for the hot worker reads and for pruning (see schemas/0035_workers.sql, 0040_runtime.sql).
-- step_tasks_last_worker_idx is built in this transaction: writes to step_tasks wait for it (about a
-- second per million tasks).
create index if not exists workers_heartbeat_idx on pgflow.workers (last_heartbeat_at);
create index if not exists step_tasks_last_worker_idx on pgflow.step_tasks (last_worker_id)
  where last_worker_id is not null;

alter table pgflow.settings
  drop constraint settings_key_known,
  add constraint settings_key_known check (key in ('local_development', 'worker_retention'));

-- ---- schemas/0055_created_queues.sql
-- The queues pgflow created for one flow's own use: a plain flow's default queue or a private step
-- queue (withStepQueues). Deletion drops a queue only when it is listed here for the deleted flow,
-- so an application's queue, or one pgflow found already there, is never dropped. Shared queues
-- have their own record (pgflow.shared_queues) and are never dropped with a flow.
create table if not exists pgflow.created_queues (
  queue_name text not null,
  flow_slug text not null,
  created_at timestamptz not null default now(),
  constraint created_queues_pkey primary key (queue_name),
  constraint created_queues_flow_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint created_queues_name_length check (length(queue_name) between 1 and 47)
);

create index if not exists created_queues_flow_idx on pgflow.created_queues (flow_slug);

-- The queues existing plain and step-mode flows were given by pgflow. pgflow created a flow's
-- default queue in the transaction that created the flow, and a private step queue in the one that
-- added the step, so PGMQ's created_at equals the flow's or step's created_at exactly. A queue the
-- flow found already there (created earlier by an application) has an older created_at: it is not
-- recorded, and deleting the flow leaves it in place.
insert into pgflow.created_queues (queue_name, flow_slug, created_at)
select q.queue_name, f.flow_slug, q.created_at
from pgflow.flows f
join pgmq.list_queues() q on q.queue_name = lower(f.flow_slug) and q.created_at = f.created_at
where f.queue_mode = 'flow'
union
select q.queue_name, s.flow_slug, q.created_at
from pgflow.steps s
join pgflow.flows f on f.flow_slug = s.flow_slug and f.queue_mode = 'step'
join pgmq.list_queues() q on q.queue_name = s.queue_name and q.created_at = s.created_at
on conflict (queue_name) do nothing;

-- ---- schemas/0100_create_flow.sql: pgflow.create_flow
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
  perform pgflow._check_option('flow ' || flow_slug, 'maxAttempts', 'max_attempts', max_attempts, true);
  perform pgflow._check_option('flow ' || flow_slug, 'baseDelay', 'base_delay', base_delay, true);
  perform pgflow._check_option('flow ' || flow_slug, 'timeout', 'timeout', timeout, true);
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

  -- A plain flow's steps all share the flow's default queue. pgflow creates it and records that it
  -- did; a name that is already taken (an application's queue under any spelling, a declared
  -- shared queue) is refused rather than adopted, so deleting the flow can never drop it.
  if queue_mode = 'flow' then
    perform pgflow._provision_own_queue(lower(flow_slug), flow_slug);
  end if;
  return created;
end;
$$;

-- ---- schemas/0110_add_step.sql: pgflow.add_step
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
  return created;
end;
$$;

-- ---- schemas/0300_start_flow.sql: pgflow.start_flow
-- Creates a run of a flow and starts its root steps. Every task's message is sent to its step's
-- routed queue in the same transaction that records the task's queue snapshot and message id.
--
-- security definer: a client role granted only this function (service_role, see 0900_privileges
-- and docs/permissions.md) can start a run without write access to pgflow's tables or to PGMQ's
-- queues. It is safe because search_path is pinned to '' and every name is schema-qualified.
create or replace function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid default null)
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
begin
  select * into flow from pgflow.flows f where f.flow_slug = start_flow.flow_slug;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(start_flow.flow_slug), 'NULL')
      using errcode = '22023', hint = 'check the slug, or start a worker for the flow so it is compiled';
  end if;
  if start_flow.input is null then
    raise exception 'flow %: input must not be SQL NULL', flow.flow_slug
      using errcode = '22004', hint = 'pass a JSON value, for example ''{}''::jsonb or ''null''::jsonb';
  end if;
  if exists (select 1 from pgflow.runs r where r.run_id = new_run_id) then
    raise exception 'run % already exists', new_run_id using errcode = '23505';
  end if;

  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
  values (new_run_id, flow.flow_slug, start_flow.input,
          (select count(*) from pgflow.steps s where s.flow_slug = flow.flow_slug));

  insert into pgflow.step_states (run_id, flow_slug, step_slug, remaining_deps)
  select new_run_id, s.flow_slug, s.step_slug, s.deps_count
  from pgflow.steps s where s.flow_slug = flow.flow_slug;

  perform pgflow._start_ready_steps(new_run_id);

  -- A flow without steps has nothing to wait for.
  update pgflow.runs r set status = 'completed', completed_at = now(), output = '{}'::jsonb
  where r.run_id = new_run_id and r.status = 'started' and r.remaining_steps = 0;

  select * into result from pgflow.runs r where r.run_id = new_run_id;
  return result;
end;
$$;

-- ---- schemas/0500_complete_task.sql: pgflow.complete_task
-- Completing a task. Late or duplicate completions (the task is no longer started, or its run or step
-- has moved on) change nothing and raise nothing. The caller passes the attempt it ran (start_tasks
-- and read_and_claim return it with the task): a report for an older attempt (its reply was lost,
-- and the task has since been claimed again) is late too, so it can never complete or fail the
-- attempt that is running now. The attempt is required: a report without one cannot be told from a
-- late one, so it would complete whichever attempt happens to be running. The parameter keeps its
-- NULL default only so that a call without it gets this explanation instead of "function does not
-- exist"; an operator completing a task by hand passes step_tasks.attempts_count.
--
-- This runs once per task, so the common path is kept to a few statements in one function: nested
-- plpgsql calls each cost a plan and a search_path save/restore. What _complete_step and
-- _count_off_step do is written out here, and the ready-step pass runs only when a dependent's last
-- dependency just completed (a pass always leaves no ready step behind, so no other step can be
-- waiting for one).
create or replace function pgflow.complete_task(
  run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  run_status text;
  task pgflow.step_tasks;
  left_tasks integer;
  ready integer;
begin
  if complete_task.attempt is null then
    raise exception 'complete_task: attempt is required (task % [%] of run %)', complete_task.step_slug,
      complete_task.task_index, complete_task.run_id
      using errcode = '22004',
        hint = 'pass the attempt start_tasks or read_and_claim returned with the task; without it a late report could complete a newer attempt';
  end if;
  -- The run lock orders every state change of one run: completions, failures and stalled recovery.
  select r.status into run_status from pgflow.runs r where r.run_id = complete_task.run_id for update;
  if run_status is distinct from 'started' then
    return;
  end if;
  -- Under the run lock, an update that matches only a started task is both the check and the change.
  update pgflow.step_tasks t
  set status = 'completed', completed_at = now(), output = complete_task.output
  where t.run_id = complete_task.run_id and t.step_slug = complete_task.step_slug
    and t.task_index = complete_task.task_index and t.status = 'started'
    and t.attempts_count = complete_task.attempt
  returning * into task;
  if not found then
    return;
  end if;
  perform pgmq.archive(task.queue_name, task.message_id);

  -- Count the task off; when it was the step's last, complete the step in the same statement. A
  -- map step's output is its tasks' outputs in index order (this task's output is already stored);
  -- CASE evaluates the aggregate only for the last task of a map.
  update pgflow.step_states ss
  set remaining_tasks = ss.remaining_tasks - 1,
      status = case when ss.remaining_tasks = 1 then 'completed' else ss.status end,
      completed_at = case when ss.remaining_tasks = 1 then now() else ss.completed_at end,
      output = case
        when ss.remaining_tasks <> 1 then ss.output
        when s.step_type = 'map' then
          (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
           where t.run_id = task.run_id and t.step_slug = task.step_slug)
        else task.output
      end
  from pgflow.steps s
  where ss.run_id = task.run_id and ss.step_slug = task.step_slug
    and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
  returning ss.remaining_tasks into left_tasks;

  if left_tasks = 0 then
    -- Release the dependents (as _complete_step does) and note whether any became ready.
    with released as (
      update pgflow.step_states ss
      set remaining_deps = ss.remaining_deps - 1
      from pgflow.deps d
      where ss.run_id = task.run_id and d.flow_slug = task.flow_slug and d.dep_slug = task.step_slug
        and ss.step_slug = d.step_slug
      returning ss.remaining_deps, ss.status
    )
    select count(*) filter (where r.remaining_deps = 0 and r.status = 'created') into ready from released r;

    -- Count the step off the run (as _count_off_step does); the last one completes the run with the
    -- outputs of its completed leaf steps. The run is started: its lock is held and it was checked.
    update pgflow.runs r
    set remaining_steps = r.remaining_steps - 1,
        status = case when r.remaining_steps = 1 then 'completed' else r.status end,
        completed_at = case when r.remaining_steps = 1 then now() else r.completed_at end,
        output = case when r.remaining_steps = 1 then coalesce((
          select jsonb_object_agg(ss.step_slug, ss.output)
          from pgflow.step_states ss
          where ss.run_id = task.run_id and ss.status = 'completed'
            and not exists (select 1 from pgflow.deps d
                            where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
        ), '{}'::jsonb) else r.output end
    where r.run_id = task.run_id;

    if ready > 0 then
      perform pgflow._start_ready_steps(task.run_id);
    end if;
  end if;
  return next task;
end;
$$;

-- ---- schemas/0500_complete_task.sql: pgflow.complete_tasks
-- Several completions in one round trip: each is exactly complete_task (same checks, same
-- idempotence, the attempt required; a late or duplicate one changes nothing), all in one
-- transaction. Runs are locked in run_id order, so two batches that share runs wait for each other
-- instead of deadlocking.
create or replace function pgflow.complete_tasks(
  run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[] default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  i integer;
begin
  if cardinality(run_ids) is distinct from cardinality(step_slugs)
     or cardinality(run_ids) is distinct from cardinality(task_indexes)
     or cardinality(run_ids) is distinct from cardinality(outputs)
     or cardinality(run_ids) is distinct from cardinality(attempts) then
    raise exception 'complete_tasks: % run ids, % step slugs, % task indexes, % outputs and % attempts',
      cardinality(run_ids), cardinality(step_slugs), cardinality(task_indexes), cardinality(outputs),
      coalesce(cardinality(attempts)::text, 'no')
      using errcode = '22023', hint = 'pass one run id, step slug, task index, output and attempt per task (the attempt is required, as in complete_task)';
  end if;
  for i in select u.ord from unnest(run_ids) with ordinality as u(run_id, ord) order by u.run_id, u.ord loop
    return query select * from pgflow.complete_task(run_ids[i], step_slugs[i], task_indexes[i], outputs[i], attempts[i]);
  end loop;
end;
$$;

-- ---- schemas/0510_fail_task.sql: pgflow._task_failed
-- Failing a task: retry with exponential backoff on the task's own queue snapshot while attempts
-- remain and its message is still there; then the step's whenExhausted decides: fail the step and
-- the run, or skip the step (skip-cascade: and its dependents). The caller holds the run's lock.
create or replace function pgflow._task_failed(
  p_run_id uuid, p_step_slug text, p_task_index integer, p_error text, p_retry_delay integer
)
returns pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  task pgflow.step_tasks;
  max_attempts integer;
  base_delay integer;
  when_exhausted text;
begin
  select t.* into task from pgflow.step_tasks t
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index;
  select coalesce(s.opt_max_attempts, f.opt_max_attempts), coalesce(s.opt_base_delay, f.opt_base_delay),
         s.when_exhausted
  into max_attempts, base_delay, when_exhausted
  from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug
  where s.flow_slug = task.flow_slug and s.step_slug = task.step_slug;

  if task.attempts_count < max_attempts then
    -- base_delay * 2^(attempt - 1): the first retry waits base_delay, each later one twice as long.
    -- The message is made visible again first, and the retry happens only if PGMQ still had it: a
    -- message purged or deleted outside pgflow would leave the task queued with nothing to claim,
    -- and its run waiting forever.
    perform 1 from pgmq.set_vt(task.queue_name, task.message_id, coalesce(p_retry_delay,
      least(base_delay::numeric * power(2::numeric, task.attempts_count - 1), 2147483647)::integer));
    if found then
      update pgflow.step_tasks t
      set status = 'queued', error_message = p_error, queued_at = now()
      where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index
      returning * into task;
      return task;
    end if;
    -- Nothing can deliver a retry: the attempts end here, visibly, with the reason.
    p_error := format('%s; not retried: its message %s is gone from queue %s (purged or deleted outside pgflow)',
                      p_error, task.message_id, task.queue_name);
    raise warning 'pgflow: task %.% [%] of run %: %', task.flow_slug, task.step_slug, task.task_index, task.run_id, p_error;
  end if;

  update pgflow.step_tasks t
  set status = 'failed', error_message = p_error, failed_at = now()
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index
  returning * into task;
  if when_exhausted = 'fail' then
    perform pgflow._fail_run(p_run_id, p_step_slug, p_error);
  else
    -- The step gives up without failing the run: skipped, with the last error kept on it.
    update pgflow.step_states ss set error_message = p_error
    where ss.run_id = p_run_id and ss.step_slug = p_step_slug;
    perform pgflow._skip_step(p_run_id, p_step_slug, 'handler_failed', when_exhausted = 'skip-cascade');
    perform pgflow._start_ready_steps(p_run_id);
  end if;
  return task;
end;
$$;

-- ---- schemas/0510_fail_task.sql: pgflow.fail_task
-- Like complete_task, a report for an attempt other than the current one is late and changes
-- nothing, and the attempt is required (see complete_task).
create or replace function pgflow.fail_task(
  run_id uuid, step_slug text, task_index integer, error_message text, attempt integer default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  run pgflow.runs;
  task pgflow.step_tasks;
begin
  if fail_task.attempt is null then
    raise exception 'fail_task: attempt is required (task % [%] of run %)', fail_task.step_slug,
      fail_task.task_index, fail_task.run_id
      using errcode = '22004',
        hint = 'pass the attempt start_tasks or read_and_claim returned with the task; without it a late report could fail a newer attempt';
  end if;
  select * into run from pgflow.runs r where r.run_id = fail_task.run_id for update;
  if not found or run.status <> 'started' then
    return;
  end if;
  select * into task from pgflow.step_tasks t
  where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug and t.task_index = fail_task.task_index
  for update;
  if not found or task.status <> 'started' or task.attempts_count <> fail_task.attempt then
    return;
  end if;
  return next pgflow._task_failed(task.run_id, task.step_slug, task.task_index,
                                  coalesce(fail_task.error_message, 'unknown error'), null);
end;
$$;

-- ---- schemas/0600_workers.sql: pgflow.register_worker
create or replace function pgflow.register_worker(
  worker_id uuid,
  queue_name text,
  function_name text,
  supported jsonb default '[]'::jsonb
)
returns pgflow.workers
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  result pgflow.workers;
  fn pgflow.worker_functions;
begin
  if register_worker.worker_id is null or register_worker.queue_name is null or register_worker.function_name is null then
    raise exception 'register_worker: worker_id, queue_name and function_name are required' using errcode = '22004';
  end if;
  if not pgflow.is_valid_function_name(register_worker.function_name) then
    raise exception 'register_worker: invalid function name %', quote_literal(register_worker.function_name)
      using errcode = '22023', hint = 'use 1-128 letters, digits, "_" or "-" (the Edge Function''s name)';
  end if;
  if jsonb_typeof(supported) is distinct from 'array' then
    raise exception 'register_worker: supported must be a JSON array of [flow_slug, step_slug] pairs' using errcode = '22023';
  end if;
  insert into pgflow.worker_functions (function_name) values (register_worker.function_name)
  on conflict (function_name) do update set updated_at = now()
  returning * into fn;
  -- A disabled function (a deploy fence is in place) gets no new workers until its flag is restored.
  if not fn.enabled then
    raise exception 'worker function % is disabled; no new worker may register until it is enabled again', fn.function_name
      using errcode = '55000', hint = 'finish the deploy fence with pgflow.end_deploy_fence, or set worker_functions.enabled';
  end if;
  insert into pgflow.workers (worker_id, queue_name, function_name, supported, supported_keys)
  values (register_worker.worker_id, register_worker.queue_name, register_worker.function_name, register_worker.supported,
          pgflow._support_keys(register_worker.supported))
  returning * into result;
  -- Every start adds a row; each registration also removes a bounded batch of expired ones, so the
  -- table stays about the size of the retention window without a scheduler.
  perform pgflow.prune_workers(100);
  return result;
end;
$$;

-- ---- schemas/0600_workers.sql: pgflow._recent_workers
-- The workers seen since p_since that have not stopped: what the keep-alive, the coverage check and
-- the deploy fence's status count as live (each adds its own conditions). plpgsql plans this with
-- the actual p_since, so the planner sees how few rows are that recent and reads them by heartbeat
-- range (workers_heartbeat_idx); a cutoff it cannot see (a parameter, clock_timestamp()) looks to
-- it like a third of the table, and it scanned every worker the database ever had instead.
create or replace function pgflow._recent_workers(p_since timestamptz)
returns table (worker_id uuid, queue_name text, function_name text, deprecated boolean, supported jsonb)
language plpgsql
stable
set search_path = ''
as $$
begin
  return query
  select w.worker_id, w.queue_name, w.function_name, w.deprecated_at is not null, w.supported
  from pgflow.workers w
  where w.last_heartbeat_at > p_since and w.stopped_at is null;
end;
$$;

-- ---- schemas/0610_worker_retention.sql
-- Worker retention. Every worker start adds a row to pgflow.workers (an Edge isolate lives a few
-- minutes), so rows of workers that stopped or went silent are deleted once they are older than the
-- retention: a bounded batch at every registration, or all at once with prune_workers(). A worker
-- that still holds a started task is kept whatever its age: deploy_fence_status counts those tasks
-- by worker, and stalled recovery has not taken them back yet.

-- How long a stopped or silent worker's row is kept: the 'worker_retention' setting, else 7 days.
create or replace function pgflow.worker_retention()
returns interval
language sql
stable
set search_path = ''
as $$
  select coalesce((select (s.value #>> '{}')::interval from pgflow.settings s where s.key = 'worker_retention'),
                  interval '7 days')
$$;

-- Sets the retention (NULL: back to the default). At least one hour: a live worker heartbeats every
-- few seconds, so only a worker that is long gone can look that old.
create or replace function pgflow.set_worker_retention(retention interval)
returns interval
language plpgsql
volatile
set search_path = ''
as $$
begin
  if retention is null then
    delete from pgflow.settings s where s.key = 'worker_retention';
  elsif retention < interval '1 hour' then
    raise exception 'set_worker_retention: retention must be at least 1 hour, got %', retention
      using errcode = '22023', hint = 'a live worker heartbeats every few seconds; keep stopped workers for hours or days';
  else
    insert into pgflow.settings (key, value) values ('worker_retention', to_jsonb(retention::text))
    on conflict (key) do update set value = excluded.value, updated_at = now();
  end if;
  return pgflow.worker_retention();
end;
$$;

-- Deletes up to max_rows workers (NULL: all) whose last heartbeat and stop are older than the
-- retention and that hold no started task; returns how many. Rows another session is deleting
-- are skipped, so concurrent registrations never wait on each other here.
create or replace function pgflow.prune_workers(max_rows integer default null)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  cutoff timestamptz := now() - pgflow.worker_retention();
  deleted integer;
begin
  if max_rows is not null and max_rows < 1 then
    raise exception 'prune_workers: max_rows must be at least 1 or NULL (all), got %', max_rows
      using errcode = '22023';
  end if;
  with doomed as (
    select w.worker_id from pgflow.workers w
    where w.last_heartbeat_at < cutoff
      and (w.stopped_at is null or w.stopped_at < cutoff)
      and not exists (select 1 from pgflow.step_tasks t
                      where t.last_worker_id = w.worker_id and t.status = 'started')
    order by w.last_heartbeat_at
    limit max_rows
    for update skip locked
  ), gone as (
    delete from pgflow.workers w using doomed d where w.worker_id = d.worker_id returning 1
  )
  select count(*)::integer into deleted from gone;
  return deleted;
end;
$$;

-- ---- schemas/0705_own_queue_provisioning.sql
-- A flow's own queues (its default queue in flow mode, its private step queues in step mode) are
-- created by pgflow and recorded in pgflow.created_queues. A name PGMQ already lists, under any
-- spelling, is refused with an error that names it: PGMQ keeps 'Billing' and 'billing' as two
-- meta rows over one table pair, so adopting either would mix an application's messages with the
-- flow's, and dropping it with the flow would destroy the application's queue.
create or replace function pgflow._provision_own_queue(p_queue text, p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  owner_flow text;
  spellings text[];
begin
  -- The same lock shared-queue declaration takes on a name, so the two never race for one.
  perform pg_advisory_xact_lock(hashtext('pgflow.queue:' || p_queue));
  select c.flow_slug into owner_flow from pgflow.created_queues c where c.queue_name = p_queue;
  if owner_flow is not null and owner_flow <> p_flow_slug then
    raise exception 'flow %: queue % belongs to flow %', p_flow_slug, p_queue, owner_flow
      using errcode = '55000', hint = 'use another flow slug';
  end if;
  -- Only a default queue can be: private names contain '__', which shared names may not.
  if exists (select 1 from pgflow.shared_queues s where s.queue_name = p_queue) then
    raise exception 'flow %: its default queue % is a declared shared queue', p_flow_slug, p_queue
      using errcode = '55000', hint = 'use another flow slug, or route this flow with routeFlow()';
  end if;

  select array_agg(q.queue_name::text order by q.queue_name) into spellings
  from pgmq.list_queues() q where lower(q.queue_name) = p_queue;
  if owner_flow is not null and spellings = array[p_queue] then
    return;  -- pgflow's own queue, already there
  end if;
  if spellings is not null then
    raise exception 'flow %: queue % already exists and pgflow did not create it for this flow; it will not adopt it',
      p_flow_slug, array_to_string(spellings, ', ')
      using errcode = '55000',
        hint = 'an application''s queue keeps its name: use another flow slug, or route the steps to shared queues with routeFlow()';
  end if;
  perform pgmq.create(p_queue);
  -- Re-created after someone dropped it: the record is already there.
  insert into pgflow.created_queues (queue_name, flow_slug) values (p_queue, p_flow_slug)
  on conflict (queue_name) do nothing;
end;
$$;

-- ---- schemas/0720_ensure_flow_compiled.sql: pgflow._option_problems
-- Every runtime option outside pgflow.option_bounds(), one line each; empty when all are inside.
-- Checked before anything is created, so a value the DSL would refuse (or JSON that is not an
-- integer) is reported with the others instead of failing a cast halfway through the compile.
-- JSON null counts as unset.
create or replace function pgflow._option_problems(p_options jsonb)
returns text[]
language sql
immutable
set search_path = ''
as $$
  with given as (
    select 'flow' as owner, e.key, e.value
    from jsonb_each(case when jsonb_typeof(p_options -> 'flow') = 'object' then p_options -> 'flow' else '{}'::jsonb end) e
    where e.key in ('maxAttempts', 'baseDelay', 'timeout')
    union all
    select 'step ' || s.key, e.key, e.value
    from jsonb_each(case when jsonb_typeof(p_options -> 'steps') = 'object' then p_options -> 'steps' else '{}'::jsonb end) s
    cross join lateral jsonb_each(case when jsonb_typeof(s.value) = 'object' then s.value else '{}'::jsonb end) e
    where e.key in ('maxAttempts', 'baseDelay', 'timeout', 'startDelay')
  )
  select coalesce(array_agg(format('%s: %s must be an integer between %s and %s, got %s',
                                   g.owner, g.key, b.bounds ->> 'min', b.bounds ->> 'max', g.value)
                            order by g.owner, g.key), '{}')
  from given g
  cross join lateral (select pgflow.option_bounds() -> g.key as bounds) b
  where jsonb_typeof(g.value) <> 'null'
    and not (jsonb_typeof(g.value) = 'number' and g.value::text ~ '^-?[0-9]{1,10}$'
             and (g.value::text)::bigint between (b.bounds ->> 'min')::bigint and (b.bounds ->> 'max')::bigint)
$$;

-- ---- schemas/0720_ensure_flow_compiled.sql: pgflow.ensure_flow_compiled
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
    return jsonb_build_object('status', 'compiled', 'differences', '[]'::jsonb);
  end if;
  if existing <> ensure_flow_compiled.flow_slug then
    raise exception 'flow % conflicts with existing flow % (flow slugs are unique case-insensitively)',
      ensure_flow_compiled.flow_slug, existing using errcode = '23505', hint = 'use the existing spelling or a new slug';
  end if;

  differences := pgflow._definition_differences(
    pgflow._flow_shape(existing), shape, pgflow._flow_route_plan(existing), route_plan);
  if cardinality(differences) = 0 then
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb);
  end if;
  if not pgflow.is_local_development() then
    -- Production: change nothing. Existing tasks keep their queue snapshots.
    return jsonb_build_object('status', 'mismatch', 'differences', to_jsonb(differences));
  end if;
  -- Local development: check the new shared queues before deleting anything.
  if route_plan ->> 'mode' = 'routed' then
    for q in select distinct value #>> '{}' from jsonb_each(route_plan -> 'queues') order by 1 loop
      perform pgflow._check_shared_queue(q, existing);
    end loop;
  end if;
  perform pgflow.delete_flow_and_data(existing);
  perform pgflow._create_flow_from_definition(existing, shape, route_plan, options);
  return jsonb_build_object('status', 'recompiled', 'differences', to_jsonb(differences));
end;
$$;

-- ---- schemas/0730_delete_flow_and_data.sql: pgflow.delete_flow_and_data
-- Lock order, the same as every other writer's: the flow, then each of its runs (in run_id order,
-- as complete_tasks takes them), then messages, then task rows. complete_task, fail_task and
-- stalled recovery take the run first and its task and messages after; a claim takes a message and
-- then its task. So a completion in flight finishes before the delete goes on, and the task and
-- message it created are then seen and removed here; a completion that comes later finds its run
-- gone and changes nothing. Neither fails, and no message of the flow is left behind.
create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  flow pgflow.flows;
  grp record;
  dropped text[];
  own_queue text;
begin
  perform pg_advisory_xact_lock(hashtext('pgflow.flow:' || lower(delete_flow_and_data.flow_slug)));
  select * into flow from pgflow.flows f where f.flow_slug = delete_flow_and_data.flow_slug for update;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(delete_flow_and_data.flow_slug), 'NULL')
      using errcode = '22023';
  end if;
  perform 1 from pgflow.runs r where r.flow_slug = flow.flow_slug order by r.run_id for update;

  -- The queues dropped with the flow: only those pgflow created for it, that no other flow routes
  -- to, and that PGMQ lists under this one spelling (another spelling shares the table pair, and
  -- dropping it would destroy that queue too).
  select coalesce(array_agg(c.queue_name order by c.queue_name), '{}') into dropped
  from pgflow.created_queues c
  where c.flow_slug = flow.flow_slug
    and not exists (select 1 from pgflow.steps s where s.queue_name = c.queue_name and s.flow_slug <> flow.flow_slug)
    and (select array_agg(q.queue_name::text) from pgmq.list_queues() q where lower(q.queue_name) = c.queue_name)
        = array[c.queue_name];

  -- Every other queue the flow's tasks used keeps everything but this flow's tracked messages,
  -- found through the task snapshots (read after the run locks, so a completion that just
  -- committed is included).
  for grp in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as ids
    from pgflow.step_tasks t
    where t.flow_slug = flow.flow_slug and t.message_id is not null
      and not (t.queue_name = any (dropped))
    group by t.queue_name
    order by t.queue_name
  loop
    perform pgflow._purge_tracked_messages(grp.queue_name, grp.ids);
  end loop;

  foreach own_queue in array dropped loop
    perform pgmq.drop_queue(own_queue);
  end loop;

  delete from pgflow.step_tasks t where t.flow_slug = flow.flow_slug;
  delete from pgflow.step_states ss where ss.flow_slug = flow.flow_slug;
  delete from pgflow.runs r where r.flow_slug = flow.flow_slug;
  delete from pgflow.created_queues c where c.flow_slug = flow.flow_slug;
  delete from pgflow.deps d where d.flow_slug = flow.flow_slug;
  delete from pgflow.steps s where s.flow_slug = flow.flow_slug;
  delete from pgflow.flows f where f.flow_slug = flow.flow_slug;
end;
$$;

-- ---- schemas/0800_coverage.sql: pgflow.queue_coverage
-- The coverage check: per queue, the (flow, step) pairs that need a handler and whether a live
-- worker serves each. A point-in-time operator check, read-only; not a startup gate.
--
-- Needed pairs: every persisted route (any stored flow can be started), plus the pairs of tasks
-- that are still queued or started in started runs (work that will reach the queue's workers).
-- Served: a worker on that queue, not stopped or deprecated, whose heartbeat is fresher than
-- stale_after, lists the pair in its support set.
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
  live_workers bigint,
  served boolean
)
language sql
stable
set search_path = ''
as $$
  -- Only the recently seen workers, read once by heartbeat range: not the whole worker history.
  with live as materialized (
    select w.queue_name, w.supported from pgflow._recent_workers(clock_timestamp() - stale_after) w
    where not w.deprecated
  ),
  needed as (
    select s.queue_name, s.flow_slug, s.step_slug from pgflow.steps s
    union
    select t.queue_name, t.flow_slug, t.step_slug
    from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
    where t.status in ('queued', 'started') and r.status = 'started'
  )
  select n.queue_name, n.flow_slug, n.step_slug,
         exists (select 1 from pgflow.steps s
                 where s.flow_slug = n.flow_slug and s.step_slug = n.step_slug and s.queue_name = n.queue_name),
         (select count(*) from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
          where t.queue_name = n.queue_name and t.flow_slug = n.flow_slug and t.step_slug = n.step_slug
            and t.status = 'queued' and r.status = 'started'),
         (select count(*) from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
          where t.queue_name = n.queue_name and t.flow_slug = n.flow_slug and t.step_slug = n.step_slug
            and t.status = 'started' and r.status = 'started'),
         w.live,
         w.live > 0
  from needed n
  cross join lateral (
    select count(*) as live from live w
    where w.queue_name = n.queue_name
      and w.supported @> jsonb_build_array(jsonb_build_array(n.flow_slug, n.step_slug))
  ) w
  where queue_coverage.queue_name is null or n.queue_name = queue_coverage.queue_name
  order by n.queue_name, n.flow_slug, n.step_slug
$$;

-- ---- schemas/0810_deploy_fence.sql: pgflow.begin_deploy_fence
-- Records the functions' enabled flags, disables them and deprecates their workers (they stop
-- polling and finish what they hold). Returns the fence id.
create or replace function pgflow.begin_deploy_fence(function_names text[], note text default null)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
declare
  fence bigint;
  busy text[];
begin
  if function_names is null or cardinality(function_names) = 0 then
    raise exception 'begin_deploy_fence: name at least one worker function' using errcode = '22023';
  end if;
  select array_agg(coalesce(quote_literal(f), 'NULL')) into busy
  from unnest(function_names) f where not pgflow.is_valid_function_name(f);
  if busy is not null then
    raise exception 'begin_deploy_fence: invalid function name(s) %', array_to_string(busy, ', ')
      using errcode = '22023', hint = 'use 1-128 letters, digits, "_" or "-" (the Edge Function''s name)';
  end if;
  -- Functions never registered yet get a row, so the fence also keeps them from registering.
  insert into pgflow.worker_functions (function_name)
  select distinct f from unnest(function_names) f
  on conflict (function_name) do nothing;
  perform 1 from pgflow.worker_functions wf where wf.function_name = any (function_names)
  order by wf.function_name for update;

  select array_agg(distinct ff.function_name order by ff.function_name) into busy
  from pgflow.deploy_fence_functions ff join pgflow.deploy_fences f on f.fence_id = ff.fence_id
  where f.ended_at is null and ff.function_name = any (function_names);
  if busy is not null then
    raise exception 'begin_deploy_fence: % already inside an open deploy fence', busy
      using errcode = '55000', hint = 'end that fence first (pgflow.end_deploy_fence)';
  end if;

  insert into pgflow.deploy_fences (note) values (note) returning fence_id into fence;
  insert into pgflow.deploy_fence_functions (fence_id, function_name, was_enabled)
  select fence, wf.function_name, wf.enabled
  from pgflow.worker_functions wf where wf.function_name = any (function_names);
  update pgflow.worker_functions wf set enabled = false, updated_at = now()
  where wf.function_name = any (function_names);
  update pgflow.workers w set deprecated_at = clock_timestamp()
  where w.function_name = any (function_names) and w.deprecated_at is null and w.stopped_at is null;
  return fence;
end;
$$;

-- ---- schemas/0810_deploy_fence.sql: pgflow.deploy_fence_status
-- Per fenced function: live workers (fresh heartbeat, not stopped) and started tasks held by its
-- workers. drained = both are zero.
create or replace function pgflow.deploy_fence_status(fence_id bigint, stale_after interval default '30 seconds')
returns table (function_name text, was_enabled boolean, enabled boolean, live_workers bigint, started_tasks bigint, drained boolean)
language sql
stable
set search_path = ''
as $$
  -- Only the recently seen workers, read once by heartbeat range: not the whole worker history.
  with recent as materialized (
    select w.function_name from pgflow._recent_workers(clock_timestamp() - stale_after) w
  )
  select ff.function_name, ff.was_enabled, wf.enabled, lw.n, st.n, lw.n = 0 and st.n = 0
  from pgflow.deploy_fence_functions ff
  join pgflow.worker_functions wf on wf.function_name = ff.function_name
  cross join lateral (
    select count(*) as n from recent w where w.function_name = ff.function_name
  ) lw
  cross join lateral (
    select count(*) as n from pgflow.step_tasks t join pgflow.workers w on w.worker_id = t.last_worker_id
    where w.function_name = ff.function_name and t.status = 'started'
  ) st
  where ff.fence_id = deploy_fence_status.fence_id
  order by ff.function_name
$$;

-- ---- schemas/0820_ensure_workers.sql: pgflow.ensure_workers
-- The keep-alive. Picks the enabled worker functions that have no live worker and whose debounce
-- has passed, records the invocation, and (where Supabase provides pg_net and the project URL is
-- in Vault) pings each function over HTTP so it starts a worker. A disabled function is never
-- pinged: that is what keeps a deploy fence closed.
create or replace function pgflow.ensure_workers()
returns table (function_name text, pinged boolean)
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  fn record;
  base_url text;
  auth text;
  can_ping boolean := to_regproc('net.http_post') is not null and to_regclass('vault.decrypted_secrets') is not null;
begin
  if can_ping then
    execute $q$select max(decrypted_secret) filter (where name = 'supabase_project_url'),
                      coalesce(max(decrypted_secret) filter (where name = 'pgflow_auth_secret'),
                               max(decrypted_secret) filter (where name = 'supabase_service_role_key'))
               from vault.decrypted_secrets$q$ into base_url, auth;
    can_ping := base_url is not null and auth is not null;
  end if;
  for fn in
    update pgflow.worker_functions wf set last_invoked_at = now()
    where wf.enabled
      and (wf.last_invoked_at is null or wf.last_invoked_at < now() - wf.debounce)
      -- Read by heartbeat range (pgflow._recent_workers): this runs every few seconds, and must
      -- not scan every worker the function ever had.
      and not exists (
        select 1 from pgflow._recent_workers(clock_timestamp() - wf.debounce) w
        where w.function_name = wf.function_name and not w.deprecated)
    returning wf.function_name
  loop
    if can_ping then
      execute 'select net.http_post(url => $1, headers => $2, body => ''{}''::jsonb)'
      using rtrim(base_url, '/') || '/functions/v1/' || fn.function_name,
            jsonb_build_object('Content-Type', 'application/json', 'Authorization', 'Bearer ' || auth);
    end if;
    function_name := fn.function_name;
    pinged := can_ping;
    return next;
  end loop;
end;
$$;

-- ---- schemas/0900_privileges.sql
-- No pgflow function is executable by PUBLIC (and so by anon or authenticated on Supabase). The
-- owner (postgres on Supabase) runs workers and maintenance. Grants are explicit and documented in
-- docs/permissions.md.
revoke execute on all functions in schema pgflow from public;

-- service_role (supabase-js with the service key; server code only) may start runs and read them:
-- start_flow (security definer, so no write access to tables or queues is needed) and select on the
-- definition and run tables. Nothing else: it cannot claim, complete or fail tasks, change
-- definitions or touch workers. Where the role does not exist (plain Postgres) it is created
-- without login, so the grant model is the same everywhere; grant it to your own backend role. A
-- migrating role that may not create roles skips this with a notice, and nothing is granted.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'service_role') then
    begin
      create role service_role nologin;
    exception when insufficient_privilege or duplicate_object then
      raise notice 'pgflow: role service_role was not created: %', sqlerrm;
    end;
  end if;
  if exists (select 1 from pg_roles where rolname = 'service_role') then
    grant usage on schema pgflow to service_role;
    grant execute on function pgflow.start_flow(text, jsonb, uuid) to service_role;
    grant select on pgflow.flows, pgflow.steps, pgflow.deps, pgflow.runs, pgflow.step_states,
      pgflow.step_tasks to service_role;
  end if;
end
$$;

commit;
