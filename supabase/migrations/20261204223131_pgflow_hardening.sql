-- pgflow_hardening: optional integrations are called only when they are the real ones; a run's
-- status times are taken under its lock; a recompile in local development says what it deleted
-- and withdraws the old definition's workers.
--
-- - pgflow._trusted_integration (new, with pgflow._extension_member): realtime.send must be owned
--   by a superuser or by Supabase's supabase_realtime_admin / supabase_admin; net.http_post,
--   vault.decrypted_secrets and cron.schedule must be members of the pg_net, supabase_vault and
--   pg_cron extensions. Before, a schema of that name was enough, and these run with the owner's
--   rights: a role allowed only to create schemas could plant realtime.send (called by the
--   run-event triggers inside start_flow), net.http_post with vault.decrypted_secrets (called by
--   ensure_workers) or cron.schedule (called by schedule_maintenance), and have its body run as
--   the owner: it made itself superuser through the next start_flow. _broadcast_run,
--   ensure_workers and schedule_maintenance check first; schedule_maintenance refuses a
--   cron.schedule that is not pg_cron's, naming it.
-- - Status times of steps and runs (started_at, completed_at, failed_at, skipped_at) and the
--   completed_at / failed_at of tasks are clock_timestamp(), read under the run's lock, instead of
--   now() (the transaction's start): a batch of completions that waited for one run's lock dated
--   its changes to another run before changes committed on that run while it waited, so clients
--   saw a dependent start before a dependency completed, and times going backwards.
-- - ensure_flow_compiled, on 'recompiled' (local development only), also returns deletedRuns,
--   deletedTasks and withdrawnWorkers: the live workers registered for the old definition lose
--   the flow's pairs from their registered support set, so they stop claiming the new
--   definition's tasks with old handlers (their log names the pair as withdrawn).
-- - register_worker names the open deploy fence that disables a function (and, in its hint, the
--   end_deploy_fence call); a plain flow whose default queue is a declared shared queue is refused
--   with what to do (another slug, or routeFlow).
--
-- No data changes; no table is locked beyond replacing functions. Workers of the previous version
-- call the same functions with the same arguments.
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if exists (select 1 from pgflow.migrations m where m.name = '20261204223131_pgflow_hardening') then
    raise exception 'pgflow migration 20261204223131_pgflow_hardening is already applied to this database; nothing was changed'
      using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
  end if;
end
$$;

set local lock_timeout = '5s';

-- ---- schemas/0080_integrations.sql: pgflow._extension_member(p_class regclass, p_object oid, p_extension text)
-- Optional integrations: Supabase Realtime (realtime.send), pg_net (net.http_post), Vault
-- (vault.decrypted_secrets) and pg_cron (cron.schedule). The engine calls them where they are
-- installed, from functions that run with their owner's rights (the run-event triggers fire inside
-- the security definer start_flow; ensure_workers and schedule_maintenance run as the owner or as
-- pg_cron). So "a schema of that name exists" is not enough: on a database without the
-- integration, any role allowed to create a schema could plant a function of that name and have
-- the engine's owner run it (a planted realtime.send ran `alter role ... superuser` through the
-- next start_flow). An integration is used only when the object found is the real one:
--
-- - pg_net, Vault and pg_cron are extensions: the object must be a member of that extension
--   (pg_depend). Only a superuser, or the installer of a trusted extension, can make an object a
--   member, and the extension's name is the one its control file on the server gives.
-- - Realtime is not an extension: Supabase's Realtime service creates realtime.send, owned by
--   supabase_realtime_admin (older projects: supabase_admin). The function must be owned by a
--   superuser or by one of those two platform roles; a role that may only create schemas can make
--   neither, and cannot hand a function it created to them.
--
-- Every check reads the catalogs at call time (a project that adds an integration later needs no
-- migration) and nothing is cached in settings: a setting can be set by any session, so it could
-- vouch for a planted function.
create or replace function pgflow._extension_member(p_class regclass, p_object oid, p_extension text)
returns boolean
language sql
stable
set search_path = ''
as $$
  select exists (
    select 1
    from pg_catalog.pg_depend d
    join pg_catalog.pg_extension e on e.oid = d.refobjid
    where d.classid = p_class and d.objid = p_object
      and d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass and d.deptype = 'e'
      and e.extname = p_extension)
