-- Report a batch and take the next in one round trip. A busy worker finishes a batch and has as
-- many free slots as it had tasks: it would send complete_tasks on one connection and
-- read_and_claim on another, two transactions and two durable commits per batch, each call paying
-- the fixed cost of a round trip. This does both in one transaction, in that order: exactly
-- pgflow.complete_tasks (same checks, same idempotence; a late or duplicate completion changes
-- nothing), then exactly pgflow.read_and_claim without waiting (max_poll_seconds 0; the worker
-- waits for a notification or polls again itself when the read comes back short). It returns the
-- read's rows.
--
-- Completions first: a step completed here that makes a dependent ready sends its message before
-- the read, so a worker serving the next step on the same queue claims it in this same call.
-- Should any part fail, nothing of it happens: the worker reports and reads again separately.
create or replace function pgflow.complete_and_claim(
  run_ids uuid[],
  step_slugs text[],
  task_indexes integer[],
  outputs jsonb[],
  attempts integer[],
  queue_name text,
  worker_id uuid,
  visibility_timeout integer,
  qty integer,
  supported jsonb default null
)
returns table (
  msg_id bigint,
  read_ct integer,
  enqueued_at timestamptz,
  vt timestamptz,
  message jsonb,
  headers jsonb,
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
begin
  perform count(*) from pgflow.complete_tasks(complete_and_claim.run_ids, complete_and_claim.step_slugs,
    complete_and_claim.task_indexes, complete_and_claim.outputs, complete_and_claim.attempts);
  return query select * from pgflow.read_and_claim(complete_and_claim.queue_name, complete_and_claim.worker_id,
    complete_and_claim.visibility_timeout, complete_and_claim.qty, 0, 50, complete_and_claim.supported);
end;
$$;
