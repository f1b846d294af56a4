-- A queue's statistics that say it is empty while it holds a backlog.
--
-- PGMQ's read picks its messages in a CTE and updates them joined on msg_id. Autovacuum analyses a
-- drained queue and records pages but no live rows; the planner then reckons zero rows per page
-- however far the table grows, and plans that join as a walk over the queue's whole index for
-- every read: 35-50 ms to read 10 messages of a 40,000-message burst instead of 0.3 ms, for as long
-- as autovacuum takes to analyse again (up to autovacuum_naptime, a minute by default). Every
-- PGMQ reader of that queue pays it, the real extension included (same statement), so the product
-- cannot plan around it: read_and_claim calls this after a read that returned messages and was
-- slow, and the queue table is analysed when the planner believes in fewer rows than were just
-- read.
--
-- The one statement here that is not PGMQ's public API is ANALYZE of its queue table (statistics
-- only; no row is read or written). It is skipped, never waited for: on a table under 64 pages,
-- where the role may not analyse the table, when the table was analysed in the last second, when
-- another session is already doing it (a try lock on the queue), when the table's lock is held
-- (autovacuum), or when ANALYZE itself fails. Returns whether the table was analysed.
create or replace function pgflow._refresh_queue_statistics(queue_name text, rows_read integer)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  tname text := pgmq.format_table_name(_refresh_queue_statistics.queue_name, 'q');
  rel regclass := pg_catalog.to_regclass(format('pgmq.%I', tname));
  believed float8;
  -- The smallest table worth analysing: walking fewer pages costs well under a millisecond, and a
  -- worker polling a quiet queue (its reads are slow because they wait) would otherwise analyse
  -- it after every time autovacuum found it empty.
  min_pages constant integer := 64;
begin
  if rel is null then
    return false;
  end if;
  -- The planner's own estimate (reltuples per page times the pages the table has now). Never
  -- analysed or vacuumed (reltuples < 0, or no pages counted) it estimates from the row width,
  -- which is not the trouble. Nor is a small table (min_pages).
  select case when c.relpages > 0 and c.reltuples >= 0 and p.pages >= min_pages
              then c.reltuples / c.relpages * p.pages
         end
  into believed
  from pg_catalog.pg_class c
  cross join lateral (
    select pg_catalog.pg_relation_size(c.oid)
           / pg_catalog.current_setting('block_size')::integer as pages
  ) p
  where c.oid = rel and pg_catalog.pg_has_role(c.relowner, 'USAGE');
  if believed is null or believed >= _refresh_queue_statistics.rows_read then
    return false;
  end if;
  if greatest(pg_catalog.pg_stat_get_last_analyze_time(rel),
              pg_catalog.pg_stat_get_last_autoanalyze_time(rel))
     > clock_timestamp() - interval '1 second' then
    return false;
  end if;
  if not pg_catalog.pg_try_advisory_xact_lock(
           pg_catalog.hashtext('pgflow.analyze:' || _refresh_queue_statistics.queue_name)) then
    return false;
  end if;
  begin
    -- ANALYZE waits for autovacuum's lock; this worker's batch must not.
    execute format('lock table pgmq.%I in share update exclusive mode nowait', tname);
    -- The two columns the read filters and orders by; the row count comes with any ANALYZE.
    execute format('analyze pgmq.%I (msg_id, vt)', tname);
  exception
    when lock_not_available then
      return false;
    -- This is an optimisation inside the worker's read: an error of ANALYZE's own must not fail
    -- the read, or the worker would retry the same read and fail it again. A cancel or a
    -- statement_timeout (query_canceled) is not caught by OTHERS and fails the read as it would
    -- anywhere; ANALYZE reads a bounded sample (300 × the statistics target rows), so it takes
    -- well under a second on any queue.
    when others then
      return false;
  end;
  return true;
end;
$$;
