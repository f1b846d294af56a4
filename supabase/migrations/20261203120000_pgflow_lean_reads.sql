-- Lean reads (issue 14, item 4): pgflow.read_and_claim no longer returns the body and headers of
-- messages it did not claim. Every worker on a queue read every foreign message's whole body at
-- every visibility timeout (one 20 MB message raised a worker's memory by 160-230 MB each time);
-- unclaimed rows now carry NULL there, and only claimed rows carry the body and headers the
-- handler context exposes as rawMessage. The signature does not change.
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if to_regclass('pgflow.migrations') is not null then
    if exists (select 1 from pgflow.migrations m where m.name = '20261203120000_pgflow_lean_reads') then
      raise exception 'pgflow migration 20261203120000_pgflow_lean_reads is already applied to this database; nothing was changed'
        using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
    end if;
  end if;
end
$$;

set local lock_timeout = '5s';

-- ---- schemas/0410_read_and_claim.sql
-- Read and claim in one round trip. A worker's poll is pgmq.read_with_poll followed by start_tasks
-- on exactly the ids it returned; run as two calls, every batch waits for two round trips in series
-- before a task starts. This does both in one call and one transaction, against the support set
-- the worker registered (start_tasks(..., supported => NULL)) or, when given, the explicit pairs.
--
-- Every message read is returned once with its id, read count, times and disposition; only claimed
-- rows carry identity, input, attempt, and the message's body and headers (the handler context's
-- rawMessage; a claimed message is the one pgflow sent for the task, so it is small). A message
-- that is not claimed comes back without body or headers (NULL): it may be anything another sender
-- put on the queue, of any size, and every worker on the queue would receive it again at every
-- visibility timeout. It is changed by nothing but PGMQ's own read (read_ct and a visibility of
-- visibility_timeout), exactly as with the two calls. Should the claim fail, the read is rolled
-- back with it and the messages stay visible.
create or replace function pgflow.read_and_claim(
  queue_name text,
  worker_id uuid,
  visibility_timeout integer,
  qty integer,
  max_poll_seconds integer default 5,
  poll_interval_ms integer default 100,
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
  select array_agg(m order by m.msg_id), array_agg(m.msg_id order by m.msg_id)
  into msgs, ids
  from pgmq.read_with_poll(q, read_and_claim.visibility_timeout, read_and_claim.qty,
                           read_and_claim.max_poll_seconds, read_and_claim.poll_interval_ms) m;
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
  -- (started_at = now() singles them out) with the time they really started, so stalled recovery
  -- measures from there.
  if clock_timestamp() - now() > interval '500 milliseconds' then
    update pgflow.step_tasks t
    set started_at = clock_timestamp()
    from unnest(ids) i(mid)
    where t.queue_name = q and t.message_id = i.mid and t.status = 'started'
      and t.last_worker_id = read_and_claim.worker_id and t.started_at = now();
  end if;
end;
$$;

commit;
