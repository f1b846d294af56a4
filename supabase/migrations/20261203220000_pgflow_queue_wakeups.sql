-- pgflow_queue_wakeups: workers are woken by LISTEN/NOTIFY instead of finding work only by polling.
--
-- - pgflow._send_task_messages also runs pg_notify('pgflow_queue:<queue>', '') for every queue it
--   sent messages to that are visible at once (a step's startDelay is not announced). It is part
--   of the sending transaction, so it is delivered at commit and never before.
-- - pgflow.read_and_claim with max_poll_seconds = 0 reads once with pgmq.read instead of
--   read_with_poll, which with no time left returns before reading at all. A worker that listens
--   waits for the notification itself.
--
-- Existing data is untouched; both functions are replaced in place (no table locks). Workers of
-- the previous version keep polling as before and are unaffected by the notifications.
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if exists (select 1 from pgflow.migrations m where m.name = '20261203220000_pgflow_queue_wakeups') then
    raise exception 'pgflow migration 20261203220000_pgflow_queue_wakeups is already applied to this database; nothing was changed'
      using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
  end if;
end
$$;

set local lock_timeout = '5s';

-- ---- schemas/0200_messages.sql: pgflow._send_task_messages(p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[])
-- Sending and archiving task messages. Only PGMQ's public functions are used, and every call names
-- the queue from the task's snapshot: a flow slug never stands in for a queue.

-- Creates the tasks of steps just started (p_steps, with p_counts tasks each) and sends one message
-- per task, batched per (queue, delay) in send_batch calls of at most 1,000; each task is inserted
-- with its queue snapshot and message id in the same transaction, and channel pgflow_queue:<queue>
-- is notified for every queue that got messages visible at once.
create or replace function pgflow._send_task_messages(p_run_id uuid, p_flow_slug text, p_steps text[], p_counts integer[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  grp record;
  ids bigint[];
  batch_size constant integer := 1000;
begin
  for grp in
    select s.queue_name, s.opt_start_delay as delay,
           array_agg(s.step_slug order by s.step_slug, i) as steps,
           array_agg(i order by s.step_slug, i) as idxs,
           -- The body is informational only: the claim reads ids, never bodies.
           array_agg(jsonb_build_object('flow_slug', p_flow_slug, 'run_id', p_run_id,
                                        'step_slug', s.step_slug, 'task_index', i)
                     order by s.step_slug, i) as msgs
    from unnest(p_steps, p_counts) as n(step_slug, task_count)
    join pgflow.steps s on s.flow_slug = p_flow_slug and s.step_slug = n.step_slug
    cross join generate_series(0, n.task_count - 1) as i
    group by s.queue_name, s.opt_start_delay
  loop
    -- Large maps go out in slices so one statement never carries an unbounded array.
    for slice_start in 1 .. cardinality(grp.msgs) by batch_size loop
      -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
      select array_agg(id order by id) into ids
      from pgmq.send_batch(grp.queue_name, grp.msgs[slice_start:slice_start + batch_size - 1], grp.delay) as id;
      insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name, message_id)
      select p_run_id, p_flow_slug, u.step_slug, u.task_index, grp.queue_name, u.id
      from unnest(grp.steps[slice_start:slice_start + batch_size - 1], grp.idxs[slice_start:slice_start + batch_size - 1], ids)
        as u(step_slug, task_index, id);
    end loop;
    -- Wakes the workers listening on the queue. Sent in this transaction, so it is delivered at
    -- commit or never: a worker never wakes before the messages are visible to its read. A delayed
    -- group is not announced (nothing to read yet); the workers' fallback poll finds it. Equal
    -- notifications of one transaction are folded into one by Postgres.
    if grp.delay = 0 then
      perform pg_notify('pgflow_queue:' || grp.queue_name, '');
    end if;
  end loop;
end;
$$;

-- ---- schemas/0410_read_and_claim.sql: pgflow.read_and_claim(queue_name text, worker_id uuid, visibility_timeout integer, qty integer, max_poll_seconds integer, poll_interval_ms integer, supported jsonb)
-- Read and claim in one round trip. A worker's poll is pgmq.read_with_poll followed by start_tasks
-- on exactly the ids it returned; run as two calls, every batch waits for two round trips in series
-- before a task starts. This does both in one call and one transaction, against the support set
-- the worker registered (start_tasks(..., supported => NULL)) or, when given, the explicit pairs.
--
-- Every message read is returned once with its id, read count, times and disposition, and the
-- identity of the task that owns it (flow, run, step, index; NULL for a message no task owns), so
-- a worker can say which flow and step an unclaimed message needs. Only claimed rows carry input,
-- attempt, and the message's body and headers (the handler context's rawMessage; a claimed
-- message is the one pgflow sent for the task, so it is small). A message that is not claimed
-- comes back without body or headers (NULL): it may be anything another sender put on the queue,
-- of any size, and every worker on the queue would receive it again at every visibility timeout.
-- It is changed by nothing but PGMQ's own read (read_ct and a visibility of visibility_timeout),
-- exactly as with the two calls. Should the claim fail, the read is rolled back with it and the
-- messages stay visible.
create or replace function pgflow.read_and_claim(
  queue_name text,
  worker_id uuid,
  visibility_timeout integer,
  qty integer,
  max_poll_seconds integer default 2,
  poll_interval_ms integer default 50,
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
#variable_conflict use_column
declare
  q text := read_and_claim.queue_name;
  msgs pgmq.message_record[];
  ids bigint[];
begin
  if q is null then
    raise exception 'read_and_claim: queue_name must not be NULL' using errcode = '22004';
  end if;
  if read_and_claim.max_poll_seconds = 0 then
    -- A worker woken by notifications reads once without waiting: it waits for the next
    -- notification itself (read_with_poll with no time left returns before reading at all).
    select array_agg(m order by m.msg_id), array_agg(m.msg_id order by m.msg_id)
    into msgs, ids
    from pgmq.read(q, read_and_claim.visibility_timeout, read_and_claim.qty) m;
  else
    select array_agg(m order by m.msg_id), array_agg(m.msg_id order by m.msg_id)
    into msgs, ids
    from pgmq.read_with_poll(q, read_and_claim.visibility_timeout, read_and_claim.qty,
                             read_and_claim.max_poll_seconds, read_and_claim.poll_interval_ms) m;
  end if;
  if ids is null then
    return;
  end if;

  return query
  select m.msg_id, m.read_ct, m.enqueued_at, m.vt,
         case when c.disposition = 'claimed' then m.message end,
         -- to_jsonb: PGMQ before 1.5 has no headers column; a claimed row only, never a foreign body.
         case when c.disposition = 'claimed' then to_jsonb(m) -> 'headers' end,
         c.disposition, c.flow_slug, c.run_id, c.step_slug, c.task_index, c.input, c.attempt
  from unnest(msgs) m
  join pgflow.start_tasks(q, ids, read_and_claim.worker_id, read_and_claim.supported) c
    on c.message_id = m.msg_id
  order by m.msg_id;

  -- start_tasks stamps started_at with now(), the start of this transaction, which is when the
  -- read began waiting. When the read waited long enough to matter, stamp the tasks claimed here
  -- (started_at = now() singles them out; last_worker_id is NULL for a worker with no row, see
  -- start_tasks) with the time they really started, so stalled recovery measures from there.
  if clock_timestamp() - now() > interval '500 milliseconds' then
    -- Each id looked up on its own, as in start_tasks: a join could scan the queue's every task.
    update pgflow.step_tasks t
    set started_at = clock_timestamp()
    from (select k.run_id, k.step_slug, k.task_index
          from unnest(ids) i(mid)
          cross join lateral (
            select t2.run_id, t2.step_slug, t2.task_index from pgflow.step_tasks t2
            where t2.queue_name = q and t2.message_id = i.mid
            limit 1
          ) k) i
    where t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and t.status = 'started'
      and (t.last_worker_id = read_and_claim.worker_id or t.last_worker_id is null)
      and t.started_at = now();
  end if;
end;
$$;

insert into pgflow.migrations (name) values ('20261203220000_pgflow_queue_wakeups') on conflict (name) do nothing;

commit;
