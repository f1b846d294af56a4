-- Fairness on a shared queue (docs/flow-control.md). A queue is read first in, first out, once: a
-- transaction that sends 20,000 tasks puts every other flow of the queue behind all of them. So
-- such a transaction puts the queue in window mode: it sends the first pgflow._fair_window() of
-- its tasks and creates the rest 'waiting' (no message; limit_scope and rate_scope NULL, which is
-- what tells them from tasks waiting for a limit). While the queue is in window mode (a row in
-- pgflow.fair_windows) every new task of an unlimited step without a start delay waits the same
-- way, whatever its flow, and claims release waiting tasks in turn across groups (a flow
-- version's step): priority first, then each group's oldest before any group's second, then age.
-- A claim releases before it reads what its read will take past the visible backlog
-- (pgflow._release_before_read), so the tasks whose turn it is are read by that claim and a
-- newcomer's task waits behind the visible backlog at most, not behind the whole backlog.
--
-- The window is not counted from task rows: a count over a partial index that every task enters
-- and leaves walks dead entries until vacuum, and costs every created task. It is kept by
-- construction instead (a claim releases about what it takes), and grows only when a read comes back short
-- while tasks wait (it then releases what it lacked), so it follows what the readers ask for.
-- Outside window mode a created task pays one primary-key probe of an empty table and a
-- transaction-local counter; a claim pays the same probe. A flow alone on its queue never enters
-- window mode (pgflow._window_room).
--
-- It never holds work back from a reader with nothing to do: a short read releases what it lacked,
-- and pgflow.tick() releases waiting tasks of a queue that left window mode while a task was being
-- parked. Messages that leave the queue unclaimed (a cancel) shrink the window until a short read
-- refills it.

-- How many messages one transaction sends to a queue before the rest of its tasks wait: the
-- window a newcomer can wait behind. Small, since the window only has to cover the readers' reads
-- between two claims (each claim releases what it took, each short read what it lacked).
create or replace function pgflow._fair_window()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 32
$$;

-- The queues in window mode. A row exists only while the queue has tasks waiting for their turn;
-- the claim that finds none left deletes it. visible: the queue's visible backlog (messages sent
-- and not yet read) as the last claim that released before its read left it
-- (pgflow._release_before_read); a queue entering window mode starts from its window (or from
-- its depth, pgflow._note_depth). An estimate: claims that release after their reads leave it as
-- it is (each releases what it took, so the backlog stays about where it was), and the next claim
-- that releases before its read counts it again.
create table if not exists pgflow.fair_windows (
  queue_name text not null,
  since timestamptz not null default now(),
  visible integer not null default pgflow._fair_window(),
  constraint fair_windows_pkey primary key (queue_name),
  constraint fair_windows_visible_check check (visible >= 0)
);

-- The tasks waiting for their queue's turn, by group, in release order: priority (higher first,
-- hence its negation), age, then the task's key, so that a position in a group can be named and
-- a scan started after it (pgflow._release_turn_groups). Partial: empty while no queue is in
-- window mode, and a limited task never enters it.
create index if not exists step_tasks_turn_idx
  on pgflow.step_tasks (queue_name, flow_slug, step_slug, (- priority), queued_at, run_id, task_index)
  where status = 'waiting' and limit_scope is null and rate_scope is null;

-- The queues at least two flows route steps to, each with the highest message id a claim has read
-- from it (advanced now and then, see pgflow._take_turns). PGMQ gives a queue's messages
-- increasing ids, so a sender that just got message id m knows the queue holds about
-- m - claimed_msg_id messages ahead of the readers, with one primary-key probe and no count: a
-- backlog built by many small transactions (one start_flow per request) puts the queue in window
-- mode as one big transaction does. The estimate errs high only: the cursor lags by less than
-- pgflow._cursor_step() messages, and messages that left the queue unread (a cancel) count until
-- a read passes them. A queue without a row has one flow, no one to take turns with: its tasks are
-- always sent, and this probe is all the fairness it pays for. Rows are kept by pgflow.add_step
-- and pgflow.delete_flow_and_data.
create table if not exists pgflow.queue_cursors (
  queue_name text not null,
  claimed_msg_id bigint not null default 0,
  constraint queue_cursors_pkey primary key (queue_name)
);

