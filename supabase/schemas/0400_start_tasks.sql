-- The claim. A worker that read messages from one queue claims the tasks behind them by exact
-- (queue, message id) identity, restricted to the (flow, step) pairs it has handlers for. Only an
-- eligible queued task in the support set is claimed; every other message is reported (with the
-- identity of its task, when one owns it) and its task left exactly as it was. One such message
-- changes: a queued task outside the support set whose pair a live worker on the queue serves is
-- handed back to that worker (visible again at once, and announced; see _hand_back). A read may
-- ask for more messages than the worker has free slots (to read past another worker's backlog,
-- see read_and_claim): then at most p_claim_limit tasks are claimed, and the worker's own tasks
-- beyond them are returned the same way (surplus).
--
-- _start_tasks is the claim; its steps that only some reads need are the functions before it
-- (_explicit_support, _claim_limit_split, _hand_back, _read_past_qty), and the input of a claimed
-- task is pgflow._task_input's (0090_inline_helpers.sql).

-- A row of the claim, as read_and_claim, complete_and_claim and _start_tasks return it: one
-- message read; what the claim did with it (disposition: docs/design.md, Claim table); the
-- identity of the task that owns it, if one does; input and attempt when it was claimed; and
-- next_read_qty, the same on every row of a read (see _read_past_qty). The read's own fields
-- (read_ct, enqueued_at, message, headers) are read_and_claim's to fill: _start_tasks leaves them
-- NULL and gives vt only where it changed the message's visibility. read_and_claim gives the
-- visibility each message ends with, and a body and headers only on claimed rows.
do $$
begin
  create type pgflow.claim_row as (
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
    attempt integer,
    next_read_qty integer
  );
exception when duplicate_object then
  null;
end
$$;

-- A registered worker's claim settings, one primary-key lookup whatever the size of its set: the
-- visibility its claims read with (claim_visibility, NULL when its steps' timeouts differ) and its
-- support set, keyed as pgflow._support_keys builds it. A worker id with no row (never registered, or its
-- row deleted since) fails with SQLSTATE PFW01, pgflow's own code for an unregistered worker
-- (class PF is used by neither Postgres nor the SQL standard), so a caller tells it from every
-- other error by its code alone; a worker registered for another queue fails too, since its set
-- says nothing about this one.
create or replace function pgflow._registered_claim(p_worker_id uuid, p_queue_name text)
returns table (claim_visibility integer, support_keys jsonb)
language plpgsql
stable
set search_path = ''
as $$
declare
  reg_queue text;
begin
  select w.queue_name, w.claim_visibility, w.supported_keys
  into reg_queue, claim_visibility, support_keys
  from pgflow.workers w where w.worker_id = p_worker_id;
  if not found then
    raise exception 'start_tasks: worker % is not registered, so it has no recorded support set', p_worker_id
      using errcode = 'PFW01', hint = 'register it with pgflow.register_worker, or pass the supported pairs';
  end if;
  if reg_queue is distinct from p_queue_name then
    raise exception 'start_tasks: worker % is registered for queue %, not %', p_worker_id,
      quote_literal(reg_queue), quote_literal(p_queue_name)
      using errcode = '22023', hint = 'claim on the queue the worker registered, or pass the supported pairs';
  end if;
  return next;
end;
$$;

-- The support set given as explicit pairs (start_tasks' supported, a worker's fallback when it
-- has no registration): checked and keyed in one pass over the pairs, a cost that grows with the
-- set and is paid per batch, which is why workers claim against their registered set instead.
-- stamp is the worker id to record on claimed tasks: NULL for a worker with no row, since
-- last_worker_id can only name a registered worker.
create or replace function pgflow._explicit_support(
  p_supported jsonb, p_worker_id uuid, out support_keys jsonb, out stamp uuid
)
language plpgsql
stable
set search_path = ''
as $$
declare
  malformed boolean;
begin
  if jsonb_typeof(p_supported) = 'array' then
    select coalesce(jsonb_object_agg(
             case when jsonb_typeof(e) = 'array'
                  then pgflow._pair_key(coalesce(e ->> 0, ''), coalesce(e ->> 1, '')) else '' end,
             true), '{}'::jsonb),
           bool_or(case when jsonb_typeof(e) <> 'array' then true
                        when jsonb_array_length(e) <> 2 then true
                        else jsonb_typeof(e -> 0) <> 'string' or jsonb_typeof(e -> 1) <> 'string' end)
    into support_keys, malformed
    from jsonb_array_elements(p_supported) e;
  end if;
  if jsonb_typeof(p_supported) <> 'array' or malformed then
    raise exception 'start_tasks: supported must be a JSON array of [flow_slug, step_slug] pairs, got %',
      left(coalesce(p_supported::text, 'NULL'), 200) using errcode = '22023';
  end if;
  stamp := p_worker_id;
  perform 1 from pgflow.workers w where w.worker_id = p_worker_id;
  if not found then
    stamp := null;
  end if;
end;
$$;

-- A read deeper than the worker's free slots (read_and_claim's read_qty) may hold more of its own
-- queued tasks than it can run: the claim may take the first p_claim_limit of them, in message
-- order (claim_ids), and the rest are surplus, returned to the queue by the hand-back. Each id is
-- looked up on its own (LATERAL ... LIMIT 1), as in the claim (see _start_tasks). Called by
-- _start_tasks only, under its settings.
create or replace function pgflow._claim_limit_split(
  p_queue text, p_msg_ids bigint[], p_support_keys jsonb, p_claim_limit integer,
  out claim_ids bigint[], out surplus bigint[]
)
language plpgsql
stable
set search_path = ''
as $$
declare
  own_ids bigint[];