$$;

-- ---- schemas/0080_integrations.sql: pgflow._trusted_integration(p_name text)
-- Whether an optional integration is present and really the one it claims to be: 'realtime'
-- (realtime.send(jsonb, text, text, boolean)), 'pg_net' (every net.http_post), 'vault'
-- (vault.decrypted_secrets) or 'pg_cron' (cron.schedule(text, text, text)).
create or replace function pgflow._trusted_integration(p_name text)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
declare
  target oid;
begin
  case p_name
  when 'realtime' then
    target := pg_catalog.to_regprocedure('realtime.send(jsonb, text, text, boolean)');
    return target is not null and exists (
      select 1 from pg_catalog.pg_proc p join pg_catalog.pg_roles r on r.oid = p.proowner
      where p.oid = target
        and (r.rolsuper or r.rolname in ('supabase_realtime_admin', 'supabase_admin')));
  when 'pg_net' then
    -- The call names its arguments, so any overload could be chosen: all of them must be pg_net's.
    return coalesce((
      select pg_catalog.bool_and(pgflow._extension_member('pg_catalog.pg_proc', p.oid, 'pg_net'))
      from pg_catalog.pg_proc p
      where p.pronamespace = pg_catalog.to_regnamespace('net') and p.proname = 'http_post'), false);
  when 'vault' then
    target := pg_catalog.to_regclass('vault.decrypted_secrets');
    return target is not null and pgflow._extension_member('pg_catalog.pg_class', target, 'supabase_vault');
  when 'pg_cron' then
    target := pg_catalog.to_regprocedure('cron.schedule(text, text, text)');
    return target is not null and pgflow._extension_member('pg_catalog.pg_proc', target, 'pg_cron');
  else
    raise exception 'unknown integration %', p_name using errcode = '22023';
  end case;
end;
$$;

-- ---- schemas/0300_start_flow.sql: pgflow._complete_step(p_run_id uuid, p_step_slug text, p_output jsonb)
-- Starting runs and steps.
--
-- Status times (started_at, completed_at, failed_at, skipped_at of steps and runs) are
-- clock_timestamp(), read while the run's lock is held, not now(): now() is when the transaction
-- began, and a transaction that waited for a run's lock would stamp its changes earlier than
-- changes another transaction committed on that run meanwhile. A client orders a run's events by
-- these times (src/client/diff.ts), so a dependent could appear to start before the dependency
-- that released it completed. Under the lock, every later change of a run gets a later time.

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

  update pgflow.step_states ss
  set remaining_deps = ss.remaining_deps - 1
  from pgflow.deps d
  where ss.run_id = p_run_id and d.flow_slug = flow and d.dep_slug = p_step_slug
    and ss.step_slug = d.step_slug;

  perform pgflow._count_off_step(p_run_id);
end;
$$;