-- How far a queue's cursor may lag behind the reads before a claim moves it: one row update per
-- this many messages read, not one per claim, so several workers rarely touch the row at once
-- (and never wait for each other there: see pgflow._take_turns).
create or replace function pgflow._cursor_step()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 16
$$;

-- Keeps pgflow.queue_cursors: a row for each queue that at least two flows route steps to, none
-- for the others. A new row starts at 0, so on a queue that already sent messages the first
-- sends over-estimate its depth until a claim reads from it. A queue that loses its row (one of
-- its two flows deleted) has its waiting turns released here, in order, in batches.
create or replace function pgflow._sync_queue_cursor(p_queue text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if (select count(distinct s.flow_slug) from pgflow.steps s where s.queue_name = p_queue) >= 2 then
    insert into pgflow.queue_cursors (queue_name) values (p_queue) on conflict do nothing;
  else
    delete from pgflow.queue_cursors c where c.queue_name = p_queue;
    -- Its one flow has no one to take turns with: what waits for a turn is sent now, as every new
    -- task of a queue without a cursor is. Claims on a queue with neither a cursor nor a window
    -- release nothing (they pay no fairness), so nothing would release these later but a tick.
    if found then
      while pgflow._release_turns(p_queue, 1000) > 0 loop
      end loop;
    end if;
  end if;
end;
$$;

-- How many of p_count new tasks for queue p_queue to send now (room); the others wait for their
-- turn. cursor is the queue's cursor (null on a queue only one flow routes to, which never waits:
-- room is always p_count). On a shared queue: none while it is in window mode; otherwise all of
-- them while this transaction has sent at most pgflow._fair_window() to it (counted in a
-- transaction-local setting, one queue at a time: a transaction alternating between queues
-- restarts its count), and the transaction that crosses the window puts the queue in window mode.
-- After sending, the caller gives the highest message id it got to pgflow._note_depth.
create or replace function pgflow._window_room(p_queue text, p_count integer,
                                               out room integer, out cursor bigint)
language plpgsql
volatile
set search_path = ''
as $$
declare
  sent text;
  n integer := p_count;
begin
  room := p_count;
  select c.claimed_msg_id into cursor from pgflow.queue_cursors c where c.queue_name = p_queue;
  if cursor is null then
    return;
  end if;
  if exists (select 1 from pgflow.fair_windows w where w.queue_name = p_queue) then
    room := 0;
  else
    sent := pg_catalog.current_setting('pgflow.window_sent', true);
    if sent is not null and split_part(sent, chr(31), 1) = p_queue then
      n := n + split_part(sent, chr(31), 2)::integer;
    end if;
    perform pg_catalog.set_config('pgflow.window_sent', p_queue || chr(31) || n, true);
    if n > pgflow._fair_window() then
      insert into pgflow.fair_windows (queue_name) values (p_queue) on conflict do nothing;
      room := greatest(0, p_count - (n - pgflow._fair_window()));
    end if;
  end if;
  -- Tasks parked here may sit before the positions this transaction's releases recorded on this
  -- queue (pgflow._release_turns): forget those, so its next release looks at every group from
  -- its start.
  if room < p_count and pg_catalog.current_setting('pgflow.turn_floors', true) <> '' then
    perform pg_catalog.set_config('pgflow.turn_floors',
      (pg_catalog.current_setting('pgflow.turn_floors', true)::jsonb - p_queue)::text, true);
  end if;
end;
$$;

-- After sending to a shared queue whose cursor was p_cursor (from pgflow._window_room; null for
-- a queue one flow routes to) up to message id p_msg_id: a queue holding more than a window ahead
-- of its readers enters window mode, so the next tasks wait for their turn instead of lining up
-- behind the backlog.
create or replace function pgflow._note_depth(p_queue text, p_cursor bigint, p_msg_id bigint)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if p_cursor is not null and p_msg_id - p_cursor > pgflow._fair_window() then
    insert into pgflow.fair_windows (queue_name, visible) values (p_queue, p_msg_id - p_cursor)
    on conflict do nothing;
  end if;
end;
$$;

