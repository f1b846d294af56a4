-- Retention. Pruning selects through task snapshots, so one flow's retention never reaches another
-- flow's messages or unknown messages in a shared archive.

-- Deletes terminal runs (completed, failed or cancelled) that ended before now() - retention, with
-- their tasks (and so their attempt history) and their own queue and archive rows, oldest first,
-- at most max_runs of them (NULL: all). Returns the number of runs deleted. A bounded call is one
-- short transaction: a first prune of months of history, or a daily one on a busy project, calls
-- it until it returns less than max_runs, each call committed, so no transaction holds millions of
-- row versions (and vacuum's horizon) at once. Runs another prune is deleting are skipped.
create or replace function pgflow.prune_data_older_than(retention interval, max_runs integer)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  old_runs uuid[];
  cutoff timestamptz;
  grp record;
begin
  if retention is null or retention < interval '0' then
    raise exception 'prune_data_older_than: retention must be a non-negative interval, got %', coalesce(retention::text, 'NULL')
      using errcode = '22023';
  end if;
  if max_runs is not null and max_runs < 1 then
    raise exception 'prune_data_older_than: max_runs must be at least 1 or NULL (all), got %', max_runs
      using errcode = '22023', hint = 'prune in batches of a few thousand runs, calling again until fewer come back';
  end if;
  cutoff := now() - retention;
  -- Oldest first along runs_started_at_idx: a bounded call stops after max_runs matches.
  select array_agg(o.run_id) into old_runs
  from (
    select r.run_id from pgflow.runs r
    where r.status in ('completed', 'failed', 'cancelled')
      and coalesce(r.completed_at, r.failed_at, r.cancelled_at) < cutoff
    order by r.started_at
    limit max_runs
    for update skip locked
  ) o;
  if old_runs is null then
    return 0;
  end if;
  for grp in
    select t.queue_name, array_agg(t.message_id) as ids
    from pgflow.step_tasks t
    where t.run_id = any (old_runs) and t.message_id is not null
    group by t.queue_name
  loop
    perform pgflow._purge_tracked_messages(grp.queue_name, grp.ids);
  end loop;
  delete from pgflow.step_tasks t where t.run_id = any (old_runs);
  delete from pgflow.step_states ss where ss.run_id = any (old_runs);
  delete from pgflow.runs r where r.run_id = any (old_runs);
  return cardinality(old_runs);
end;
$$;

-- The same, all at once in one transaction (the form from before batches).
create or replace function pgflow.prune_data_older_than(retention interval)
returns integer
language sql
volatile
set search_path = ''
as $$
  select pgflow.prune_data_older_than(retention, null::integer)
$$;

-- Queue-wide maintenance for one declared shared queue: deletes its archive rows archived before
-- now() - older_than, whoever sent them. Returns the number of rows deleted.
create or replace function pgflow.prune_shared_queue_archive(queue_name text, older_than interval)
returns bigint
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  deleted bigint;
begin
  if not exists (select 1 from pgflow.shared_queues s where s.queue_name = prune_shared_queue_archive.queue_name) then
    raise exception 'queue % is not a declared shared queue', coalesce(quote_literal(prune_shared_queue_archive.queue_name), 'NULL')
      using errcode = '22023', hint = 'use prune_data_older_than for flow data; this prunes one shared queue''s archive';
  end if;
  if older_than is null or older_than < interval '0' then
    raise exception 'prune_shared_queue_archive: older_than must be a non-negative interval' using errcode = '22023';
  end if;
  execute format('with gone as (delete from pgmq.%I where archived_at < now() - $1 returning 1) select count(*) from gone',
                 pgmq.format_table_name(prune_shared_queue_archive.queue_name, 'a'))
  into deleted using older_than;
  return deleted;
end;
$$;