-- ---- schemas/0300_start_flow.sql: pgflow._count_off_step(p_run_id uuid)
-- Counts a finished (completed or skipped) step off its run and completes the run when none is
-- left. The run's output: the outputs of its completed leaf steps (steps nothing depends on);
-- skipped leaves are absent. The caller holds the run's lock.
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
        output = coalesce((
          select jsonb_object_agg(ss.step_slug, ss.output)
          from pgflow.step_states ss
          where ss.run_id = p_run_id and ss.status = 'completed'
            and not exists (select 1 from pgflow.deps d
                            where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
        ), '{}'::jsonb)
    where r.run_id = p_run_id and r.status = 'started';
  end if;
end;
$$;

-- ---- schemas/0300_start_flow.sql: pgflow._skip_step(p_run_id uuid, p_step_slug text, p_reason text, p_cascade boolean)
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
  -- Messages first, then task rows: a concurrent read_and_claim holds a message row while it
  -- claims the task row, so the opposite order could deadlock with it.
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

-- ---- schemas/0300_start_flow.sql: pgflow._fail_run(p_run_id uuid, p_step_slug text, p_error text)
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

  -- Messages first, then task rows: a concurrent read_and_claim holds a message row while it
  -- claims the task row, so the opposite order could deadlock with it. A claim that wins the
  -- message starts its task, which is cancelled right after; its completion is then ignored.
  perform pgflow._archive_task_messages(p_run_id, array['queued', 'started', 'failed']);
  update pgflow.step_tasks t
  set status = 'cancelled'
  where t.run_id = p_run_id and t.status in ('queued', 'started');
end;
$$;

-- ---- schemas/0300_start_flow.sql: pgflow._start_ready_steps(p_run_id uuid)
-- Starts every step whose dependencies are done: evaluates its condition, creates its tasks and
-- sends their messages. Steps that finish at once (an empty map, a skip) can make further steps
-- ready, so this repeats until nothing changes. The caller holds the run's lock.
--
-- The tasks of the started steps are created at the end, by _send_task_messages, with their
-- message ids: inserted once rather than inserted and then updated (an update in the creating
-- transaction also checks every foreign key again, and touches every index). A pass that fails
-- the run creates them without messages first, so _fail_run cancels them as it always did.
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
  fail_step text;
  fail_error text;
begin
  <<pass>>
  while progressed loop
    progressed := false;
    select * into run from pgflow.runs r where r.run_id = p_run_id;
    exit when run.status <> 'started';
    for ready in
      select ss.step_slug, s.step_type, s.deps_count, s.required_input_pattern, s.forbidden_input_pattern,
             s.when_unmet,
             -- A map step has at most one dependency: the one it maps over.
             (select min(d.dep_slug) from pgflow.deps d
              where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug) as map_dep
      from pgflow.step_states ss
      join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
      where ss.run_id = p_run_id and ss.status = 'created' and ss.remaining_deps = 0
      order by s.step_index
    loop
      -- An earlier step of this pass may have failed the run or cascaded a skip onto this one.
      exit when (select r.status from pgflow.runs r where r.run_id = p_run_id) <> 'started';
      continue when (select ss.status from pgflow.step_states ss
                     where ss.run_id = p_run_id and ss.step_slug = ready.step_slug) <> 'created';

      -- Conditions: if / ifNot are containment patterns on the run input (root steps) or on the
      -- object of completed dependency outputs (dependent steps).
      if ready.required_input_pattern is not null or ready.forbidden_input_pattern is not null then
        cond_input := case when ready.deps_count = 0 then run.input
                           else pgflow._dependency_outputs(p_run_id, run.flow_slug, ready.step_slug) end;
        if not ((ready.required_input_pattern is null or cond_input @> ready.required_input_pattern)
                and (ready.forbidden_input_pattern is null or not cond_input @> ready.forbidden_input_pattern)) then
          if ready.when_unmet = 'fail' then
            fail_step := ready.step_slug;
            fail_error := format('[CONDITION_UNMET] step %s: its if/ifNot condition does not hold', ready.step_slug);
            exit pass;
          end if;
          perform pgflow._skip_step(p_run_id, ready.step_slug, 'condition_unmet', ready.when_unmet = 'skip-cascade');
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

      update pgflow.step_states ss
      set status = 'started', started_at = clock_timestamp(), initial_tasks = task_count, remaining_tasks = task_count
      where ss.run_id = p_run_id and ss.step_slug = ready.step_slug;

      if task_count = 0 then
        perform pgflow._complete_step(p_run_id, ready.step_slug, '[]'::jsonb);
        progressed := true;
      else
        new_steps := new_steps || ready.step_slug;
        new_counts := new_counts || task_count;
      end if;
    end loop;
  end loop;
  if fail_step is not null then
    insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name)
    select p_run_id, run.flow_slug, n.step_slug, i, s.queue_name
    from unnest(new_steps, new_counts) as n(step_slug, task_count)
    join pgflow.steps s on s.flow_slug = run.flow_slug and s.step_slug = n.step_slug
    cross join generate_series(0, n.task_count - 1) as i;
    perform pgflow._fail_run(p_run_id, fail_step, fail_error);
    return;
  end if;
  if cardinality(new_steps) > 0 then
    perform pgflow._send_task_messages(p_run_id, run.flow_slug, new_steps, new_counts);
  end if;