-- Whether queue p_queue has tasks waiting for their turn (one probe of a partial index).
create or replace function pgflow._turn_waiting(p_queue text)
returns boolean
language sql
stable
set search_path = ''
as $$
  select exists (select 1 from pgflow.step_tasks t
                 where t.queue_name = p_queue and t.status = 'waiting'
                   and t.limit_scope is null and t.rate_scope is null)
$$;

-- Releases up to p_count tasks of queue p_queue waiting for their turn: priority (higher first),
-- then each group's n-th task before any group's (n+1)-th, then age. Each is made queued and its
-- message sent (no delay: a step with a start delay never waits for its turn); the queue is
-- announced. A task another transaction holds (a concurrent release, a cancel) is skipped. When
-- none is left waiting the queue leaves window mode. Returns how many were released.
--
-- A transaction that releases again (a drain inside one transaction, a DO block) would walk, in
-- each group, every index entry of the tasks it released before: their entries stay until the
-- transaction ends, and walking them from each group's start makes such a drain quadratic. So
-- each release records, per group, the last position it released (a transaction-local setting,
-- pgflow.turn_floors), and the next release of the transaction starts each known group after it,
-- without looking for other groups; only a release those groups cannot fill looks for all of
-- them from the start. A transaction that parks tasks forgets its positions on that queue
-- (pgflow._window_room),
-- so its own new tasks are not passed over; a task another transaction parks meanwhile at an
-- earlier position is released when the known groups run short, as is a task skipped while
-- another transaction held it.
create or replace function pgflow._release_turns(p_queue text, p_count integer)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  floors jsonb := nullif(pg_catalog.current_setting('pgflow.turn_floors', true), '')::jsonb;
  done integer := 0;