begin
  select array_agg(i.mid order by i.mid) into own_ids
  from (select distinct m from unnest(p_msg_ids) m where m is not null) i(mid)
  cross join lateral (
    select 1 from pgflow.step_tasks t
    where t.queue_name = p_queue and t.message_id = i.mid and t.status = 'queued'
      and p_support_keys ? pgflow._pair_key(t.flow_slug, t.step_slug)
    limit 1
  ) t;
  claim_ids := coalesce(own_ids[1:p_claim_limit], '{}');
  surplus := nullif(own_ids[p_claim_limit + 1:], '{}');
end;
$$;

-- The hand-back (docs/design.md, Claim table). Reading a message hides it from every other reader
-- of the queue, so a message this worker cannot claim would wait a visibility timeout for the
-- worker that can, and a non-supporting reader whose next read lands as it reappears could hide
-- it again, for ever. So a message whose task is queued in a started run, outside this worker's
-- support set, whose pair another live worker on this queue serves (pgflow._worker_live), is
-- handed back: made visible again at once (set_vt 0, or nothing when the read, with visibility
-- 0, left it visible) and announced on the queue's channel with its pair as payload
-- (["flow", "step"]: identity, never the body), which wakes a worker that serves it. A fresh
-- message read by the wrong worker is claimed by the right one without waiting, and no reader
-- ever hides another worker's message for longer than its own transaction. The worker's surplus
-- tasks (_claim_limit_split) are returned the same way: this worker has no slot for them, another
-- that serves them may. The task is not touched. A message no live worker serves keeps the
-- visibility the worker asked for (it would only be read again by workers that cannot claim it),
-- and so does one no task owns. Decided by task identity and the worker registry only, each
-- pair's servers looked up once. Returns the ids handed back, and the visibility of those set_vt
-- changed. Called by _start_tasks only, under its settings.
create or replace function pgflow._hand_back(
  p_queue text, p_msg_ids bigint[], p_claimed bigint[], p_surplus bigint[], p_support_keys jsonb,
  p_worker_id uuid, p_read_visibility integer,
  out handed bigint[], out vt_ids bigint[], out vts timestamptz[]
)
language plpgsql
volatile
set search_path = ''
as $$
declare
  payloads text[];
  payload text;