end;
$$;

-- ---- schemas/0300_start_flow.sql: pgflow.start_flow(flow_slug text, input jsonb, run_id uuid)
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
  update pgflow.runs r set status = 'completed', completed_at = clock_timestamp(), output = '{}'::jsonb
  where r.run_id = new_run_id and r.status = 'started' and r.remaining_steps = 0;

  select * into result from pgflow.runs r where r.run_id = new_run_id;
  return result;
end;
$$;

-- ---- schemas/0500_complete_task.sql: pgflow._complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[])
-- The work of complete_task and complete_tasks, for any number of tasks (attempts checked by the
-- callers); returns the tasks it completed (NULL for none). Runs are locked in run_id order, so two
-- batches that share runs wait for each other instead of deadlocking; the run lock orders every
-- state change of one run (completions, failures, stalled recovery).
-- Times are stamped after the locks are taken (clock_timestamp(), see 0300_start_flow.sql): a
-- batch that waited for one run's lock must not date its changes to another run before changes
-- committed on that run while it waited.
--
-- The tasks of a batch complete together, then their steps, then the runs; a run that has a step
-- ready after that gets one ready-step pass (a pass leaves no ready step behind, so no other run
-- can be waiting for one). Completions of one run in one batch are therefore applied as one: were
-- that pass to fail the run (a condition with whenUnmet 'fail', a map over a non-array), the
-- batch's other tasks of the run stay completed rather than cancelled, as if they had reported
-- first.
--
-- Cost. Each statement a call runs costs a plan lookup and an executor start whatever the batch's
-- size, and under load that fixed cost is most of a batch's; so a batch runs as few as it can: the
-- dependents' release only when a finished step has dependents, the archive in one call when the
-- batch has one queue, and the result as an array rather than a set.
--
-- Plans. A worker's session keeps plpgsql's generic plans, made on the statistics of the moment:
-- on a young database (tables never analysed count as ten pages) or one just vacuumed, a plan
-- that scans runs or step states in full, or hashes them, is the cheapest, and stays in use after
-- a burst has made them large, until autovacuum analyses them. So every row here is found by its
-- key, in a nested loop driven by the batch: seq scans are priced out for this function (it only
-- ever needs keyed rows; where no index fits, a scan still runs), generic plans are used from the
-- first call (a custom plan per call costs more than the statement), and no statement that looks a
-- task up by its key also names its status: the planner could then walk every started task
-- through the partial index step_tasks_started_idx (its statistics say few tasks are started; a
-- busy queue has thousands) instead of the primary key. The status is checked on the row found.
create or replace function pgflow._complete_tasks(
  run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[]
)
returns pgflow.step_tasks[]
language plpgsql
volatile
set search_path = ''
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
declare
  locked uuid[];
  done pgflow.step_tasks[];
  queues text[];
  f_runs uuid[];
  f_flows text[];
  f_steps text[];
  releases boolean;
  ready_runs uuid[];
  ready_run uuid;
  grp record;