begin
  if p_count is null or p_count <= 0 then
    return 0;
  end if;
  if floors -> p_queue is not null then
    done := pgflow._release_turn_groups(p_queue, p_count, floors -> p_queue, false);
  end if;
  if done < p_count then
    floors := nullif(pg_catalog.current_setting('pgflow.turn_floors', true), '')::jsonb;
    done := done + pgflow._release_turn_groups(p_queue, p_count - done, floors -> p_queue, true);
  end if;
  if done = 0 then
    -- Nothing left to take turns: the queue leaves window mode. A task parked by a transaction
    -- that has not committed yet is released by the next short read or by pgflow.tick().
    -- The row is deleted only if no other transaction holds it (skip locked), never waited for:
    -- the other holder is a claim deleting it too. Waiting here was one half of a deadlock
    -- between two claims: a claim reaches this delete holding the row locks of the tasks its
    -- release locked (with READ COMMITTED, a row released and committed by a third claim
    -- since this statement's snapshot is locked in its new version, messages visible), while
    -- the claim that deleted the row first goes on to claim one of those tasks.
    if not pgflow._turn_waiting(p_queue) then
      delete from pgflow.fair_windows w
      where w.queue_name = p_queue
        and w.ctid = (select w2.ctid from pgflow.fair_windows w2 where w2.queue_name = p_queue
                      for update skip locked);
    end if;
    return 0;
  end if;
  perform pgflow._announce('pgflow_queue:' || p_queue, '');
  return done;
end;
$$;

-- One release of pgflow._release_turns: up to p_count tasks of queue p_queue, from the groups
-- p_floors names (flow and step joined by chr(31), each with the last position released there)
-- when p_discover is false, else from every group with waiting tasks (one index probe per group,
-- a skip scan), each after its position in p_floors if it has one. Records the positions it
-- released in pgflow.turn_floors. Returns how many it released.
--
-- Every read here walks step_tasks_turn_idx in its order and stops at the LIMIT, or takes rows by
-- row version. Statistics taken before a backlog say the index is empty: a plan made on them
-- would scan it in full (1,500 rows read to release 10, tests/sql/claim_plan_test.ts) through a
-- bitmap, or through the index filtered by row version; so bitmap and seq scans are priced out
-- here (as seq scans are in the claim, which calls this; pgflow.tick() calls it too), and the rows
-- picked are locked by row version alone.
create or replace function pgflow._release_turn_groups(p_queue text, p_count integer, p_floors jsonb,
                                                       p_discover boolean)
returns integer
language plpgsql
volatile
set search_path = ''
set enable_bitmapscan = off
set enable_seqscan = off
as $$
declare
  rel record;
  ids bigint[];
  floors jsonb;
begin
  with recursive found as (
    -- The distinct groups with waiting tasks, one index probe each (a skip scan).
    (select t.flow_slug, t.step_slug from pgflow.step_tasks t
     where p_discover and t.queue_name = p_queue and t.status = 'waiting' and t.limit_scope is null
       and t.rate_scope is null
     order by t.flow_slug, t.step_slug limit 1)
    union all
    select nx.flow_slug, nx.step_slug from found g
    cross join lateral (
      select t.flow_slug, t.step_slug from pgflow.step_tasks t
      where t.queue_name = p_queue and t.status = 'waiting' and t.limit_scope is null and t.rate_scope is null
        and (t.flow_slug, t.step_slug) > (g.flow_slug, g.step_slug)
      order by t.flow_slug, t.step_slug limit 1
    ) nx
  ),
  groups as (
    select f.flow_slug, f.step_slug from found f
    union all
    select split_part(k, chr(31), 1), split_part(k, chr(31), 2)
    from jsonb_object_keys(coalesce(p_floors, '{}'::jsonb)) k
    where not p_discover
  ),
  bounded as (
    -- Each group's last released position, or one before any task (priorities are bounded far
    -- inside the integer range).
    select g.flow_slug, g.step_slug,
           coalesce((f.pos ->> 0)::integer, -2147483647) as fp,
           coalesce((f.pos ->> 1)::timestamptz, '-infinity'::timestamptz) as fq,
           coalesce((f.pos ->> 2)::uuid, '00000000-0000-0000-0000-000000000000'::uuid) as fr,
           coalesce((f.pos ->> 3)::integer, -1) as fi
    from groups g
    left join lateral (select p_floors -> (g.flow_slug || chr(31) || g.step_slug) as pos) f on true
  ),
  ranked as (
    select c.tid, c.priority, c.queued_at, c.turn, c.run_id, c.step_slug, c.task_index
    from bounded g
    -- Each group's first p_count after its position, in its index order, numbered after the
    -- LIMIT: a window function over the scan itself could be planned to read the whole group.
    cross join lateral (
      select x.*, row_number() over (order by - x.priority, x.queued_at, x.run_id, x.task_index) as turn
      from (
        select t.ctid as tid, t.priority, t.queued_at, t.run_id, t.step_slug, t.task_index
        from pgflow.step_tasks t
        where t.queue_name = p_queue and t.status = 'waiting' and t.limit_scope is null and t.rate_scope is null
          and t.flow_slug = g.flow_slug and t.step_slug = g.step_slug
          and (- t.priority, t.queued_at, t.run_id, t.task_index) > (g.fp, g.fq, g.fr, g.fi)
        order by - t.priority, t.queued_at, t.run_id, t.task_index
        limit p_count
      ) x
    ) c
  ),
  picked as (
    select r.tid from ranked r
    order by r.priority desc, r.turn, r.queued_at, r.run_id, r.step_slug, r.task_index
    limit p_count
  ),
  locked as (
    select t.ctid as tid, t.flow_slug, t.run_id, t.step_slug, t.task_index, t.priority, t.queued_at, t.status
    from pgflow.step_tasks t
    -- By row version only (a TID scan): a join on the key, or the waiting conditions here, could
    -- be planned as a walk over every waiting task. A row changed since it was picked has a new
    -- row version, which FOR UPDATE re-checks against the row version asked for and leaves out.
    where t.ctid = any (array(select p.tid from picked p))
    for update of t skip locked
  ),
  live as (
    select * from locked l where l.status = 'waiting'
  )
  select array_agg(l.tid order by l.priority desc, l.queued_at, l.run_id, l.step_slug, l.task_index) as tids,
         -- The body is informational only: the claim reads ids, never bodies.
         array_agg(jsonb_build_object('flow_slug', l.flow_slug, 'run_id', l.run_id,
                                      'step_slug', l.step_slug, 'task_index', l.task_index)
                   order by l.priority desc, l.queued_at, l.run_id, l.step_slug, l.task_index) as msgs,
         -- The last position released in each group.
         (select jsonb_object_agg(z.grp, z.pos) from (
            select distinct on (v.flow_slug, v.step_slug) v.flow_slug || chr(31) || v.step_slug as grp,
                   jsonb_build_array(- v.priority, v.queued_at, v.run_id, v.task_index) as pos
            from live v
            order by v.flow_slug, v.step_slug, - v.priority desc, v.queued_at desc, v.run_id desc,
                     v.task_index desc) z) as last
  into rel
  from live l;
  if rel.tids is null then
    return 0;
  end if;
  floors := coalesce(nullif(pg_catalog.current_setting('pgflow.turn_floors', true), '')::jsonb, '{}'::jsonb);
  perform pg_catalog.set_config('pgflow.turn_floors',
    jsonb_set(floors, array[p_queue], coalesce(floors -> p_queue, '{}'::jsonb) || rel.last)::text, true);
  -- Ids are assigned in array order within one send_batch, so sorting them pairs them up.
  select array_agg(id order by id) into ids from pgmq.send_batch(p_queue, rel.msgs, 0) as id;
  -- For a release before a claim's read, the first and last ids it sent (pgflow._take_turns).
  if pg_catalog.current_setting('pgflow.turn_before', true) = p_queue then
    perform pg_catalog.set_config('pgflow.turn_ids',
      coalesce(nullif(split_part(pg_catalog.current_setting('pgflow.turn_ids', true), ' ', 1), ''),
               ids[1]::text) || ' ' || ids[cardinality(ids)], true);
  end if;
  -- One row at a time by its row version (locked above, so it has not moved).
  for i in 1 .. cardinality(ids) loop
    update pgflow.step_tasks t set status = 'queued', message_id = ids[i] where t.ctid = rel.tids[i];
  end loop;
  return cardinality(ids);
