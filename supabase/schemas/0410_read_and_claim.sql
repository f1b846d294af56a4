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
-- It ends as PGMQ's own read leaves it (read_ct and a visibility of visibility_timeout), exactly
-- as with the two calls. Should the claim fail, the read is rolled back with it and the messages
-- stay visible.
--
-- A worker claiming against its registered set reads with its claim_visibility (the timeout + 2 s
-- all its steps shared at registration), when it has one: the messages it claims are then hidden
-- as long as the claim needs and get no set_vt (each PGMQ call builds and plans its statement
-- again), and only the messages it does not claim are set back to visibility_timeout.
--
-- qty is the most tasks the worker claims (its free slots) and, by default, how many messages it
-- reads. read_qty, when larger, is how many it reads instead: the worker was told (next_read_qty,
-- on every row of its last read; see _start_tasks) that its own queued work waits that far behind
-- another worker's backlog at the head of the queue. Such a read is made with visibility 0, so
-- the messages it does not claim are hidden only while this transaction holds them and need no
-- set_vt to be handed back; the ones it claims get theirs (timeout + 2 s), and the others that
-- must stay hidden (no live worker serves them, no task owns them) get visibility_timeout.
--
-- Seq scans are priced out here and in everything it calls (enable_seqscan = off): every row it
-- touches is found by a key, and a worker's session keeps plans made on the statistics of the
-- moment. A plan made while the tables were small (a young database, or one autovacuum has just
-- vacuumed) would scan runs or step states in full for every batch after a burst, until the next
-- ANALYZE (tests/sql/claim_plan_test.ts). Where no index fits, a scan still runs.
create or replace function pgflow.read_and_claim(
  queue_name text,
  worker_id uuid,
  visibility_timeout integer,
  qty integer,
  max_poll_seconds integer default 2,
  poll_interval_ms integer default 50,
  supported jsonb default null,
  read_qty integer default null
)
returns setof pgflow.claim_row
language plpgsql
volatile
set search_path = ''
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
declare
  q text := read_and_claim.queue_name;
  msgs pgmq.message_record[];
  ids bigint[];
  -- How long the read hides what it reads.
  read_vt integer := read_and_claim.visibility_timeout;
  -- How many it reads.
  depth integer := greatest(read_and_claim.qty, coalesce(read_and_claim.read_qty, 0));
  hint integer;
  -- The registered support set, looked up once here for the claim.
  keys jsonb;
  -- Whether the worker's row is on this queue.
  fits boolean;
  read_started timestamptz;
  -- Tasks released for this read before it, as pgflow._start_tasks counts them (NULL: not in
  -- window mode).
  released integer;