begin
  with unclaimed as (
    select i.mid, s.m is not null as surplus, t.run_id, t.flow_slug, t.step_slug,
           pgflow._pair_key(t.flow_slug, t.step_slug) as k
    from (select distinct m from unnest(p_msg_ids) m where m is not null) i(mid)
    left join unnest(p_surplus) s(m) on s.m = i.mid
    cross join lateral (
      select t.flow_slug, t.step_slug, t.run_id from pgflow.step_tasks t
      where t.queue_name = p_queue and t.message_id = i.mid and t.status = 'queued'
      limit 1
    ) t
    where not (i.mid = any (coalesce(p_claimed, '{}')))
  ),
  served as (
    select p.k from (select distinct u.k from unclaimed u where not u.surplus) p
    where not (p_support_keys ? p.k)
      and exists (
        select 1 from pgflow.workers w
        where w.queue_name = p_queue
          and pgflow._worker_live(w, clock_timestamp() - pgflow._live_window())
          and w.worker_id is distinct from p_worker_id
          and w.supported_keys ? p.k)
  )
  select array_agg(u.mid order by u.mid),
         array_agg(distinct jsonb_build_array(u.flow_slug, u.step_slug)::text)
  into handed, payloads
  from unclaimed u
  where u.surplus
     or (u.k in (select v.k from served v)
         and exists (select 1 from pgflow.runs r where r.run_id = u.run_id and r.status = 'started'));
  if handed is null then
    return;
  end if;
  if p_read_visibility is distinct from 0 then
    select array_agg(r.msg_id), array_agg(r.vt) into vt_ids, vts
    from pgflow.set_vt_batch(p_queue, handed, array_fill(0, array[cardinality(handed)])) r;
  end if;
  foreach payload in array payloads loop
    perform pgflow._announce('pgflow_queue:' || p_queue, payload);
  end loop;
end;
$$;