end;
$$;

-- The class of the release-before-read locks: the bytes 'pgfT', in the two-key form of advisory
-- locks (see pgflow._listen_lock_class, 'pgfw', for the other classes).
create or replace function pgflow._turn_lock_class()
returns integer
language sql
immutable
set search_path = ''
as $$
  select 1885824596
$$;

-- Before a claim's read of p_depth messages on queue p_queue in window mode: releases waiting
-- tasks first, so that the tasks whose turn it is are read by this very claim, rather than
-- released after its read behind what is already visible. It releases what the read will take
-- beyond the visible backlog (p_depth less pgflow.fair_windows.visible), so the read empties the
-- backlog and a newcomer's first task, first in turn order, is among what it reads. A backlog a
-- read long or more gets nothing released before the read, which then shrinks it.
-- pgflow._take_turns, after the read, counts the backlog again: from the highest message id read
-- against the ids this release sent (recorded by pgflow._release_turn_groups) when the read
-- reached them, else from the estimate less what was read; a short read left none.
--
-- One claim per queue at a time: the queue's turn lock (a transaction advisory lock) is held from
-- here to the claim's commit, and claims in window mode wait for it (pgflow.complete_and_claim
-- after its completions: why that closes no cycle is said there). Why: the release locks
-- the tasks it picks with skip locked and, under READ COMMITTED, also a task another release
-- made queued and committed since its snapshot, left out but locked until the transaction ends
-- (docs/flow-control.md, "Locks"). Two claims each releasing before their reads could each hold
-- such a lock on a task the other read and wait for each other. Serialised, a release's snapshot
-- is taken after the previous holder committed, and every release in window mode is one of them
-- (pgflow.tick() aside), so no such lock is taken. The cost: claims on one queue in window mode
-- run one at a time from their release to their commit (a millisecond or two each).
--
-- Returns what the caller counts as released for its claim (p_depth: what it takes needs no
-- release after the read), or NULL when the queue is not in window mode.
create or replace function pgflow._release_before_read(p_queue text, p_depth integer)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  backlog integer;
  n integer;
