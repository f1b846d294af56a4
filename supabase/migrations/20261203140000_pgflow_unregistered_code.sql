-- An unregistered worker (issue 15, item 2):
-- - it gets its own SQLSTATE: start_tasks with supported => NULL (and so read_and_claim, which
--   calls it) and heartbeat raise PFW01 for a worker id with no row in pgflow.workers, instead of
--   22023 (invalid_parameter_value, which they raise for bad arguments too). A worker recognises it
--   by the code alone. Message texts and signatures do not change;
-- - it can still claim with explicit pairs, as a worker whose row vanished falls back to doing:
--   start_tasks stamped last_worker_id with the missing id, and the foreign key to pgflow.workers
--   failed every such claim (23503). The claimed tasks now record no last_worker_id, and
--   read_and_claim re-stamps their started_at after a long read as it does for the others.
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if to_regclass('pgflow.migrations') is not null then
    if exists (select 1 from pgflow.migrations m where m.name = '20261203140000_pgflow_unregistered_code') then
      raise exception 'pgflow migration 20261203140000_pgflow_unregistered_code is already applied to this database; nothing was changed'
        using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
    end if;
  end if;
end
$$;

set local lock_timeout = '5s';

-- ---- schemas/0400_start_tasks.sql
-- supported => NULL claims against the set the worker registered (pgflow.workers.supported, keyed
-- once by register_worker): a worker with 1,000 pairs then sends none of them with each batch.
-- A worker id with no row (never registered, or its row deleted since) fails with SQLSTATE PFW01,
-- pgflow's own code for an unregistered worker (class PF is used by neither Postgres nor the SQL
-- standard), so a caller tells it from every other error by its code alone. With explicit pairs
-- such a worker still claims (its poll falls back to them): the tasks it claims then record no
-- last_worker_id, which can only name a registered worker.
create or replace function pgflow.start_tasks(
  queue_name text,
  msg_ids bigint[],
  worker_id uuid,
  supported jsonb
)
returns table (
  message_id bigint,
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
  q text := start_tasks.queue_name;
  -- The support set keyed as pgflow._support_keys builds it.
  sup_keys jsonb;
  c_msg bigint[];
  c_run uuid[];
  c_step text[];
  c_idx integer[];
  c_att integer[];
  c_off integer[];
  changed integer;
  malformed boolean;
  reg_queue text;
  -- The worker id stamped on claimed tasks: NULL for a worker with no row (see above).
  stamp uuid := start_tasks.worker_id;
begin
  if q is null then
    raise exception 'start_tasks: queue_name must not be NULL' using errcode = '22004';
  end if;
  if supported is null then
    -- The registered set, already keyed: one primary-key lookup whatever the set's size.
    select w.queue_name, coalesce(w.supported_keys, pgflow._support_keys(w.supported))
    into reg_queue, sup_keys
    from pgflow.workers w where w.worker_id = start_tasks.worker_id;
    if not found then
      raise exception 'start_tasks: worker % is not registered, so it has no recorded support set', start_tasks.worker_id
        using errcode = 'PFW01', hint = 'register it with pgflow.register_worker, or pass the supported pairs';
    end if;
    -- A set registered for another queue says nothing about this one.
    if reg_queue is distinct from q then
      raise exception 'start_tasks: worker % is registered for queue %, not %', start_tasks.worker_id,
        quote_literal(reg_queue), quote_literal(q)
        using errcode = '22023', hint = 'claim on the queue the worker registered, or pass the supported pairs';
    end if;
  -- One pass over the pairs both checks and unpacks them: this cost grows with the set and is
  -- paid per batch, which is why workers claim against their registered set instead.
  elsif jsonb_typeof(supported) = 'array' then
    select coalesce(jsonb_object_agg(
             case when jsonb_typeof(e) = 'array' then coalesce(e ->> 0, '') || chr(31) || coalesce(e ->> 1, '') else '' end,
             true), '{}'::jsonb),
           bool_or(case when jsonb_typeof(e) <> 'array' then true
                        when jsonb_array_length(e) <> 2 then true
                        else jsonb_typeof(e -> 0) <> 'string' or jsonb_typeof(e -> 1) <> 'string' end)
    into sup_keys, malformed
    from jsonb_array_elements(supported) e;
    -- Key-share locked, as the foreign key would: the row cannot vanish before the claim.
    perform 1 from pgflow.workers w where w.worker_id = start_tasks.worker_id for key share;
    if not found then
      stamp := null;
    end if;
  end if;
  if supported is not null and (jsonb_typeof(supported) <> 'array' or malformed) then
    raise exception 'start_tasks: supported must be a JSON array of [flow_slug, step_slug] pairs, got %',
      left(coalesce(supported::text, 'NULL'), 200) using errcode = '22023';
  end if;

  with claimed as (
    update pgflow.step_tasks t
    set status = 'started', attempts_count = t.attempts_count + 1, started_at = now(),
        last_worker_id = stamp
    -- One index lookup per id: `message_id = any (msg_ids)` let the planner scan every task the
    -- queue ever had.
    from (select distinct m from unnest(msg_ids) m where m is not null) i(mid),
         pgflow.runs r, pgflow.step_states ss
    where t.queue_name = q
      and t.message_id = i.mid
      and t.status = 'queued'
      and sup_keys ? (t.flow_slug || chr(31) || t.step_slug)
      and r.run_id = t.run_id and r.status = 'started'
      and ss.run_id = t.run_id and ss.step_slug = t.step_slug and ss.status = 'started'
    returning t.message_id, t.run_id, t.flow_slug, t.step_slug, t.task_index, t.attempts_count
  )
  select array_agg(c.message_id), array_agg(c.run_id), array_agg(c.step_slug),
         array_agg(c.task_index), array_agg(c.attempts_count),
         array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2)
  into c_msg, c_run, c_step, c_idx, c_att, c_off
  from claimed c
  join pgflow.steps s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
  join pgflow.flows f on f.flow_slug = c.flow_slug;

  if c_msg is not null then
    -- Hide each claimed message for the effective timeout + 2 s, and make sure it happened: a claim
    -- whose message is gone would otherwise run with nothing guarding it.
    select count(*) into changed from pgflow.set_vt_batch(q, c_msg, c_off);
    if changed <> cardinality(c_msg) then
      raise exception 'start_tasks: queue % holds only % of the % claimed messages %', q, changed,
        cardinality(c_msg), c_msg using errcode = '55000';
    end if;
  end if;

  return query
  with ids as (select distinct m as mid from unnest(msg_ids) m where m is not null),
  claimed as (
    select * from unnest(c_msg, c_run, c_step, c_idx, c_att) as c(mid, run_id, step_slug, task_index, attempt)
  )
  select i.mid,
         case
           when c.mid is not null then 'claimed'
           when t.run_id is null then 'unknown'
           when not (sup_keys ? (t.flow_slug || chr(31) || t.step_slug)) then 'unsupported'
           when t.status = 'started' then 'started'
           else 'ineligible'
         end,
         case when c.mid is not null then t.flow_slug end,
         case when c.mid is not null then t.run_id end,
         case when c.mid is not null then t.step_slug end,
         case when c.mid is not null then t.task_index end,
         -- The handler input, built here rather than in a helper function: a SQL function with
         -- its own search_path is planned again on every call, and this runs once per claimed task.
         case when c.mid is not null then
           case
             when s.step_type = 'map' and s.deps_count = 0 then r.input -> t.task_index
             when s.step_type = 'map' then
               (select ss.output -> t.task_index
                from pgflow.deps d
                join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = d.dep_slug
                where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug)
             when s.deps_count = 0 then r.input
             else (select coalesce(jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
                   from pgflow.deps d
                   join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = d.dep_slug
                   where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug
                     and ss.status = 'completed')
           end
         end,
         c.attempt
  from ids i
  left join claimed c on c.mid = i.mid
  left join pgflow.step_tasks t on t.queue_name = q and t.message_id = i.mid
  left join pgflow.steps s on c.mid is not null and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
  left join pgflow.runs r on c.mid is not null and r.run_id = t.run_id
  order by i.mid;
end;
$$;

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
  -- (started_at = now() singles them out; last_worker_id is NULL for a worker with no row, see
  -- start_tasks) with the time they really started, so stalled recovery measures from there.
  if clock_timestamp() - now() > interval '500 milliseconds' then
    update pgflow.step_tasks t
    set started_at = clock_timestamp()
    from unnest(ids) i(mid)
    where t.queue_name = q and t.message_id = i.mid and t.status = 'started'
      and (t.last_worker_id = read_and_claim.worker_id or t.last_worker_id is null)
      and t.started_at = now();
  end if;
end;
$$;

-- ---- schemas/0600_workers.sql
-- Records a heartbeat and tells the worker whether it has been deprecated (it should stop polling).
-- A worker id with no row fails with SQLSTATE PFW01, as in start_tasks.
create or replace function pgflow.heartbeat(worker_id uuid)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  deprecated boolean;
begin
  -- A worker of a disabled function is deprecated too: it stops polling and drains.
  update pgflow.workers w
  set last_heartbeat_at = clock_timestamp(),
      deprecated_at = coalesce(w.deprecated_at, case when not fn.enabled then clock_timestamp() end)
  from pgflow.worker_functions fn
  where w.worker_id = heartbeat.worker_id and fn.function_name = w.function_name
  returning w.deprecated_at is not null into deprecated;
  if not found then
    raise exception 'worker % is not registered', heartbeat.worker_id
      using errcode = 'PFW01', hint = 'register it with pgflow.register_worker first';
  end if;
  return deprecated;
end;
$$;

commit;