begin
  if q is null then
    raise exception 'read_and_claim: queue_name must not be NULL' using errcode = '22004';
  end if;
  if read_and_claim.supported is null then
    -- Before the read: an unregistered worker (PFW01) reads nothing. The worker's row is read
    -- here, and pgflow._registered_claim called only to refuse a worker it does not fit: a call
    -- of that function (a PL/pgSQL call with its settings) cost about 30 µs around an 8 µs lookup,
    -- on every read (bench/results.md, round 29).
    select w.claim_visibility, w.supported_keys, w.queue_name = q into hint, keys, fits
    from pgflow.workers w where w.worker_id = read_and_claim.worker_id;
    if fits is not true then
      perform pgflow._registered_claim(read_and_claim.worker_id, q);
    end if;
    read_vt := coalesce(hint, read_vt);
  end if;
  if depth > read_and_claim.qty then
    read_vt := 0;
  end if;
  -- In window mode (0258_fair_window.sql) a claim releases what its read will take before it
  -- reads, so it reads the tasks whose turn it is (pgflow._release_before_read, which waits for
  -- the queue's turn lock: one claim at a time). Such a read does not wait for messages: it holds
  -- that lock, and what it did not release is released by the short read's own release below.
  if exists (select 1 from pgflow.fair_windows w where w.queue_name = q) then
    released := pgflow._release_before_read(q, depth);
  end if;
  read_started := clock_timestamp();
  if read_and_claim.max_poll_seconds = 0 or released is not null then
    -- A worker woken by notifications reads once without waiting: it waits for the next
    -- notification itself (read_with_poll with no time left returns before reading at all).
    select array_agg(m order by m.msg_id), array_agg(m.msg_id order by m.msg_id)
    into msgs, ids
    from pgmq.read(q, read_vt, depth) m;
  else
    select array_agg(m order by m.msg_id), array_agg(m.msg_id order by m.msg_id)
    into msgs, ids
    from pgmq.read_with_poll(q, read_vt, depth,
                             read_and_claim.max_poll_seconds, read_and_claim.poll_interval_ms) m;
  end if;
  if ids is null then
    -- An empty queue with tasks waiting for their turn (0258_fair_window.sql): release a read's
    -- worth for the next read. Only a queue with a cursor or a window has such tasks.
    if exists (select 1 from pgflow.queue_cursors c where c.queue_name = q)
       or exists (select 1 from pgflow.fair_windows w where w.queue_name = q) then
      perform pgflow._take_turns(q, 0, 0, depth);
    end if;
    return;
  end if;
  -- A slow read (pgflow._slow_read), full or not, may be planned on statistics that say the queue
  -- is empty (0405_queue_statistics.sql). A read that polled is slow too, and then only costs the
  -- look at the statistics.
  if clock_timestamp() - read_started > pgflow._slow_read() then
    perform pgflow._refresh_queue_statistics(q, cardinality(ids));
  end if;

  return query
  -- The visibility the message ends with: set by the claim (claimed, or set back) or by the read.
  select m.msg_id, m.read_ct, m.enqueued_at, coalesce(c.vt, m.vt),
         case when c.disposition = 'claimed' then m.message end,
         -- to_jsonb: PGMQ before 1.5 has no headers column; a claimed row only, never a foreign body.
         case when c.disposition = 'claimed' then to_jsonb(m) -> 'headers' end,
         c.disposition, c.flow_slug, c.run_id, c.step_slug, c.task_index, c.input, c.attempt,
         c.next_read_qty
  from unnest(msgs) m
  join pgflow._start_tasks(q, ids, read_and_claim.worker_id, read_and_claim.supported, read_vt,
                           case when read_vt <> read_and_claim.visibility_timeout
                                then read_and_claim.visibility_timeout end, keys,
                           depth, read_and_claim.qty, coalesce(released, 0)) c
    on c.msg_id = m.msg_id
  order by m.msg_id;

  -- start_tasks stamps started_at with now(), the start of this transaction, which is when the
  -- read began waiting. When the read waited long enough to matter, stamp the tasks claimed here
  -- (started_at = now() singles them out; last_worker_id is NULL for a worker with no row, see
  -- start_tasks) with the time they really started, so stalled recovery measures from there.
  if clock_timestamp() - now() > pgflow._late_start() then
    -- Each id looked up on its own and the task updated by the row version found, as in
    -- start_tasks: a join could scan the queue's every task.
    update pgflow.step_tasks t
    set started_at = clock_timestamp()
    -- The status is checked on the row found, not in the update's conditions: there it would let
    -- the planner walk every started task through step_tasks_started_idx.
    from (select k.tid, k.run_id, k.step_slug, k.task_index
          from unnest(ids) i(mid)
          cross join lateral (
            select t2.ctid as tid, t2.run_id, t2.step_slug, t2.task_index, t2.status
            from pgflow.step_tasks t2
            where t2.queue_name = q and t2.message_id = i.mid
            limit 1
          ) k
          where k.status = 'started') i
    where t.ctid = i.tid
      and t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and (t.last_worker_id = read_and_claim.worker_id or t.last_worker_id is null)
      and t.started_at = now();
  end if;
end;
$$;

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
  supported jsonb default null,
  read_qty integer default null
)
returns setof pgflow.claim_row
language plpgsql
volatile
set search_path = ''
as $$
begin
  -- On a queue in window mode the read waits for the queue's turn lock
  -- (pgflow._release_before_read); the completions come first, outside it, so claims there take
  -- turns only for their release, read and claim. Waiting for the lock while holding what the
  -- completions locked closes no cycle, because the holder, past its own completions, never
  -- waits for such a row: its claim updates only tasks queued in its snapshot whose messages it
  -- read and holds; a completion that fails a run archives the run's messages before it cancels
  -- their tasks (pgflow._fail_run), so it waits for the holder's read instead of holding a task the
  -- holder claims; the rest (runs, step states, its own started tasks, new tasks not yet
  -- committed) no claim locks; limited tasks are released at commit, not here.
  perform count(*) from pgflow.complete_tasks(complete_and_claim.run_ids, complete_and_claim.step_slugs,
    complete_and_claim.task_indexes, complete_and_claim.outputs, complete_and_claim.attempts);
  return query select * from pgflow.read_and_claim(complete_and_claim.queue_name, complete_and_claim.worker_id,
    complete_and_claim.visibility_timeout, complete_and_claim.qty, 0, 50, complete_and_claim.supported,
    complete_and_claim.read_qty);
end;
$$;
