-- Internal helpers that Postgres inlines, and the engine's named constants.
--
-- The policy (docs/design.md, Internal helpers). Every pgflow function pins search_path = '', so
-- that no caller's search_path can redirect a name in it: every function except the ones in this
-- file. A function with a setting of its own (set search_path) is never inlined: each call
-- changes the setting and restores it and, for a SQL function, plans its body again, which on a
-- task's path costs more than the body's own work. So a piece of logic that several functions
-- share is written once, here, and called where it is needed instead of being copied by hand,
-- and every function in this file:
--   - is language sql, one SELECT, without set search_path or any other setting, so that Postgres
--     replaces each call by the body when it plans the calling statement;
--   - names every table and function with its schema (pgflow., pg_catalog.), so that it means the
--     same under any search_path;
--   - is not security definer and is granted to no role (0900_privileges.sql revokes PUBLIC's
--     execute): it runs with the rights of the function that calls it;
--   - is called only by functions that pin search_path = '' (so the operators and types it does
--     not qualify are pg_catalog's) and that run as the owner (Postgres inlines a function only
--     for a role that may execute it), never by a function that another role runs with its own
--     rights, a default expression, a view or a client;
--   - keeps a shape that Postgres inlines: stable (see below), not strict; a scalar helper is one
--     expression without a subquery; a helper that reads tables returns a set (returns setof) and
--     is used in FROM or as a scalar subquery.
-- Stable, even for a constant: Postgres runs an immutable function whose arguments are constants
-- while it plans the caller (for a SQL function that means parsing and planning its body, about
-- 50 µs per plan), where it inlines a stable one (about 5 µs), and folds the result to its value
-- all the same. So no helper is ever called while a task runs, at plan time or at run time.
-- tests/sql/inline_helpers_test.ts checks all of this over the catalog, and that a task's path
-- calls no helper (Postgres's function statistics count none).
--
-- The constants are helpers without arguments: a number with a reason lives in one place, and
-- costs nothing where it is used.

-- Liveness ---------------------------------------------------------------------------------------

-- How recent a worker's heartbeat must be for it to count as live. Workers heartbeat every 5 s by
-- default (heartbeatIntervalMs): six missed heartbeats in a row mean its isolate is gone.
create or replace function pgflow._live_window()
returns interval
language sql
stable
as $$
  select interval '30 seconds'
$$;

-- A worker seen since p_since: its heartbeat is newer and it has not stopped. A deprecated worker
-- is still seen (it drains what it holds): the deploy fence waits for it, and the coverage check
-- does not count its tasks as stale.
create or replace function pgflow._worker_seen(w pgflow.workers, p_since timestamptz)
returns boolean
language sql
stable
as $$
  select w.last_heartbeat_at > p_since and w.stopped_at is null
$$;

-- A live worker: seen since p_since and not deprecated, so it takes new work. p_since is
-- clock_timestamp() - pgflow._live_window() unless an operator asks with another window.
create or replace function pgflow._worker_live(w pgflow.workers, p_since timestamptz)
returns boolean
language sql
stable
as $$
  select pgflow._worker_seen(w, p_since) and w.deprecated_at is null
$$;

-- The claim ------------------------------------------------------------------------------------

-- A support set's key of a (flow, step) pair (pgflow.workers.supported_keys): slugs never hold
-- chr(31), so two pairs never share a key.
create or replace function pgflow._pair_key(p_flow_slug text, p_step_slug text)
returns text
language sql
stable
as $$
  select p_flow_slug || pg_catalog.chr(31) || p_step_slug
$$;

-- Seconds a claimed message stays hidden beyond its step's effective timeout: a handler that runs
-- its whole timeout still reports before another worker can read the message again.
create or replace function pgflow._claim_margin()
returns integer
language sql
stable
as $$
  select 2
$$;

-- Seconds past its step's effective timeout after which a started task counts as stalled: a
-- handler stopped by its timeout reports within this, however late its batch of completions
-- goes out, so stalled recovery never takes back an attempt that is still reporting.
create or replace function pgflow._stalled_margin()
returns integer
language sql
stable
as $$
  select 30
$$;

-- The deepest read past another worker's backlog (docs/design.md, Claim table; next_read_qty):
-- such a read reads, and gives back, every message on its way, so its cost is bounded here; the
-- figures behind it are in docs/routing.md, Reading past a busy worker's backlog.
create or replace function pgflow._read_past_max()
returns integer
language sql
stable
as $$
  select 2000
$$;

-- A read that took longer than this may have been planned on statistics that say its queue is
-- empty (0405_queue_statistics.sql): a read of 10 visible messages takes well under a
-- millisecond, so only then are the statistics looked at.
create or replace function pgflow._slow_read()
returns interval
language sql
stable
as $$
  select interval '3 milliseconds'
$$;

-- A read that waited longer than this for messages stamps the tasks it claimed again with the time
-- they really started (read_and_claim): under it, the difference does not matter to stalled
-- recovery (seconds) and the extra statement is not worth its cost.
create or replace function pgflow._late_start()
returns interval
language sql
stable
as $$
  select interval '500 milliseconds'
$$;

-- Inputs and outputs -----------------------------------------------------------------------------

-- The object of a step's completed dependency outputs, keyed by dependency; skipped dependencies
-- are absent. A dependent task's input, and what a dependent step's condition is checked on.
create or replace function pgflow._dependency_outputs(p_run_id uuid, p_flow_slug text, p_step_slug text)
returns setof jsonb
language sql
stable
as $$
  select coalesce(pg_catalog.jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
  from pgflow.deps d
  join pgflow.step_states ss on ss.run_id = p_run_id and ss.step_slug = d.dep_slug
  where d.flow_slug = p_flow_slug and d.step_slug = p_step_slug and ss.status = 'completed'
$$;

-- The input of a task: a root step's is the run input, a dependent step's the object of its
-- completed dependencies' outputs (pgflow._dependency_outputs), and a map task's the element at
-- its index of the array it maps over (the run input, or its one dependency's output), copied onto
-- the task row when the task was created (step_tasks.input).
create or replace function pgflow._task_input(
  p_run_id uuid, p_flow_slug text, p_step_slug text, p_task_index integer
)
returns setof jsonb
language sql
stable
as $$
  select case
           when s.step_type = 'map' then
             (select t.input from pgflow.step_tasks t
              where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index)
           when s.deps_count = 0 then r.input
           else (select o from pgflow._dependency_outputs(p_run_id, p_flow_slug, p_step_slug) o)
         end
  from pgflow.steps s
  join pgflow.runs r on r.run_id = p_run_id
  where s.flow_slug = p_flow_slug and s.step_slug = p_step_slug
$$;

-- A completed run's output: the outputs of its completed leaf steps (steps nothing depends on),
-- keyed by step slug; skipped leaves are absent.
create or replace function pgflow._run_output(p_run_id uuid)
returns setof jsonb
language sql
stable
as $$
  select coalesce(pg_catalog.jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
  from pgflow.step_states ss
  where ss.run_id = p_run_id and ss.status = 'completed'
    and not exists (select 1 from pgflow.deps d
                    where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug)
$$;

-- Notifications and locks -------------------------------------------------------------------------

-- The class of the listeners' barrier locks (0045_listeners.sql): pgflow's own id, the bytes
-- 'pgfw', in the two-key form of advisory locks, so it shares no key with any single-key lock.
create or replace function pgflow._listen_lock_class()
returns integer
language sql
stable
as $$
  select 1885824631
$$;

-- The barrier lock's second key for a channel: one of 256 buckets. Buckets, not one key per
-- channel: a transaction that starts ten thousand runs touches ten thousand run channels, and one
-- lock each would exhaust the server's lock table; two channels sharing a bucket only make a
-- barrier wait for one more sender.
create or replace function pgflow._listen_bucket(p_channel text)
returns integer
language sql
stable
as $$
  select pg_catalog.hashtext(p_channel) & 255
$$;

-- Whether a notification on p_channel must be sent (0045_listeners.sql): the sender first takes
-- the channel's barrier lock shared, for the rest of its transaction, and then looks for a waiter;
-- a sender that cannot take the lock (a barrier holds it for an instant) notifies anyway. The
-- order is the protocol: looking first could miss a waiter whose barrier has already passed.
-- Stable, although it takes a lock, because Postgres inlines no volatile set-returning function:
-- its one side effect is the lock every caller must take, and each call takes it.
create or replace function pgflow._notify_needed(p_channel text)
returns setof boolean
language sql
stable
as $$
  select not pg_catalog.pg_try_advisory_xact_lock_shared(pgflow._listen_lock_class(),
                                                         pgflow._listen_bucket(p_channel))
         or exists (select 1 from pgflow.listeners l where l.channel = p_channel)
$$;

-- The transaction locks that serialise decisions about one name (pg_advisory_xact_lock), each
-- keyed by a prefix of its own so that no two kinds can take each other's key:
-- the namespace of flow slugs and aliases (pgflow._lock_names),
create or replace function pgflow._names_lock_key()
returns integer
language sql
stable
as $$
  select pg_catalog.hashtext('pgflow.names')
$$;

-- one queue name, declared shared or created for a flow (0700, 0705),
create or replace function pgflow._queue_lock_key(p_queue text)
returns integer
language sql
stable
as $$
  select pg_catalog.hashtext('pgflow.queue:' || p_queue)
$$;

-- and one flow slug, compiled or deleted (0720, 0730), under any spelling. (The statistics
-- refresh's try lock, 'pgflow.analyze:' || queue, is written in 0405_queue_statistics.sql: a role
-- may be granted that function alone.)
create or replace function pgflow._flow_lock_key(p_flow_slug text)
returns integer
language sql
stable
as $$
  select pg_catalog.hashtext('pgflow.flow:' || pg_catalog.lower(p_flow_slug))
$$;