begin
  select array_agg(l.run_id order by l.run_id) into locked
  from (select distinct u.id from unnest(run_ids) u(id) where u.id is not null order by u.id) i
  cross join lateral (
    select r.run_id from pgflow.runs r where r.run_id = i.id and r.status = 'started' limit 1 for update
  ) l;
  if locked is null then
    return null;
  end if;

  -- Under the run locks, a started task of the attempt reported is completed; a task named twice
  -- completes once, with the first report of the attempt that is running. The task is updated by
  -- the row version found, so a change since (none can come without the run lock) leaves it alone.
  with completed as (
    update pgflow.step_tasks t
    set status = 'completed', completed_at = clock_timestamp(), output = i.output
    from (select distinct on (u.run_id, u.step_slug, u.task_index)
                 k.tid, u.run_id, u.step_slug, u.task_index, u.output
          from unnest(run_ids, step_slugs, task_indexes, outputs, attempts)
               with ordinality as u(run_id, step_slug, task_index, output, attempt, ord)
          cross join lateral (
            select t2.ctid as tid, t2.status, t2.attempts_count from pgflow.step_tasks t2
            where t2.run_id = u.run_id and t2.step_slug = u.step_slug and t2.task_index = u.task_index
            limit 1
          ) k
          where u.run_id = any (locked) and k.status = 'started' and k.attempts_count = u.attempt
          order by u.run_id, u.step_slug, u.task_index, u.ord) i
    where t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and t.ctid = i.tid
    returning t.*
  )
  select array_agg(c::pgflow.step_tasks), array_agg(distinct c.queue_name) into done, queues
  from completed c;
  if done is null then
    return null;
  end if;

  -- Count the tasks off their steps; a step whose last task this was completes in the same
  -- statement. A map step's output is its tasks' outputs in index order (this batch's outputs are
  -- stored already); CASE evaluates the aggregate only for a map's last task.
  with finished as (
    update pgflow.step_states ss
    set remaining_tasks = ss.remaining_tasks - p.n,
        status = case when ss.remaining_tasks = p.n then 'completed' else ss.status end,
        completed_at = case when ss.remaining_tasks = p.n then clock_timestamp() else ss.completed_at end,
        output = case
          when ss.remaining_tasks <> p.n then ss.output
          when p.step_type = 'map' then
            (select jsonb_agg(t.output order by t.task_index) from pgflow.step_tasks t
             where t.run_id = p.run_id and t.step_slug = p.step_slug)
          else p.output
        end
    from (select d.run_id, d.step_slug, d.n, d.output, s.step_type, s.releases
          from (select d.run_id, d.flow_slug, d.step_slug, count(*) as n, (array_agg(d.output))[1] as output
                from unnest(done) d group by d.run_id, d.flow_slug, d.step_slug) d
          cross join lateral (
            select s2.step_type,
                   exists (select 1 from pgflow.deps dd
                           where dd.flow_slug = s2.flow_slug and dd.dep_slug = s2.step_slug) as releases
            from pgflow.steps s2
            where s2.flow_slug = d.flow_slug and s2.step_slug = d.step_slug limit 1
          ) s) p
    where ss.run_id = p.run_id and ss.step_slug = p.step_slug
    returning ss.run_id, ss.flow_slug, ss.step_slug, ss.remaining_tasks, p.releases
  )
  select array_agg(f.run_id), array_agg(f.flow_slug), array_agg(f.step_slug), bool_or(f.releases)
  into f_runs, f_flows, f_steps, releases
  from finished f where f.remaining_tasks = 0;

  if f_runs is not null then
    if releases then
      -- Release the dependents of the steps that completed, and note the runs where one became
      -- ready.
      with released as (
        update pgflow.step_states ss
        set remaining_deps = ss.remaining_deps - r.n
        from (select f.run_id, d.step_slug, count(*) as n
              from unnest(f_runs, f_flows, f_steps) as f(run_id, flow_slug, step_slug)
              join pgflow.deps d on d.flow_slug = f.flow_slug and d.dep_slug = f.step_slug
              group by f.run_id, d.step_slug) r
        where ss.run_id = r.run_id and ss.step_slug = r.step_slug
        returning ss.run_id, ss.remaining_deps, ss.status
      )
      select array_agg(distinct r.run_id order by r.run_id) into ready_runs
      from released r where r.remaining_deps = 0 and r.status = 'created';
    end if;

    -- Count the steps off their runs; a run's last step completes it with the outputs of its
    -- completed leaf steps. Every run here is started: its lock is held and it was checked.
    update pgflow.runs r
    set remaining_steps = r.remaining_steps - c.n,
        status = case when r.remaining_steps = c.n then 'completed' else r.status end,
        completed_at = case when r.remaining_steps = c.n then clock_timestamp() else r.completed_at end,
        output = case when r.remaining_steps = c.n then coalesce((
          select jsonb_object_agg(ss.step_slug, ss.output)
          from pgflow.step_states ss
          where ss.run_id = c.run_id and ss.status = 'completed'
            and not exists (select 1 from pgflow.deps d
                            where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
        ), '{}'::jsonb) else r.output end
    from (select f.run_id, count(*) as n from unnest(f_runs) as f(run_id) group by f.run_id) c
    where r.run_id = c.run_id;

    if ready_runs is not null then
      foreach ready_run in array ready_runs loop
        perform pgflow._start_ready_steps(ready_run);
      end loop;
    end if;
  end if;

  -- The messages of the completed tasks, one pgmq.archive call per queue (each PGMQ call builds
  -- and plans its statement again).
  if cardinality(queues) = 1 then
    perform pgmq.archive(queues[1], (select array_agg(d.message_id order by d.message_id)
                                     from unnest(done) d where d.message_id is not null));
  else
    for grp in
      select d.queue_name as q, array_agg(d.message_id order by d.message_id) as ids
      from unnest(done) d where d.message_id is not null group by d.queue_name
    loop
      perform pgmq.archive(grp.q, grp.ids);
    end loop;
  end if;
  return done;
end;
$$;

-- ---- schemas/0510_fail_task.sql: pgflow._task_failed(p_run_id uuid, p_step_slug text, p_task_index integer, p_error text, p_retry_delay integer)
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
  set status = 'failed', error_message = p_error, failed_at = clock_timestamp()
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

-- ---- schemas/0600_workers.sql: pgflow.register_worker(worker_id uuid, queue_name text, function_name text, supported jsonb)
-- The worker registry: registration, heartbeat, stop and deprecation.
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
  fence record;
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
  -- The error names the open fence, so the operator who started a worker during a deploy knows
  -- which call ends it.
  if not fn.enabled then
    select f.fence_id, f.note into fence
    from pgflow.deploy_fence_functions ff join pgflow.deploy_fences f on f.fence_id = ff.fence_id
    where ff.function_name = fn.function_name and f.ended_at is null
    order by f.fence_id desc limit 1;
    if fence.fence_id is not null then
      raise exception 'worker function % is disabled by open deploy fence % (%); no new worker may register until it ends',
        fn.function_name, fence.fence_id, coalesce(fence.note, 'no note')
        using errcode = '55000',
          hint = format('once the old workers drained (select * from pgflow.deploy_fence_status(%s)), end it: select pgflow.end_deploy_fence(%s)', fence.fence_id, fence.fence_id);
    end if;
    raise exception 'worker function % is disabled (no deploy fence is open); no new worker may register until it is enabled again', fn.function_name
      using errcode = '55000',
        hint = format('enable it: update pgflow.worker_functions set enabled = true where function_name = %L', fn.function_name);
  end if;
  insert into pgflow.workers (worker_id, queue_name, function_name, supported, supported_keys, claim_visibility)
  values (register_worker.worker_id, register_worker.queue_name, register_worker.function_name, register_worker.supported,
          pgflow._support_keys(register_worker.supported),
          -- The steps' shared timeout + 2 s, if they share one (NULL for none or several).
          (select case when count(distinct coalesce(s.opt_timeout, f.opt_timeout)) = 1
                       then min(coalesce(s.opt_timeout, f.opt_timeout)) + 2 end
           from jsonb_array_elements(register_worker.supported) e
           join pgflow.steps s on s.flow_slug = e ->> 0 and s.step_slug = e ->> 1
           join pgflow.flows f on f.flow_slug = s.flow_slug
           where jsonb_typeof(e) = 'array'))
  returning * into result;
  -- Every start adds a row; each registration also removes a bounded batch of expired ones, so the
  -- table stays about the size of the retention window without a scheduler.
  perform pgflow.prune_workers(100);
  return result;
end;
$$;

-- ---- schemas/0705_own_queue_provisioning.sql: pgflow._provision_own_queue(p_queue text, p_flow_slug text)
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
    raise exception 'flow %: a plain flow polls the queue named after its slug, and % is a shared queue declared with routeFlow()', p_flow_slug, p_queue
      using errcode = '55000',
        hint = format('give the flow another slug (e.g. %s_v2), or route its steps with routeFlow(flow, { queues: { ... } }) (they may use the shared queue %s)', p_flow_slug, p_queue);
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
  deleted_runs bigint;
  deleted_tasks bigint;
  withdrawn integer;
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
  select count(*) into deleted_runs from pgflow.runs r where r.flow_slug = existing;
  select count(*) into deleted_tasks from pgflow.step_tasks t where t.flow_slug = existing;
  perform pgflow.delete_flow_and_data(existing);
  perform pgflow._create_flow_from_definition(existing, shape, route_plan, options);
  -- Live workers registered for the old definition (the compiling worker registers after this):
  -- their claims on the flow are withdrawn. Local development only, so reading every live
  -- worker's pairs here costs nothing that matters.
  with old_workers as (
    select w.worker_id,
           coalesce((select jsonb_agg(e order by o) from jsonb_array_elements(w.supported) with ordinality x(e, o)
                     where e ->> 0 <> existing), '[]'::jsonb) as kept
    from pgflow.workers w
    where w.stopped_at is null
      and exists (select 1 from jsonb_array_elements(w.supported) e where e ->> 0 = existing)
  ), updated as (
    update pgflow.workers w
    set supported = o.kept, supported_keys = pgflow._support_keys(o.kept)
    from old_workers o where w.worker_id = o.worker_id
    returning 1
  )
  select count(*) into withdrawn from updated;
  return jsonb_build_object('status', 'recompiled', 'differences', to_jsonb(differences),
                            'optionDifferences', option_differences,
                            'deletedRuns', deleted_runs, 'deletedTasks', deleted_tasks,
                            'withdrawnWorkers', withdrawn);
end;
$$;

-- ---- schemas/0820_ensure_workers.sql: pgflow.ensure_workers()
-- The keep-alive. Picks the enabled worker functions that have no live worker and whose debounce
-- has passed, records the invocation, and (where Supabase provides pg_net and the project URL is
-- in Vault) pings each function over HTTP so it starts a worker. A disabled function is never
-- pinged: that is what keeps a deploy fence closed. net.http_post and vault.decrypted_secrets are
-- used only when they are members of the pg_net and supabase_vault extensions
-- (pgflow._trusted_integration): this runs as its owner, often from pg_cron, and must never run a
-- function someone planted under those names.
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
  can_ping boolean := pgflow._trusted_integration('pg_net') and pgflow._trusted_integration('vault');
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

-- ---- schemas/0820_ensure_workers.sql: pgflow.schedule_maintenance(keep_alive interval)
-- Schedules ensure_workers and requeue_stalled_tasks with pg_cron (Supabase has it; elsewhere the
-- worker's own periodic recovery and an external keep-alive do the same job).
create or replace function pgflow.schedule_maintenance(keep_alive interval default '5 seconds')
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if to_regprocedure('cron.schedule(text, text, text)') is null then
    raise exception 'pg_cron is not installed' using errcode = '0A000',
      hint = 'enable pg_cron, or call pgflow.ensure_workers() from an external scheduler';
  end if;
  -- Called with the caller's rights (usually the owner's): only pg_cron's own function.
  if not pgflow._trusted_integration('pg_cron') then
    raise exception 'cron.schedule(text, text, text) is not a member of the pg_cron extension; it was not called'
      using errcode = '42501',
        hint = 'a function of that name was created outside pg_cron: drop it and create extension pg_cron, or call pgflow.ensure_workers() from an external scheduler';
  end if;
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_ensure_workers', extract(epoch from keep_alive)::integer || ' seconds', 'select pgflow.ensure_workers()';
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_requeue_stalled_tasks', '15 seconds', 'select pgflow.requeue_stalled_tasks()';
end;
$$;

-- ---- schemas/0850_run_events.sql: pgflow._broadcast_run(p_run_id uuid)
-- Run events: a change of a run's or a step's status wakes whoever watches that run.
--
-- A notification is a wake-up hint, not the event itself: clients read the run with
-- pgflow.get_run and build their events by comparing what they saw before with what they see now
-- (src/client/), so a lost notification, a reconnect or a late subscriber only delays an event,
-- never loses it. That is why the payload is just the run id and never holds inputs, outputs or
-- errors (pg_notify payloads are limited to 8000 bytes, and a listener needs nothing else).
--
-- One channel per run, pgflow_run:<uuid> (47 bytes, under the 63-byte limit on channel names): a
-- client that waits for one run hears only that run, not every run of the database. Postgres
-- delivers identical notifications (same channel, same payload) once per transaction, so a
-- transaction that moves a run through several states (complete_task: the step completes, its
-- dependents start, the run completes) sends one notification for it.
--
-- Where Supabase Realtime is installed (realtime.send exists and is the platform's own, checked on
-- every call by pgflow._trusted_integration so a project that adds Realtime later needs no
-- migration, and a function merely planted under that name is never called), the same hint is
-- broadcast on the private topic pgflow_run:<uuid>, once per run per transaction.
--
-- Row-level triggers limited to the status column (`update of status`) with a `when` clause that
-- Postgres evaluates without calling any function: the function runs only for a real status
-- change (about three times per step), never for the counters the hot path decrements on every
-- task (remaining_tasks, remaining_deps, remaining_steps). Measured against statement-level
-- triggers with transition tables, which fire for every statement that touches the tables and
-- copy their rows: those cost about twice as much (bench/trigger_cost.ts, bench/results.md).

-- Broadcasts a run's hint through Supabase Realtime, once per transaction.
create or replace function pgflow._broadcast_run(p_run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  sent text;
begin
  -- realtime.send inserts a message each time it is called: remember (for this transaction only)
  -- which runs were announced already. A session could forge this setting, but that only silences
  -- its own broadcasts; it is never taken as proof that realtime.send may be called.
  sent := coalesce(current_setting('pgflow.realtime_sent', true), '');
  if position(p_run_id::text in sent) > 0 then
    return;
  end if;
  if not pgflow._trusted_integration('realtime') then
    return;
  end if;
  -- Arguments of exactly the verified signature's types: an exact match is always the function
  -- chosen, whatever other overloads the schema holds.
  perform realtime.send(jsonb_build_object('run_id', p_run_id), 'run_changed'::text,
    ('pgflow_run:' || p_run_id::text)::text, true);
  perform set_config('pgflow.realtime_sent', sent || p_run_id::text || ',', true);
end;
$$;

-- ---- privileges on function pgflow._extension_member(p_class regclass, p_object oid, p_extension text)
revoke all on function pgflow._extension_member(p_class regclass, p_object oid, p_extension text) from public;

-- ---- privileges on function pgflow._trusted_integration(p_name text)
revoke all on function pgflow._trusted_integration(p_name text) from public;

insert into pgflow.migrations (name) values ('20261204223131_pgflow_hardening') on conflict (name) do nothing;

commit;