-- Reading past another worker's backlog (docs/design.md, Claim table; next_read_qty). PGMQ reads
-- visible messages in id order, so a worker whose own tasks are queued behind a busy worker's
-- backlog reads that backlog's head, hands it back (visible at once: its worker is live) and
-- reads the same head again, until the backlog is gone. So when a full read did not claim all it
-- read, the worker is told how many messages its next read must ask for to reach its first queued
-- task behind this read (or its first surplus task, p_first_surplus): the distance in message ids
-- from the first id read (the visible messages in between are at most that many), plus its claim
-- limit; at most pgflow._read_past_max(). read_and_claim reads that many with visibility 0 and
-- claims at most the limit, so the backlog it reads past is hidden from its worker only while
-- that read's transaction holds it. Only the worker's own queued tasks are looked at (pgflow's
-- rows, by id, within _read_past_max() ids of this read), never a message's body. A task queued
-- further behind, or whose message is not visible (a retry's delay), is not reached this way.
-- NULL: nothing of this worker's to read past to. Called by _start_tasks only, under its settings.
create or replace function pgflow._read_past_qty(
  p_queue text, p_msg_ids bigint[], p_ids_read integer, p_first_surplus bigint, p_support_keys jsonb,
  p_read_qty integer, p_claim_limit integer
)
returns integer
language plpgsql
stable
set search_path = ''
as $$
declare
  first_read bigint := (select min(m) from unnest(p_msg_ids) m);
  behind bigint := p_first_surplus;
begin
  -- A read that came back short saw every visible message: nothing of this worker's is visible
  -- behind it. Nor is anything when none of its flows has a started run (a key lookup per pair,
  -- before a scan of up to _read_past_max() task rows).
  if behind is null and p_ids_read >= coalesce(p_read_qty, p_ids_read)
     and exists (select 1 from jsonb_object_keys(p_support_keys) k
                 where exists (select 1 from pgflow.runs r
                               where r.flow_slug = split_part(k, chr(31), 1)
                                 and r.status = 'started')) then
    select t.message_id into behind
    from pgflow.step_tasks t
    where t.queue_name = p_queue
      and t.message_id > (select max(m) from unnest(p_msg_ids) m)
      and t.message_id < first_read + pgflow._read_past_max()
      and t.status = 'queued' and p_support_keys ? pgflow._pair_key(t.flow_slug, t.step_slug)
    order by t.message_id
    limit 1;
  end if;
  if behind is null then
    return null;
  end if;
  return least(behind - first_read + p_claim_limit, pgflow._read_past_max())::integer;
end;
$$;

-- supported => NULL claims against the set the worker registered (pgflow.workers.supported, keyed
-- once by register_worker; see _registered_claim): a worker with 1,000 pairs then sends none of
-- them with each batch. p_support_keys, when given, is that set already looked up by the caller
-- (read_and_claim). With explicit pairs a worker with no row still claims (its poll falls back to
-- them; see _explicit_support).
--
-- The claim runs in named steps, each below under its name: support set, claim limit, claim,
-- re-arm visibility, hand back, set back, read-past sizing, answer (with the inputs built by
-- pgflow._task_input). Each statement costs a plan lookup and an executor start whatever the
-- batch's size, so the common claim (every message claimed, every step with the timeout the read
-- used) runs two: the claim and the answer; the steps for the other cases are functions of their
-- own, called only when their case arises. A step's timeout is looked up once per step in the
-- batch, not once per task.
--
-- enable_seqscan = off: see read_and_claim (0410_read_and_claim.sql); start_tasks gets it here,
-- and the steps' functions run under it.
create or replace function pgflow._start_tasks(
  queue_name text,
  msg_ids bigint[],
  worker_id uuid,
  supported jsonb,
  p_read_visibility integer,
  p_unclaimed_visibility integer,
  p_support_keys jsonb default null,
  p_read_qty integer default null,
  p_claim_limit integer default null,
  p_released integer default 0
)
returns setof pgflow.claim_row
language plpgsql
volatile
set search_path = ''
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
declare
  q text := _start_tasks.queue_name;
  -- The queue's fairness state (0258_fair_window.sql): its cursor (null unless shared) and
  -- whether it is in window mode.
  q_cursor bigint;
  q_window boolean;
  -- The support set keyed as pgflow._support_keys builds it.
  sup_keys jsonb := _start_tasks.p_support_keys;
  -- The worker id stamped on claimed tasks: NULL for a worker with no row (_explicit_support).
  stamp uuid := _start_tasks.worker_id;
  -- The ids the claim may take: every id read, or with a claim limit the worker's own queued tasks
  -- up to it; the worker's own queued tasks beyond it (surplus).
  claim_ids bigint[] := _start_tasks.msg_ids;
  sur_msg bigint[];
  -- The claimed tasks, column by column.
  c_msg bigint[];
  c_flow text[];
  c_run uuid[];
  c_step text[];
  c_idx integer[];
  c_att integer[];
  -- Claimed messages whose step's timeout + margin is not the visibility the read gave them.
  v_msg bigint[];
  v_off integer[];
  -- How many distinct ids were read.
  n_ids integer;
  -- Claimed messages of rate-limited tasks; then those the rate check sent back to waiting.
  rl_msg bigint[];
  changed integer;
  -- Messages handed back, and messages set back to the visibility the worker asked for.
  h_msg bigint[];
  h_vt_ids bigint[];
  h_vts timestamptz[];
  u_msg bigint[];
  -- Every visibility this call changed, by message.
  s_ids bigint[] := '{}';
  s_vts timestamptz[] := '{}';
  next_qty integer;
