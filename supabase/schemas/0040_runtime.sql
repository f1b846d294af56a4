-- Runtime state: runs, the state of each step in a run, and tasks. Every task stores a snapshot of
-- the queue its message was sent to; with the message id it is the task's message identity.

create table if not exists pgflow.runs (
  run_id uuid not null default gen_random_uuid(),
  flow_slug text not null,
  status text not null default 'started',
  input jsonb not null,
  output jsonb,
  remaining_steps integer not null default 0,
  error_message text,
  started_at timestamptz not null default now(),
  completed_at timestamptz,
  failed_at timestamptz,
  cancelled_at timestamptz,
  -- What the operator gave as the reason (pgflow.cancel_run), or NULL.
  cancel_reason text,
  -- The run this one retries or resumes (pgflow.retry_run, resume_run), as lineage only: no
  -- foreign key, so the source can be pruned before its restarts.
  restart_of_run_id uuid,
  restart_mode text,
  -- The alias the run was started through (start_flow with an alias), NULL when started by its
  -- concrete slug.
  started_as text,
  -- Added to each step's priority on the run's tasks that wait for capacity (docs/flow-control.md):
  -- a higher one is released first. Set at start (start_flow's priority), kept by a retry or resume.
  priority integer not null default 0,
  -- The W3C trace context the run was started in (start_flow's traceparent), NULL when untraced:
  -- a run outlives any process, so every attempt's and step's span finds its trace here
  -- (docs/telemetry.md). Kept by a retry or resume, so a restart stays in the source's trace.
  traceparent text,
  constraint runs_pkey primary key (run_id),
  constraint runs_flow_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint runs_status_known check (status in ('started', 'completed', 'failed', 'cancelled')),
  constraint runs_restart_mode_known check (restart_mode in ('retry', 'resume')),
  constraint runs_restart_has_source check ((restart_mode is null) = (restart_of_run_id is null)),
  constraint runs_remaining_steps_range check (remaining_steps >= 0),
  constraint runs_priority_range check (priority between -1000 and 1000),
  constraint runs_traceparent_format check (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$')
);

create index if not exists runs_flow_status_idx on pgflow.runs (flow_slug, status);
-- Newest runs first (the dashboard's search, list_runs, runs started since a time) read the end
-- of this index instead of sorting every run kept: with a million runs of history a sort costs
-- seconds. started_at only grows, so its entries go to the index's right edge; each run adds two
-- (start_flow's insert, and its status change, never a HOT update).
create index if not exists runs_started_at_idx on pgflow.runs (started_at);
-- The restarts of a run (its retries and resumes), for the run view's lineage. Partial: a run that
-- is not a restart, i.e. nearly every run start_flow inserts, adds no entry.
create index if not exists runs_restart_of_idx on pgflow.runs (restart_of_run_id)
  where restart_of_run_id is not null;

create table if not exists pgflow.step_states (
  run_id uuid not null,
  flow_slug text not null,
  step_slug text not null,
  status text not null default 'created',
  remaining_deps integer not null default 0,
  remaining_tasks integer,
  initial_tasks integer,
  -- The step's output once completed: a single step's task output, a map step's outputs in index
  -- order. Stored exactly: 0, false, "" and null stay distinct.
  output jsonb,
  skip_reason text,
  error_message text,
  created_at timestamptz not null default now(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  skipped_at timestamptz,
  cancelled_at timestamptz,
  -- Completed by pgflow.resume_run from the source run's result, not run again.
  reused boolean not null default false,
  constraint step_states_pkey primary key (run_id, step_slug),
  constraint step_states_run_fkey foreign key (run_id) references pgflow.runs (run_id),
  constraint step_states_step_fkey foreign key (flow_slug, step_slug) references pgflow.steps (flow_slug, step_slug),
  constraint step_states_status_known check (status in ('created', 'started', 'completed', 'failed', 'skipped', 'cancelled')),
  constraint step_states_remaining_deps_range check (remaining_deps >= 0),
  constraint step_states_remaining_tasks_range check (remaining_tasks is null or remaining_tasks >= 0)
);

-- The latest failed steps (the dashboard's Recent failures) without reading every failed step kept.
-- Partial: a step that completes never enters it, so the hot path pays nothing.
create index if not exists step_states_failed_idx on pgflow.step_states (failed_at desc nulls last)
  where status = 'failed';

create table if not exists pgflow.step_tasks (
  run_id uuid not null,
  flow_slug text not null,
  step_slug text not null,
  task_index integer not null default 0,
  status text not null default 'queued',
  -- Snapshot of the step's route when the task was created; never changes afterwards.
  queue_name text not null,
  message_id bigint,
  -- A map task's element, copied out of the array it maps over when the task is created (one pass
  -- over the array), NULL for a single step's task. Reading element i from the array at each claim
  -- decompressed the whole array per task: a 100,000-element map spent minutes in its claims.
  input jsonb,
  attempts_count integer not null default 0,
  -- Attempts that did not count toward maxAttempts: deferred by the handler (Retry-After) or
  -- interrupted by its worker's shutdown (0515_uncounted_attempts.sql). attempts_count stays the
  -- number of claims, so each claim keeps its own attempt number (reports and history name it);
  -- what maxAttempts and the backoff count is attempts_count - uncounted_attempts.
  uncounted_attempts integer not null default 0,
  output jsonb,
  error_message text,
  last_worker_id uuid,
  queued_at timestamptz not null default now(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  -- Flow control (0260_flow_control.sql). A task of a step with a concurrency limit names the
  -- limit's scope and the key its input gave (computed once, when the task is created); it holds
  -- one unit of that (scope, key)'s capacity while it is queued or started, and waits without a
  -- message ('waiting') until a unit is free. priority is the run's plus the step's, and orders
  -- the waiting tasks of one (scope, key). All NULL / 0 for a task of an unlimited step.
  priority integer not null default 0,
  limit_scope text,
  limit_key text,
  -- A task of a step with a rate limit (0262_rate_limits.sql) names its scope and key the same
  -- way. It is created as any other; a claim that finds its key's window of start times full
  -- sends it back to 'waiting' (its message archived) with not_before, the earliest time a start
  -- may fit, and a release after that time sends a new message. NULL for an unlimited step.
  rate_scope text,
  rate_key text,
  not_before timestamptz,
  constraint step_tasks_pkey primary key (run_id, step_slug, task_index),
  -- The step state's key names the step: its own foreign key (step_states_step_fkey) holds the
  -- step's definition, so a task needs none to the steps. One would check and lock the step's
  -- definition row on every task insert: a row every run of the flow shares, locked anew (a WAL
  -- record, and a multixact while another transaction holds it) by each chain hop's transaction.
  constraint step_tasks_step_state_fkey foreign key (run_id, step_slug) references pgflow.step_states (run_id, step_slug),
  constraint step_tasks_status_known check (status in ('waiting', 'queued', 'started', 'completed', 'failed', 'cancelled')),
  constraint step_tasks_task_index_range check (task_index >= 0),
  -- A waiting task has no message: it is sent when the task is released.
  constraint step_tasks_waiting_has_no_message check (status <> 'waiting' or message_id is null),
  constraint step_tasks_limit_key_has_scope check (limit_key is null or limit_scope is not null),
  constraint step_tasks_rate_key_has_scope check (rate_key is null or rate_scope is not null),
  constraint step_tasks_not_before_is_rate_limited check (not_before is null or rate_scope is not null),
  constraint step_tasks_attempts_range check (attempts_count >= 0),
  constraint step_tasks_uncounted_range check (uncounted_attempts between 0 and attempts_count)
);

-- A message id means nothing without its queue: (queue_name, message_id) identifies one task.
create unique index if not exists step_tasks_message_key on pgflow.step_tasks (queue_name, message_id)
  where message_id is not null;
-- Stalled recovery scans started tasks.
create index if not exists step_tasks_started_idx on pgflow.step_tasks (started_at)
  where status = 'started';
-- The waiting tasks of one (scope, key), in release order. Partial: with no task waiting it is
-- empty, and a task without a concurrency scope (a task of an unlimited step waiting for its turn
-- on a shared queue, 0258_fair_window.sql, or for a rate limit alone) never enters it: a parked
-- backlog would otherwise grow it by an entry per task, and a release of turns could be planned
-- through it (limit_scope is null) instead of its own index.
create index if not exists step_tasks_waiting_idx
  on pgflow.step_tasks (limit_scope, limit_key, priority desc, queued_at)
  where status = 'waiting' and limit_scope is not null;
-- The tasks holding capacity of one (scope, key), counted under its lock on every release.
-- Partial: a task of an unlimited step never enters it.
create index if not exists step_tasks_holding_idx on pgflow.step_tasks (limit_scope, limit_key)
  where limit_scope is not null and status in ('queued', 'started');
-- The waiting tasks a rate limit holds back, by when they may go (the periodic release reads the
-- due ones), and the rate-limited tasks released but not yet started, counted per key so a release
-- does not send more than the key's window has room for. Partial: only rate-limited tasks enter.
create index if not exists step_tasks_rate_waiting_idx on pgflow.step_tasks (not_before)
  where status = 'waiting' and not_before is not null;
create index if not exists step_tasks_rate_queued_idx on pgflow.step_tasks (rate_scope, rate_key)
  where rate_scope is not null and status = 'queued';
-- No (run_id, status) index: every lookup of a run's tasks by status names the run, which the
-- primary key's leading column finds, and each index is one more entry for every task update (none
-- of which is HOT: each changes message_id, status or started_at).
--
-- last_worker_id names the worker that claimed the task last, as history: no index and no foreign
-- key. Both cost every claim (an index entry, and a lookup of the worker's row) and every
-- completion (an index entry), and the only questions asked by worker (does a worker hold a
-- started task; how many started tasks do a function's workers hold) are about started tasks,
-- which step_tasks_started_idx finds. A pruned worker's id stays on the tasks it ran.

-- Attempt history: one row per attempt of a task that ended other than by completing it (a handler
-- error, stalled recovery taking it back, its run cancelled while it ran, a handler asking to be
-- retried later (deferred), its worker shutting down under it (interrupted)). The attempt that
-- completed a task is the task row itself (status, attempts_count, started_at, completed_at,
-- last_worker_id), so the completion path writes nothing here. Never inputs, outputs or bodies:
-- the error's text and a bounded stack trace. Deleted with its task (pruning, delete_flow).
create table if not exists pgflow.task_attempts (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  attempt integer not null,
  worker_id uuid,
  started_at timestamptz,
  ended_at timestamptz not null default clock_timestamp(),
  outcome text not null,
  error_message text,
  error_stack text,
  constraint task_attempts_pkey primary key (run_id, step_slug, task_index, attempt),
  constraint task_attempts_task_fkey foreign key (run_id, step_slug, task_index)
    references pgflow.step_tasks (run_id, step_slug, task_index) on delete cascade,
  constraint task_attempts_outcome_known check (outcome in ('failed', 'stalled', 'cancelled', 'deferred', 'interrupted')),
  constraint task_attempts_attempt_range check (attempt >= 1),
  constraint task_attempts_error_bounded check (length(error_message) <= 2000 and length(error_stack) <= 4000)
);
