-- PGMQ-compatible SQL: the public surface of PGMQ 1.5.1 (its functions, their signatures and
-- behaviour, its tables and types as callers see them), for Postgres servers where
-- `create extension pgmq` is not available; tests/pgmq/ runs the same conformance suite on it and
-- on the real extension. Callers (pgflow, the PGMQ client libraries, the Supabase Queues UI) use it
-- unchanged.
--
-- There is no extension here, so nothing is ever an extension member: `detach_archive` does
-- nothing, `drop_queue` simply drops, and dropping the schema removes everything. Never create a
-- pg_extension row named pgmq: the real extension could not be installed next to this schema.
--
-- src/cli/db/pgmq.ts installs it (installPgmq; `pgflow migrate --pgmq-sql`): once, as one
-- simple-protocol script, and only into a database that has no `pgmq` schema. Every statement is
-- nevertheless safe to re-run.
--
-- Conventions kept from PGMQ, because callers depend on them:
-- * every function is VOLATILE, SECURITY INVOKER, without `set search_path`, and schema-qualifies
--   everything it touches;
-- * parameter names are API (clients call with named arguments);
-- * queue names reach SQL only through format('%I'), after the invalid-character check.

create schema if not exists pgmq;

-- The queue registry. The name is kept exactly as the caller wrote it (no lowercasing), while the
-- tables use the lowercased name; PGMQ has no primary key here, only the unique constraint.
create table if not exists pgmq.meta (
  queue_name varchar not null unique,
  is_partitioned boolean not null,
  is_unlogged boolean not null,
  created_at timestamptz not null default now()
);

-- Composite types, with PGMQ's attribute order (callers may `select *` from them).
do $types$
begin
  if to_regtype('pgmq.message_record') is null then
    create type pgmq.message_record as (
      msg_id bigint,
      read_ct integer,
      enqueued_at timestamptz,
      vt timestamptz,
      message jsonb,
      headers jsonb
    );
  end if;
  if to_regtype('pgmq.queue_record') is null then
    create type pgmq.queue_record as (
      queue_name varchar,
      is_partitioned boolean,
      is_unlogged boolean,
      created_at timestamptz
    );
  end if;
  if to_regtype('pgmq.metrics_result') is null then
    create type pgmq.metrics_result as (
      queue_name text,
      queue_length bigint,
      newest_msg_age_sec integer,
      oldest_msg_age_sec integer,
      total_messages bigint,
      scrape_time timestamptz,
      queue_visible_length bigint
    );
  end if;
end
$types$;

-- ---------------------------------------------------------------------------------------------
-- Naming helpers
-- ---------------------------------------------------------------------------------------------