begin
  if q is null then
    raise exception 'start_tasks: queue_name must not be NULL' using errcode = '22004';
  end if;

  -- Support set: the registered one, unless the caller looked it up already, or the explicit pairs.
  if supported is not null then
    select e.support_keys, e.stamp into sup_keys, stamp
    from pgflow._explicit_support(supported, _start_tasks.worker_id) e;
  elsif sup_keys is null then
    select r.support_keys into sup_keys from pgflow._registered_claim(_start_tasks.worker_id, q) r;
  end if;

  -- Claim limit: only a read that returned more ids than the worker has free slots (a read past).
  if p_claim_limit is not null and cardinality(msg_ids) > p_claim_limit then
    select l.claim_ids, l.surplus into claim_ids, sur_msg
    from pgflow._claim_limit_split(q, msg_ids, sup_keys, p_claim_limit) l;
  end if;

  -- Claim: each eligible queued task in the support set starts, once.
  with claimed as (
    update pgflow.step_tasks t
    -- The transaction's start, or, for a claim that waited for its queue's turn lock, when it
    -- got it (pgflow._release_before_read): a task released after the transaction began must
    -- not look started before it was queued.
    set status = 'started', attempts_count = t.attempts_count + 1,
        started_at = coalesce(nullif(pg_catalog.current_setting('pgflow.claim_start', true), '')::timestamptz,
                              now()),
        last_worker_id = stamp
    -- The plan must be driven by the ids, whatever the statistics say. A join on (queue, message
    -- id), `message_id = any (msg_ids)`, or runs and step_states joined by status each let a plan
    -- cached on stale statistics (a new queue, a fresh database, a burst: the planner expected
    -- no queued or started rows) scan every task, run or step state of the queue for every batch:
    -- a 3,000-run burst on a fresh database claimed 10 tasks in 80 ms. So each id is looked up on
    -- its own, its run and step state after it, each in a LATERAL ... LIMIT 1 (a lateral
    -- reference orders the join, the LIMIT keeps it from being flattened), and the task is updated
    -- by the row version found (a TID scan; a concurrent change is rechecked against the
    -- conditions below, as with any UPDATE).
    from (select k.tid, k.run_id, k.step_slug, k.task_index
          from (select distinct m from unnest(claim_ids) m where m is not null) i(mid)
          cross join lateral (
            select t2.ctid as tid, t2.run_id, t2.step_slug, t2.task_index from pgflow.step_tasks t2
            where t2.queue_name = q and t2.message_id = i.mid
            limit 1
          ) k
          cross join lateral (
            select 1 from pgflow.runs r where r.run_id = k.run_id and r.status = 'started' limit 1
          ) r
          cross join lateral (
            select 1 from pgflow.step_states ss
            where ss.run_id = k.run_id and ss.step_slug = k.step_slug and ss.status = 'started'
            limit 1
          ) ss) i
    where t.ctid = i.tid
      and t.run_id = i.run_id and t.step_slug = i.step_slug and t.task_index = i.task_index
      and t.status = 'queued'
      and sup_keys ? pgflow._pair_key(t.flow_slug, t.step_slug)
    returning t.message_id, t.run_id, t.flow_slug, t.step_slug, t.task_index, t.attempts_count,
              t.rate_scope
  ),
  -- Each step's effective timeout + the claim margin, once per step of the batch.
  timeouts as (
    select p.flow_slug, p.step_slug, o.off
    from (select distinct c.flow_slug, c.step_slug from claimed c) p
    cross join lateral (
      select coalesce(s.opt_timeout, f.opt_timeout) + pgflow._claim_margin() as off
      from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug
      where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug
      limit 1
    ) o
  )
  select array_agg(c.message_id), array_agg(c.flow_slug), array_agg(c.run_id), array_agg(c.step_slug),
         array_agg(c.task_index), array_agg(c.attempts_count),
         array_agg(c.message_id) filter (where o.off is distinct from p_read_visibility),
         array_agg(o.off) filter (where o.off is distinct from p_read_visibility),
         (select count(distinct m)::integer from unnest(msg_ids) m where m is not null),
         array_agg(c.message_id) filter (where c.rate_scope is not null)
  into c_msg, c_flow, c_run, c_step, c_idx, c_att, v_msg, v_off, n_ids, rl_msg
  from claimed c
  join timeouts o on o.flow_slug = c.flow_slug and o.step_slug = c.step_slug;

  -- Rate check: only a batch with rate-limited tasks. Those whose key's window is full go back to
  -- waiting (0262_rate_limits.sql) and leave the claimed set.
  if rl_msg is not null then
    rl_msg := nullif(pgflow._rate_gate(q, rl_msg), '{}');
    if rl_msg is not null then
      select array_agg(c.mid order by c.ord), array_agg(c.flow_slug order by c.ord),
             array_agg(c.run_id order by c.ord), array_agg(c.step_slug order by c.ord),
             array_agg(c.task_index order by c.ord), array_agg(c.attempt order by c.ord)
      into c_msg, c_flow, c_run, c_step, c_idx, c_att
      from unnest(c_msg, c_flow, c_run, c_step, c_idx, c_att) with ordinality
        as c(mid, flow_slug, run_id, step_slug, task_index, attempt, ord)
      where not (c.mid = any (rl_msg));
      select array_agg(v.mid order by v.ord), array_agg(v.off order by v.ord) into v_msg, v_off
      from unnest(v_msg, v_off) with ordinality as v(mid, off, ord)
      where not (v.mid = any (rl_msg));
    end if;
  end if;

  -- Re-arm visibility: hide each claimed message for its effective timeout + the claim margin, and
  -- make sure it happened: a claim whose message is gone would otherwise run with nothing guarding
  -- it. A message the read in this transaction already hid for exactly that long (read_and_claim
  -- reads with the worker's claim_visibility) is left as it is: PGMQ builds and plans every set_vt
  -- again.
  if v_msg is not null then
    select count(*), array_agg(r.msg_id), array_agg(r.vt) into changed, s_ids, s_vts
    from pgflow.set_vt_batch(q, v_msg, v_off) r;
    if changed <> cardinality(v_msg) then
      raise exception 'start_tasks: queue % holds only % of the % claimed messages %', q, changed,
        cardinality(v_msg), v_msg using errcode = '55000';
    end if;
  end if;

  -- Hand back what another live worker serves, and the surplus: costs nothing when every message
  -- read is claimed.
  if coalesce(cardinality(c_msg), 0) + coalesce(cardinality(rl_msg), 0) < n_ids then
    select h.handed, h.vt_ids, h.vts into h_msg, h_vt_ids, h_vts
    from pgflow._hand_back(q, msg_ids, c_msg, sur_msg, sup_keys, _start_tasks.worker_id,
                           p_read_visibility) h;
    s_ids := s_ids || h_vt_ids;
    s_vts := s_vts || h_vts;
  end if;

  -- Set back: a read with the claim's visibility (or, reading past others' messages, with none)
  -- hid the messages neither claimed nor handed back for as long: they get the visibility the
  -- worker asked for, as if read with it.
  if p_unclaimed_visibility is not null
     and coalesce(cardinality(c_msg), 0) + coalesce(cardinality(h_msg), 0)
         + coalesce(cardinality(rl_msg), 0) < n_ids then
    select array_agg(m) into u_msg
    from (select m from unnest(msg_ids) m where m is not null
          except select unnest(c_msg) except select unnest(h_msg) except select unnest(rl_msg)) i;
    select s_ids || array_agg(r.msg_id), s_vts || array_agg(r.vt) into s_ids, s_vts
    from pgflow.set_vt_batch(q, u_msg, array_fill(p_unclaimed_visibility, array[cardinality(u_msg)])) r;
  end if;

  -- Read-past sizing: only a worker that gave a claim limit reads past, and only a read that did
  -- not claim all it read has anything to read past.
  if p_claim_limit is not null and coalesce(cardinality(c_msg), 0) < n_ids then
    next_qty := pgflow._read_past_qty(q, msg_ids, n_ids, sur_msg[1], sup_keys, p_read_qty,
                                      p_claim_limit);
  end if;

  -- Turns (0258_fair_window.sql): in window mode the claimed tasks' places in the queue go to the
  -- tasks waiting for their turn (but for the p_released the read made room for before reading),
  -- a short read releases what it lacked, and a shared queue's cursor follows the reads.
  -- Both looked up in one statement, so that a read on a queue one flow routes to (neither found:
  -- no task there waits for a turn) runs one statement for fairness, full or short.
  select (select c.claimed_msg_id from pgflow.queue_cursors c where c.queue_name = q),
         exists (select 1 from pgflow.fair_windows w where w.queue_name = q)
  into q_cursor, q_window;
  if q_cursor is not null or q_window then
    perform pgflow._take_turns(q, coalesce(cardinality(c_msg), 0) - _start_tasks.p_released, n_ids, p_read_qty,
                               (select max(m) from unnest(msg_ids) m));
  end if;

  -- Answer: one row per distinct id read, in id order.
  return query
  with ids as (select distinct m as mid from unnest(msg_ids) m where m is not null),
  claimed as (
    select * from unnest(c_msg, c_flow, c_run, c_step, c_idx, c_att)
      as c(mid, flow_slug, run_id, step_slug, task_index, attempt)
  )
  select i.mid, null::integer, null::timestamptz, nv.vt, null::jsonb, null::jsonb,
         case
           when c.mid is not null then 'claimed'
           when rl.mid is not null then 'rate_limited'
           when t.run_id is null then 'unknown'
           when sur.mid is not null then 'surplus'
           when h.mid is not null then 'handed_back'
           when not (sup_keys ? pgflow._pair_key(t.flow_slug, t.step_slug)) then 'unsupported'
           when t.status = 'started' then 'started'
           else 'ineligible'
         end,
         -- The task's identity whenever one owns the message (claimed or not), so the worker can
         -- say which flow and step an unclaimed message needs; input and attempt only if claimed.
         coalesce(c.flow_slug, t.flow_slug),
         coalesce(c.run_id, t.run_id),
         coalesce(c.step_slug, t.step_slug),
         coalesce(c.task_index, t.task_index),
         ti.input,
         c.attempt,
         next_qty
  from ids i
  left join claimed c on c.mid = i.mid
  left join unnest(s_ids, s_vts) as nv(mid, vt) on nv.mid = i.mid
  left join unnest(h_msg) as h(mid) on h.mid = i.mid
  left join unnest(sur_msg) as sur(mid) on sur.mid = i.mid
  left join unnest(rl_msg) as rl(mid) on rl.mid = i.mid
  -- A message not claimed: the task that owns it, if any, looked up per id (LIMIT 1: the pair is
  -- unique), as in the claim above: a join let stale statistics scan every task of the queue.
  left join lateral (
    select t.flow_slug, t.run_id, t.step_slug, t.task_index, t.status from pgflow.step_tasks t
    where c.mid is null and t.queue_name = q and t.message_id = i.mid
    limit 1
  ) t on true
  -- Build inputs: the handler input of a claimed task (pgflow._task_input, inlined: this runs once
  -- per claimed task).
  left join lateral (
    select x.input from pgflow._task_input(c.run_id, c.flow_slug, c.step_slug, c.task_index) x(input)
    where c.mid is not null
  ) ti on true
  order by i.mid;
end;
$$;

-- The claim of messages read by a separate call: every claimed message gets set_vt.
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
begin
  return query select c.msg_id, c.disposition, c.flow_slug, c.run_id, c.step_slug, c.task_index,
    c.input, c.attempt
  from pgflow._start_tasks(start_tasks.queue_name, start_tasks.msg_ids, start_tasks.worker_id,
    start_tasks.supported, null, null) c;
end;
$$;