begin
  perform pg_catalog.pg_advisory_xact_lock(pgflow._turn_lock_class(), pg_catalog.hashtext(p_queue));
  -- The claim's start, for the tasks it starts (pgflow._start_tasks): it may have waited here.
  perform pg_catalog.set_config('pgflow.claim_start', pg_catalog.clock_timestamp()::text, true);
  -- Read under the lock: the claim that held it may have moved the estimate, or left window mode.
  select w.visible into backlog from pgflow.fair_windows w where w.queue_name = p_queue;
  if not found then
    return null;
  end if;
  perform pg_catalog.set_config('pgflow.turn_before', p_queue, true);
  perform pg_catalog.set_config('pgflow.turn_ids', '', true);
  n := pgflow._release_turns(p_queue, greatest(0, p_depth - backlog));
  perform pg_catalog.set_config('pgflow.turn_before', p_queue || chr(31) || backlog || chr(31) || n,
                                true);
  return p_depth;
end;
$$;

-- After a claim on queue p_queue that took p_claimed tasks from a read of p_read messages out of
-- p_depth asked for, the highest message id read being p_top: in window mode, release as many
-- waiting tasks as were claimed, so the window keeps its length; and whenever the read came back
-- short while tasks wait, release what it lacked, so a reader never finds the queue empty while
-- work waits for its turn. On a shared queue, the cursor moves to p_top once it lags by
-- pgflow._cursor_step() or more; a claim that finds the row locked by another claim leaves it (the
-- other moves it), so claims never wait for each other here. Called only for a queue with a
-- cursor row or a window (pgflow._start_tasks, pgflow.read_and_claim): tasks wait for a turn only
-- there, and a queue one flow routes to pays its claims nothing for fairness but the probes that
-- find neither.
create or replace function pgflow._take_turns(p_queue text, p_claimed integer, p_read integer, p_depth integer,
                                              p_top bigint default null)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  n integer := 0;
  before text;
  ids text;
begin
  if p_top is not null then
    update pgflow.queue_cursors c set claimed_msg_id = p_top
    where c.queue_name = p_queue
      and c.ctid = (select c2.ctid from pgflow.queue_cursors c2
                    where c2.queue_name = p_queue and c2.claimed_msg_id <= p_top - pgflow._cursor_step()
                    for update skip locked);
  end if;
  if coalesce(p_read, 0) < coalesce(p_depth, 0) and pgflow._turn_waiting(p_queue) then
    n := p_depth - coalesce(p_read, 0);
  end if;
  if p_claimed > 0 and exists (select 1 from pgflow.fair_windows w where w.queue_name = p_queue) then
    n := n + p_claimed;
  end if;
  if n > 0 then
    n := pgflow._release_turns(p_queue, n);
  end if;
  before := pg_catalog.current_setting('pgflow.turn_before', true);
  if split_part(before, chr(31), 1) = p_queue then
    -- After a release before the read (pgflow._release_before_read): the visible backlog now.
    ids := pg_catalog.current_setting('pgflow.turn_ids', true);
    perform pg_catalog.set_config('pgflow.turn_before', '', true);
    update pgflow.fair_windows w
    set visible = case
          -- A short read took everything visible; what was released after it is the backlog.
          when coalesce(p_read, 0) < coalesce(p_depth, 0) then n
          -- The read reached this claim's own release, so it took everything visible before it
          -- (in id order; a message another reader holds is not visible): what it left of its
          -- own release, at most the ids past the highest read (none when the read went past
          -- it: another transaction sent and committed since). Ids between them that are
          -- another's (sent or held by another claim) are not counted: an estimate that errs
          -- low only puts a newcomer behind a few more messages, one that errs high would hold
          -- its release back.
          when ids <> '' and p_top >= split_part(ids, ' ', 1)::bigint
            then greatest(0, least(split_part(before, chr(31), 3)::integer,
                                   split_part(ids, ' ', 2)::bigint - p_top))
          -- It did not: the backlog it was told of, less what it read, and all it released.
          else greatest(0, split_part(before, chr(31), 2)::integer
                           + split_part(before, chr(31), 3)::integer - p_read)
        end
    where w.queue_name = p_queue
      and w.ctid = (select w2.ctid from pgflow.fair_windows w2 where w2.queue_name = p_queue
                    for update skip locked);
  end if;
  return n;
end;
$$;