-- The only normalisation is lower(); the character check lives here so that every function taking
-- a queue name applies it before any identifier is built. NULL in gives NULL out (format('%I')
-- later reports it).
create or replace function pgmq.format_table_name(queue_name text, prefix text)
returns text
language plpgsql
as $fn$
begin
  if strpos(queue_name, '$') > 0
    or strpos(queue_name, ';') > 0
    or strpos(queue_name, '--') > 0
    or strpos(queue_name, '''') > 0
  then
    -- The text (with its literal backslash) is PGMQ's own, so callers matching on it keep working.
    raise exception 'queue name contains invalid characters: $, ;, --, or \''';
  end if;
  return lower(prefix || '_' || queue_name);
end
$fn$;

-- Length check only (characters, not bytes); NULL passes. 47 characters is the real limit: the
-- `>= 48` test and its message are PGMQ 1.5.1's.
create or replace function pgmq.validate_queue_name(queue_name text)
returns void
language plpgsql
as $fn$
begin
  if length(queue_name) >= 48 then
    raise exception 'queue name is too long, maximum length is 48 characters';
  end if;
end
$fn$;

-- Always false: nothing is a member of an extension here. Kept because PGMQ has it.
create or replace function pgmq._belongs_to_pgmq(table_name text)
returns boolean
language sql
as $fn$
  select false
$fn$;

-- ---------------------------------------------------------------------------------------------
-- Creating and dropping queues
-- ---------------------------------------------------------------------------------------------

-- Shared body of create_non_partitioned and create_unlogged. Not part of PGMQ's API: the leading
-- underscore marks it internal, like PGMQ's own helpers.
create or replace function pgmq._create_queue(queue_name text, unlogged boolean)
returns void
language plpgsql
as $fn$
declare
  -- Computed before validation, as PGMQ does: a long name with a `$` gets the character error.
  qtable text := pgmq.format_table_name(queue_name, 'q');
  atable text := pgmq.format_table_name(queue_name, 'a');
begin
  perform pgmq.validate_queue_name(queue_name);
  -- With multibyte characters a name under 48 characters can still overflow the 63-byte identifier
  -- limit; PostgreSQL would truncate (1.4) or fail obscurely (1.5), so refuse it clearly instead.
  if octet_length('archived_at_idx_' || queue_name) > 63
    or octet_length(qtable || '_msg_id_seq') > 63
  then
    raise exception 'queue name is too long, its table and index names would exceed 63 bytes';
  end if;
  -- Serialises concurrent create/drop of one queue (CREATE TABLE IF NOT EXISTS races on the
  -- catalog). Same key as PGMQ 1.5.2+, so the clone and the extension would serialise together.
  perform pg_advisory_xact_lock(hashtext('pgmq.queue_' || queue_name));

  execute format(
    'create %s table if not exists pgmq.%I (
       msg_id bigint primary key generated always as identity,
       read_ct integer not null default 0,
       enqueued_at timestamptz not null default now(),
       vt timestamptz not null,
       message jsonb,
       headers jsonb
     )',
    case when unlogged then 'unlogged' else '' end,
    qtable
  );
  -- The archive is always logged, even for unlogged queues; archived_at sits before vt.
  execute format(
    'create table if not exists pgmq.%I (
       msg_id bigint primary key,
       read_ct integer not null default 0,
       enqueued_at timestamptz not null default now(),
       archived_at timestamptz not null default now(),
       vt timestamptz not null,
       message jsonb,
       headers jsonb
     )',
    atable
  );
  execute format('create index if not exists %I on pgmq.%I (vt)', qtable || '_vt_idx', qtable);
  -- PGMQ names this index after the raw, un-lowercased queue name.
  execute format(
    'create index if not exists %I on pgmq.%I (archived_at)',
    'archived_at_idx_' || queue_name,
    atable
  );
  -- Re-creating keeps the first row (and its created_at and kind) unchanged.
  insert into pgmq.meta (queue_name, is_partitioned, is_unlogged)
  values (queue_name, false, unlogged)
  on conflict do nothing;
end
$fn$;

create or replace function pgmq.create_non_partitioned(queue_name text)
returns void
language plpgsql
as $fn$
begin
  perform pgmq._create_queue(queue_name, false);
end
$fn$;

create or replace function pgmq.create_unlogged(queue_name text)
returns void
language plpgsql
as $fn$
begin
  perform pgmq._create_queue(queue_name, true);
end
$fn$;

create or replace function pgmq."create"(queue_name text)
returns void
language plpgsql
as $fn$
begin
  perform pgmq.create_non_partitioned(queue_name);
end
$fn$;

-- Partitioned queues need pg_partman. Validate the name exactly as PGMQ does, then report the
-- missing extension with PGMQ's text; with pg_partman present, say plainly that the clone does not
-- build partitioned queues rather than half-building one.
create or replace function pgmq.create_partitioned(
  queue_name text,
  partition_interval text default '10000'::text,
  retention_interval text default '100000'::text
)
returns void
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
begin
  perform pgmq.validate_queue_name(queue_name);
  perform pg_advisory_xact_lock(hashtext('pgmq.queue_' || queue_name));
  if not exists (select 1 from pg_extension where extname = 'pg_partman') then
    raise exception 'pg_partman is required for partitioned queues';
  end if;
  raise exception 'partitioned queues are not supported by the PGMQ-compatible SQL (queue %)', qtable
    using errcode = 'feature_not_supported';
end
$fn$;

-- Drops a queue. A queue that does not exist (neither a meta row under this exact name nor a
-- queue table) is not an error: NOTICE and false, PGMQ 1.5.2's behaviour, so cleanup code can
-- drop unconditionally. The meta row removed is the one matching the name exactly.
create or replace function pgmq.drop_queue(queue_name text)
returns boolean
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
  atable text := pgmq.format_table_name(queue_name, 'a');
begin
  perform pg_advisory_xact_lock(hashtext('pgmq.queue_' || queue_name));
  if not exists (select 1 from pgmq.meta m where m.queue_name = drop_queue.queue_name)
    and to_regclass(format('pgmq.%I', qtable)) is null
  then
    raise notice 'pgmq queue `%` does not exist', queue_name;
    return false;
  end if;
  execute format('drop table if exists pgmq.%I', qtable);
  execute format('drop table if exists pgmq.%I', atable);
  delete from pgmq.meta m where m.queue_name = drop_queue.queue_name;
  return true;
end
$fn$;

-- Deprecated in PGMQ 1.5 (the partitioned flag is read from meta now). Kept for old callers; it
-- returns what the one-argument form returns, so a missing queue gives false here too.
create or replace function pgmq.drop_queue(queue_name text, partitioned boolean)
returns boolean
language plpgsql
as $fn$
begin
  raise warning 'drop_queue(queue_name, partitioned) is deprecated and will be removed in PGMQ v2.0. Use drop_queue(queue_name) instead';
  return pgmq.drop_queue(queue_name);
end
$fn$;

-- SQL-only mode has no extension membership to remove; validate the name and do nothing.
create or replace function pgmq.detach_archive(queue_name text)
returns void
language plpgsql
as $fn$
begin
  perform pgmq.format_table_name(queue_name, 'a');
end
$fn$;

create or replace function pgmq.list_queues()
returns setof pgmq.queue_record
language sql
as $fn$
  select queue_name, is_partitioned, is_unlogged, created_at from pgmq.meta
$fn$;

-- ---------------------------------------------------------------------------------------------
-- Sending. Exactly PGMQ 1.5's six overloads each, with no defaults: a default on any of them would
-- make the two-argument call ambiguous. An integer delay counts from clock_timestamp(); a
-- timestamptz delay is used as given (even in the past). A NULL delay leaves vt NULL, which the
-- NOT NULL column rejects (23502), as in PGMQ.
-- ---------------------------------------------------------------------------------------------

create or replace function pgmq.send(
  queue_name text,
  msg jsonb,
  headers jsonb,
  delay timestamp with time zone
)
returns setof bigint
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
begin
  return query execute format(
    'insert into pgmq.%I (vt, message, headers) values ($1, $2, $3) returning msg_id',
    qtable
  ) using delay, msg, headers;
end
$fn$;

create or replace function pgmq.send(queue_name text, msg jsonb, headers jsonb, delay integer)
returns setof bigint
language sql
as $fn$
  select * from pgmq.send(queue_name, msg, headers, clock_timestamp() + make_interval(secs => delay))
$fn$;

create or replace function pgmq.send(queue_name text, msg jsonb, delay timestamp with time zone)
returns setof bigint
language sql
as $fn$
  select * from pgmq.send(queue_name, msg, null::jsonb, delay)
$fn$;

create or replace function pgmq.send(queue_name text, msg jsonb, delay integer)
returns setof bigint
language sql
as $fn$
  select * from pgmq.send(queue_name, msg, null::jsonb, delay)
$fn$;

create or replace function pgmq.send(queue_name text, msg jsonb, headers jsonb)
returns setof bigint
language sql
as $fn$
  select * from pgmq.send(queue_name, msg, headers, 0)
$fn$;

create or replace function pgmq.send(queue_name text, msg jsonb)
returns setof bigint
language sql
as $fn$
  select * from pgmq.send(queue_name, msg, null::jsonb, 0)
$fn$;

-- Every message of a batch gets the same vt. Headers pair with messages by position; a shorter
-- headers array leaves the rest NULL (multi-argument unnest pads). Ids come back in array order:
-- the rows are inserted, and so numbered and returned, in ordinality order.
create or replace function pgmq.send_batch(
  queue_name text,
  msgs jsonb[],
  headers jsonb[],
  delay timestamp with time zone
)
returns setof bigint
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
begin
  return query execute format(
    'insert into pgmq.%I (vt, message, headers)
     select $1, b.m, b.h from unnest($2::jsonb[], $3::jsonb[]) with ordinality as b(m, h, i)
     order by b.i
     returning msg_id',
    qtable
  ) using delay, msgs, headers;
end
$fn$;

create or replace function pgmq.send_batch(
  queue_name text,
  msgs jsonb[],
  headers jsonb[],
  delay integer
)
returns setof bigint
language sql
as $fn$
  select * from pgmq.send_batch(
    queue_name, msgs, headers, clock_timestamp() + make_interval(secs => delay)
  )
$fn$;

create or replace function pgmq.send_batch(
  queue_name text,
  msgs jsonb[],
  delay timestamp with time zone
)
returns setof bigint
language sql
as $fn$
  select * from pgmq.send_batch(queue_name, msgs, null::jsonb[], delay)
$fn$;

create or replace function pgmq.send_batch(queue_name text, msgs jsonb[], delay integer)
returns setof bigint
language sql
as $fn$
  select * from pgmq.send_batch(queue_name, msgs, null::jsonb[], delay)
$fn$;

create or replace function pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[])
returns setof bigint
language sql
as $fn$
  select * from pgmq.send_batch(queue_name, msgs, headers, 0)
$fn$;

create or replace function pgmq.send_batch(queue_name text, msgs jsonb[])
returns setof bigint
language sql
as $fn$
  select * from pgmq.send_batch(queue_name, msgs, null::jsonb[], 0)
$fn$;

-- ---------------------------------------------------------------------------------------------
-- Consuming
-- ---------------------------------------------------------------------------------------------

-- One statement: lock up to qty visible messages in msg_id order, skipping rows other transactions
-- hold (so concurrent consumers never get the same message), then push their vt out and count the
-- read. Visibility uses clock_timestamp() so a message sent earlier in the same transaction is
-- readable. qty NULL means no limit; a negative qty is PostgreSQL's LIMIT error, as in PGMQ.
-- An empty or NULL conditional means no filter; otherwise the message must contain it (jsonb @>).
create or replace function pgmq.read(
  queue_name text,
  vt integer,
  qty integer,
  conditional jsonb default '{}'::jsonb
)
returns setof pgmq.message_record
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
begin
  return query execute format(
    'with picked as (
       select msg_id from pgmq.%I
       where vt <= clock_timestamp()
         and ($3 is null or $3 = ''{}''::jsonb or message @> $3)
       order by msg_id
       limit $1
       for update skip locked
     )
     update pgmq.%I q
     set vt = clock_timestamp() + make_interval(secs => $2), read_ct = q.read_ct + 1
     from picked
     where q.msg_id = picked.msg_id
     returning q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers',
    qtable, qtable
  ) using qty, vt, conditional;
end
$fn$;

-- Retries read every poll_interval_ms until it returns rows or max_poll_seconds have passed. The
-- deadline is checked before the first attempt, so max_poll_seconds <= 0 returns nothing even when
-- messages are visible (PGMQ does the same, and callers may rely on it). Each attempt is a new
-- statement, so under READ COMMITTED it sees messages committed meanwhile.
create or replace function pgmq.read_with_poll(
  queue_name text,
  vt integer,
  qty integer,
  max_poll_seconds integer default 5,
  poll_interval_ms integer default 100,
  conditional jsonb default '{}'::jsonb
)
returns setof pgmq.message_record
language plpgsql
as $fn$
declare
  deadline timestamptz := clock_timestamp() + make_interval(secs => max_poll_seconds);
begin
  -- Validate the name up front, even if the deadline has already passed.
  perform pgmq.format_table_name(queue_name, 'q');
  loop
    -- A NULL deadline (NULL max_poll_seconds) stops at once instead of polling forever.
    if deadline is null or clock_timestamp() >= deadline then
      return;
    end if;
    return query select * from pgmq.read(queue_name, vt, qty, conditional);
    if found then
      return;
    end if;
    -- Real fractional sleep: PGMQ 1.4.4 divided as integers and busy-looped under 1000 ms.
    perform pg_sleep(poll_interval_ms / 1000.0);
  end loop;
end
$fn$;

-- Removes and returns the oldest visible, unlocked message as stored (read_ct not incremented).
-- clock_timestamp() as in 1.5.1, so a message sent earlier in the same transaction can be popped.
create or replace function pgmq.pop(queue_name text)
returns setof pgmq.message_record
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
begin
  return query execute format(
    'with picked as (
       select msg_id from pgmq.%I
       where vt <= clock_timestamp()
       order by msg_id
       limit 1
       for update skip locked
     )
     delete from pgmq.%I q
     using picked
     where q.msg_id = picked.msg_id
     returning q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers',
    qtable, qtable
  );
end
$fn$;

-- Sets vt to clock_timestamp() + vt seconds whatever the current visibility (1.5.1's base);
-- read_ct is untouched. Blocks on a row another transaction holds, rather than skipping it.
create or replace function pgmq.set_vt(queue_name text, msg_id bigint, vt integer)
returns setof pgmq.message_record
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
begin
  return query execute format(
    'update pgmq.%I q
     set vt = clock_timestamp() + make_interval(secs => $2)
     where q.msg_id = $1
     returning q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers',
    qtable
  ) using msg_id, vt;
end
$fn$;

-- ---------------------------------------------------------------------------------------------
-- Archiving and deleting: one statement each, so a message is never both in the queue and the
-- archive, nor in neither. They ignore vt (in-flight messages can be archived or deleted) and wait
-- for a row lock held by another transaction. archived_at takes its default, now().
-- ---------------------------------------------------------------------------------------------

create or replace function pgmq.archive(queue_name text, msg_id bigint)
returns boolean
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
  atable text := pgmq.format_table_name(queue_name, 'a');
  moved bigint;
begin
  execute format(
    'with gone as (
       delete from pgmq.%I where msg_id = $1
       returning msg_id, read_ct, enqueued_at, vt, message, headers
     )
     insert into pgmq.%I (msg_id, read_ct, enqueued_at, vt, message, headers)
     select msg_id, read_ct, enqueued_at, vt, message, headers from gone
     returning msg_id',
    qtable, atable
  ) into moved using msg_id;
  return moved is not null;
end
$fn$;

create or replace function pgmq.archive(queue_name text, msg_ids bigint[])
returns setof bigint
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
  atable text := pgmq.format_table_name(queue_name, 'a');
begin
  return query execute format(
    'with gone as (
       delete from pgmq.%I where msg_id = any($1)
       returning msg_id, read_ct, enqueued_at, vt, message, headers
     )
     insert into pgmq.%I (msg_id, read_ct, enqueued_at, vt, message, headers)
     select msg_id, read_ct, enqueued_at, vt, message, headers from gone
     returning msg_id',
    qtable, atable
  ) using msg_ids;
end
$fn$;

create or replace function pgmq.delete(queue_name text, msg_id bigint)
returns boolean
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
  gone bigint;
begin
  execute format('delete from pgmq.%I where msg_id = $1 returning msg_id', qtable)
    into gone using msg_id;
  return gone is not null;
end
$fn$;

create or replace function pgmq.delete(queue_name text, msg_ids bigint[])
returns setof bigint
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
begin
  return query execute format(
    'delete from pgmq.%I where msg_id = any($1) returning msg_id',
    qtable
  ) using msg_ids;
end
$fn$;

-- Empties the queue (not the archive) and returns how many messages it held. The identity sequence
-- is not reset: ids keep increasing. The table lock is taken before counting so that the count is
-- exactly what TRUNCATE removes.
create or replace function pgmq.purge_queue(queue_name text)
returns bigint
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
  purged bigint;
begin
  execute format('lock table pgmq.%I in access exclusive mode', qtable);
  execute format('select count(*) from pgmq.%I', qtable) into purged;
  execute format('truncate table pgmq.%I', qtable);
  return purged;
end
$fn$;

-- ---------------------------------------------------------------------------------------------
-- Metrics: plain reads, no row locks, so they never wait for consumers. Everything is measured
-- against now() (the transaction start), including the visible length. queue_name is echoed as
-- passed. total_messages is the identity sequence's last value: every id ever handed out,
-- including rolled-back sends and messages since removed.
-- ---------------------------------------------------------------------------------------------

create or replace function pgmq.metrics(queue_name text)
returns pgmq.metrics_result
language plpgsql
as $fn$
declare
  qtable text := pgmq.format_table_name(queue_name, 'q');
  result pgmq.metrics_result;
begin
  execute format(
    'select count(*),
            extract(epoch from now() - max(enqueued_at))::integer,
            extract(epoch from now() - min(enqueued_at))::integer,
            count(*) filter (where vt <= now())
     from pgmq.%I',
    qtable
  ) into result.queue_length, result.newest_msg_age_sec, result.oldest_msg_age_sec,
    result.queue_visible_length;
  -- The identity sequence's implicit name; create refuses names that would make it overflow.
  execute format(
    'select case when is_called then last_value else 0 end from pgmq.%I',
    qtable || '_msg_id_seq'
  ) into result.total_messages;
  result.queue_name := queue_name;
  result.scrape_time := now();
  return result;
end
$fn$;

-- One row per meta row, named as stored there. A meta row without its table makes the whole call
-- fail (42P01), as in PGMQ, rather than hiding the inconsistency.
create or replace function pgmq.metrics_all()
returns setof pgmq.metrics_result
language plpgsql
as $fn$
declare
  q record;
begin
  for q in select m.queue_name from pgmq.meta m loop
    return next pgmq.metrics(q.queue_name);
  end loop;
end
$fn$;

-- ---------------------------------------------------------------------------------------------
-- Monitoring access, as PGMQ grants it: pg_monitor may read every queue table and sequence,
-- including those created later by the installing role.
-- ---------------------------------------------------------------------------------------------
do $grants$
begin
  if exists (select 1 from pg_roles where rolname = 'pg_monitor') then
    grant usage on schema pgmq to pg_monitor;
    grant select on all tables in schema pgmq to pg_monitor;
    grant select on all sequences in schema pgmq to pg_monitor;
    alter default privileges in schema pgmq grant select on tables to pg_monitor;
    alter default privileges in schema pgmq grant select on sequences to pg_monitor;
  end if;
end
$grants$;
