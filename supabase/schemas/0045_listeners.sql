-- Who is waiting for a notification, so that a transaction notifies only when someone is.
--
-- Postgres serialises every committing transaction that sent a NOTIFY behind one lock for the
-- whole server (the notification queue's, held across the commit's WAL flush), so a NOTIFY on
-- every completion makes concurrent workers commit one at a time. Yet under load nobody waits:
-- busy workers read again at once, and most runs have no watcher. So a session that waits for a
-- channel says so here (pgflow.listen_start), and pgflow._announce sends a channel's notification
-- only while some session waits for it.
--
-- The race this must not lose: a sender looks here before the waiter's row is visible and so
-- does not notify, but commits only after the waiter's next read, which then misses the work;
-- the waiter would sleep through it. The barrier closes it: a sender holds a shared advisory lock
-- on the channel's bucket from before it looks until its transaction ends, and a waiter, after
-- its row is committed, takes that lock exclusively for an instant (pgflow.listen_barrier).
-- Every sender that looked too early has then committed, so a read made after the barrier sees
-- its work. A sender that cannot take the shared lock (a barrier holds it for that instant, or
-- anyone else holds it) notifies anyway: a notification too many is never wrong.
--
-- Unlogged: the rows describe live sessions, which a crash ends anyway (the table is emptied on
-- crash recovery, and every listener registers again when it reconnects), and writing them costs
-- no WAL flush.
create unlogged table if not exists pgflow.listeners (
  channel text not null,
  -- The backend of the waiting session; rows of backends that have ended are removed by the
  -- next listen_start.
  pid integer not null,
  since timestamptz not null default now(),
  constraint listeners_pkey primary key (channel, pid)
);

-- Sends p_payload on p_channel (at commit, like pg_notify) if a session waits for it, as
-- pgflow._notify_needed decides (0090_inline_helpers.sql: the barrier's lock, then the listeners).
-- The run-event trigger (pgflow._run_changed, 0850_run_events.sql) decides the same way.
create or replace function pgflow._announce(p_channel text, p_payload text)
returns void
language plpgsql
volatile
-- Runs inside whatever changed a run or sent a message, as whichever role did; the listeners
-- table is readable by the owner only (it names the runs being watched).
security definer
set search_path = ''
as $$
begin
  if (select n from pgflow._notify_needed(p_channel) n) then
    perform pg_notify(p_channel, p_payload);
  end if;
end;
$$;

-- The channels pgflow notifies: a queue's work (pgflow_queue:<queue>) and a run's changes
-- (pgflow_run:<run id>), within Postgres's 63-byte limit on channel names.
create or replace function pgflow._check_listen_channels(p_channels text[])
returns void
language plpgsql
immutable
set search_path = ''
as $$
declare
  bad text;
begin
  select c into bad from unnest(p_channels) c
  where c is null or c !~ '^pgflow_(queue|run):.' or octet_length(c) > 63
  limit 1;
  if bad is not null or p_channels is null then
    raise exception 'not a pgflow notification channel: %', coalesce(quote_literal(bad), 'NULL')
      using errcode = '22023',
            hint = 'Channels are pgflow_queue:<queue> or pgflow_run:<run id>, at most 63 bytes.';
  end if;
end;
$$;

-- Registers the calling session as waiting for notifications on p_channels; the session LISTENs
-- on them itself. Then call pgflow.listen_barrier, in a later transaction, before reading what the
-- notifications would announce.
create or replace function pgflow.listen_start(p_channels text[])
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform pgflow._check_listen_channels(p_channels);
  -- Rows left by sessions that ended without listen_stop (a crash, a lost connection) would
  -- only make senders notify for nobody; they go here rather than on the senders' path, once per
  -- session (a client watching many runs calls this for each), in one pass over the backends.
  if current_setting('pgflow.listeners_swept', true) is distinct from 'yes' then
    delete from pgflow.listeners l
    where l.pid not in (select a.pid from pg_stat_get_activity(null) a where a.pid is not null);
    perform set_config('pgflow.listeners_swept', 'yes', false);
  end if;
  insert into pgflow.listeners (channel, pid)
  select distinct c, pg_backend_pid() from unnest(p_channels) c
  on conflict on constraint listeners_pkey do nothing;
end;
$$;

-- The calling session no longer waits for p_channels.
create or replace function pgflow.listen_stop(p_channels text[])
returns void
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  perform pgflow._check_listen_channels(p_channels);
  delete from pgflow.listeners l where l.pid = pg_backend_pid() and l.channel = any (p_channels);
end;
$$;

-- Waits until every sender that may have missed this session's listen_start has committed: true
-- then, and a read made from now on sees all the work no notification will announce. False when a
-- channel's bucket stayed taken for about 20 ms (a long transaction that sent work, or a lock
-- held by someone else): call it again later, and read again when it returns true. Never waits
-- for the lock itself: a waiting exclusive request would hold back every sender queued behind it.
create or replace function pgflow.listen_barrier(p_channels text[])
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  bucket integer;
  tries integer;
  -- A sender holds the lock for the rest of its transaction: a few milliseconds, unless it is a
  -- long one. 20 tries 1 ms apart wait out the short ones and give up on the rest.
  max_tries constant integer := 20;
  pause_seconds constant float8 := 0.001;
begin
  perform pgflow._check_listen_channels(p_channels);
  for bucket in select distinct pgflow._listen_bucket(c) from unnest(p_channels) c order by 1 loop
    tries := 0;
    while not pg_try_advisory_lock(pgflow._listen_lock_class(), bucket) loop
      tries := tries + 1;
      if tries > max_tries then
        return false;
      end if;
      perform pg_sleep(pause_seconds);
    end loop;
    perform pg_advisory_unlock(pgflow._listen_lock_class(), bucket);
  end loop;
  return true;
end;
$$;
