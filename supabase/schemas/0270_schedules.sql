-- Schedules: a flow (or an alias) started on a cron expression or a fixed interval, exactly one
-- run per tick whatever fires the ticks (pg_cron's one job, every worker, an operator by hand), and
-- missed ticks after an outage handled by the schedule's catch-up policy. The guide is
-- docs/schedules.md.
--
-- Exactly once: a tick is fired only by the transaction that inserts its (schedule, tick time)
-- row into schedule_ticks, whose primary key refuses a second one; the schedule's row lock and
-- next_tick_at, which only moves forward, keep concurrent, retried and clock-stepped tickers from
-- even trying.

create table if not exists pgflow.schedules (
  schedule_name text not null,
  -- A flow slug or an alias: resolved by start_flow at each tick, so a schedule on an alias
  -- follows its activations.
  flow_slug text not null,
  -- Exactly one of cron (five fields, read on time_zone's wall clock) and every (whole seconds,
  -- ticks at multiples of it since the Unix epoch).
  cron text,
  every interval,
  time_zone text not null default 'UTC',
  input jsonb not null default '{}',
  -- When set, each run's input is input plus this key holding the tick's time (ISO 8601, UTC).
  tick_key text,
  -- After an outage, the latest catch_up due ticks start runs and older ones are skipped (counted
  -- in skipped_ticks). Ticks less than 10 seconds late always start runs: a late ticker is not an
  -- outage.
  catch_up integer not null default 1,
  paused boolean not null default false,
  -- The first tick not yet considered; only moves forward, so no tick is considered twice.
  next_tick_at timestamptz,
  last_tick_at timestamptz,
  last_run_id uuid,
  last_error text,
  skipped_ticks bigint not null default 0,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint schedules_pkey primary key (schedule_name),
  constraint schedules_name_is_valid check (pgflow.is_valid_slug(schedule_name)),
  constraint schedules_one_timing check ((cron is null) <> (every is null)),
  constraint schedules_catch_up_range check (catch_up between 1 and 1000),
  constraint schedules_tick_key_needs_object check (tick_key is null or jsonb_typeof(input) = 'object')
);

-- The tickers' search: only active schedules whose next tick has come.
create index if not exists schedules_due_idx on pgflow.schedules (next_tick_at) where not paused;

-- One row per fired tick: the idempotency key of a run started by a schedule. Kept a day, for
-- history (pgflow schedules list, the dashboard); next_tick_at keeps older ticks from firing again.
create table if not exists pgflow.schedule_ticks (
  schedule_name text not null,
  tick_at timestamptz not null,
  run_id uuid,
  -- Why the run did not start (the flow was deleted, its input was refused): the tick is spent.
  error text,
  -- The clock the ticker fired by (fire_due_schedules' now, not the moment of the insert), so
  -- fired_at - tick_at is the lateness that decided whether the tick fired.
  fired_at timestamptz not null default clock_timestamp(),
  constraint schedule_ticks_pkey primary key (schedule_name, tick_at),
  constraint schedule_ticks_schedule_fkey foreign key (schedule_name)
    references pgflow.schedules (schedule_name) on delete cascade
);

-- The tick of a schedule strictly after p_at (p_forward), or the latest at or before it.
create or replace function pgflow._schedule_tick(s pgflow.schedules, p_at timestamptz, p_forward boolean)
returns timestamptz
language plpgsql
stable
set search_path = ''
as $$
declare
  seconds numeric;
  k numeric;
begin
  if s.every is not null then
    seconds := extract(epoch from s.every);
    k := pg_catalog.floor(extract(epoch from p_at) / seconds);
    return pg_catalog.to_timestamp(((k + case when p_forward then 1 else 0 end) * seconds)::double precision);
  end if;
  return pgflow._cron_tick(pgflow._cron_parse(s.cron), s.time_zone, p_at, p_forward);
end;
$$;

-- Checks a schedule's definition, failing with the bad value and the fix.
create or replace function pgflow._check_schedule(s pgflow.schedules)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  seconds numeric;
begin
  if not pgflow.is_valid_slug(s.schedule_name) then
    raise exception 'schedule name % is not valid', coalesce(quote_literal(s.schedule_name), 'NULL')
      using errcode = '22023',
        hint = 'use letters, digits and single underscores, starting with a letter (at most 128 characters)';
  end if;
  if not exists (select 1 from pgflow.flows f where f.flow_slug = s.flow_slug)
     and not exists (select 1 from pgflow.aliases a where a.alias = s.flow_slug) then
    raise exception 'schedule %: flow or alias % does not exist', s.schedule_name, coalesce(quote_literal(s.flow_slug), 'NULL')
      using errcode = '22023', hint = 'compile the flow first (a worker''s start or pgflow compile), or name an alias';
  end if;
  if (s.cron is null) = (s.every is null) then
    raise exception 'schedule %: give exactly one of cron and every', s.schedule_name
      using errcode = '22023',
        hint = 'cron => ''*/5 * * * *'' (minutes and up, on a time zone''s clock) or every => ''10 seconds''';
  end if;
  perform pgflow._check_time_zone(s.time_zone);
  if s.cron is not null then
    if pgflow._cron_tick(pgflow._cron_parse(s.cron), s.time_zone, now(), true) is null then
      raise exception 'cron expression % never fires', quote_literal(s.cron)
        using errcode = '22023', hint = 'check the day-of-month and month fields (''0 0 30 2 *'' asks for 30 February)';
    end if;
  else
    seconds := extract(epoch from s.every);
    if extract(month from s.every) <> 0 or extract(year from s.every) <> 0
       or seconds <> pg_catalog.trunc(seconds) or seconds < 1 or seconds > 366 * 86400 then
      raise exception 'every % is not a whole number of seconds from 1 second to 366 days', s.every
        using errcode = '22023',
          hint = 'use e.g. ''1 second'', ''30 seconds'', ''2 hours''; for months or wall-clock times use cron';
    end if;
  end if;
  if s.input is null then
    raise exception 'schedule %: input must not be SQL NULL', s.schedule_name
      using errcode = '22023', hint = 'pass ''{}''::jsonb for a run without input';
  end if;
  if s.tick_key is not null and (s.tick_key = '' or jsonb_typeof(s.input) <> 'object') then
    raise exception 'schedule %: tick_key % needs a non-empty key and an input that is a JSON object, not %',
      s.schedule_name, quote_literal(s.tick_key), jsonb_typeof(s.input)
      using errcode = '22023', hint = 'pass an object input (''{}'' at least), or no tick_key';
  end if;
  if s.catch_up is null or s.catch_up not between 1 and 1000 then
    raise exception 'schedule %: catch_up % is not from 1 to 1000', s.schedule_name, coalesce(s.catch_up::text, 'NULL')
      using errcode = '22023',
        hint = '1 (the default) starts only the latest missed tick after an outage; N starts up to the N latest';
  end if;
end;
$$;

-- A schedule as list_schedules and the write functions return it. input_text repeats the input as
-- the database's own text: a client that can only read the document through JSON.parse
-- (supabase-js) reads that string exactly, where big numbers in `input` would be rounded.
create or replace function pgflow._schedule_json(s pgflow.schedules)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'schedule', s.schedule_name, 'flow', s.flow_slug, 'cron', s.cron,
    'every_seconds', extract(epoch from s.every)::bigint, 'time_zone', s.time_zone,
    'input', s.input, 'input_text', s.input::text, 'tick_key', s.tick_key, 'catch_up', s.catch_up, 'paused', s.paused,
    'next_tick_at', case when s.paused then null else s.next_tick_at end,
    'last_tick_at', s.last_tick_at, 'last_run_id', s.last_run_id, 'last_error', s.last_error,
    'skipped_ticks', s.skipped_ticks, 'created_at', s.created_at, 'updated_at', s.updated_at)
$$;

-- Creates a schedule. The first tick is the first one after now: creating a schedule never starts
-- a run for a time already past.
--   select pgflow.create_schedule('nightly_report', 'report', cron => '0 2 * * *',
--                                 time_zone => 'Europe/Paris', input => '{"full": true}');
-- security definer, like start_flow: a role granted only these functions (service_role) manages
-- schedules without write access to pgflow's tables.
create or replace function pgflow.create_schedule(
  schedule_name text,
  flow_slug text,
  cron text default null,
  input jsonb default '{}',
  time_zone text default 'UTC',
  every interval default null,
  tick_key text default null,
  catch_up integer default 1,
  paused boolean default false
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  s pgflow.schedules;
begin
  s.schedule_name := create_schedule.schedule_name;
  s.flow_slug := create_schedule.flow_slug;
  s.cron := create_schedule.cron;
  s.every := create_schedule.every;
  s.time_zone := create_schedule.time_zone;
  s.input := create_schedule.input;
  s.tick_key := create_schedule.tick_key;
  s.catch_up := create_schedule.catch_up;
  perform pgflow._check_schedule(s);
  insert into pgflow.schedules as x (schedule_name, flow_slug, cron, every, time_zone, input, tick_key, catch_up,
                                     paused, next_tick_at)
  values (s.schedule_name, s.flow_slug, s.cron, s.every, s.time_zone, s.input, s.tick_key, s.catch_up,
          coalesce(create_schedule.paused, false), pgflow._schedule_tick(s, clock_timestamp(), true))
  on conflict on constraint schedules_pkey do nothing
  returning * into s;
  if not found then
    raise exception 'schedule % already exists', create_schedule.schedule_name
      using errcode = '23505', hint = 'change it with pgflow.update_schedule, or delete it first';
  end if;
  return pgflow._schedule_json(s);
end;
$$;

-- The schedule's row, locked, or an error naming it.
create or replace function pgflow._lock_schedule(p_schedule_name text)
returns pgflow.schedules
language plpgsql
volatile
set search_path = ''
as $$
declare
  s pgflow.schedules;
begin
  select * into s from pgflow.schedules x where x.schedule_name = p_schedule_name for update;
  if not found then
    raise exception 'schedule % does not exist', coalesce(quote_literal(p_schedule_name), 'NULL')
      using errcode = 'P0002', hint = 'pgflow.list_schedules() lists them';
  end if;
  return s;
end;
$$;

-- Changes a schedule: a null argument leaves that part as it is (tick_key => '' removes the key;
-- cron replaces every and every replaces cron). Its next tick is recomputed from now, never before
-- the last tick considered, so a change never fires a tick twice nor one already past.
create or replace function pgflow.update_schedule(
  schedule_name text,
  flow_slug text default null,
  cron text default null,
  input jsonb default null,
  time_zone text default null,
  every interval default null,
  tick_key text default null,
  catch_up integer default null
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  s pgflow.schedules := pgflow._lock_schedule(update_schedule.schedule_name);
begin
  if update_schedule.cron is not null and update_schedule.every is not null then
    raise exception 'schedule %: give cron or every, not both', s.schedule_name
      using errcode = '22023', hint = 'cron replaces an every schedule and every replaces a cron one';
  end if;
  s.flow_slug := coalesce(update_schedule.flow_slug, s.flow_slug);
  if update_schedule.cron is not null then
    s.cron := update_schedule.cron;
    s.every := null;
  elsif update_schedule.every is not null then
    s.every := update_schedule.every;
    s.cron := null;
  end if;
  s.input := coalesce(update_schedule.input, s.input);
  s.time_zone := coalesce(update_schedule.time_zone, s.time_zone);
  s.tick_key := case when update_schedule.tick_key = '' then null else coalesce(update_schedule.tick_key, s.tick_key) end;
  s.catch_up := coalesce(update_schedule.catch_up, s.catch_up);
  perform pgflow._check_schedule(s);
  update pgflow.schedules x
  set flow_slug = s.flow_slug, cron = s.cron, every = s.every, input = s.input, time_zone = s.time_zone,
      tick_key = s.tick_key, catch_up = s.catch_up,
      next_tick_at = pgflow._schedule_tick(s, greatest(clock_timestamp(), s.last_tick_at), true),
      updated_at = now()
  where x.schedule_name = s.schedule_name
  returning * into s;
  return pgflow._schedule_json(s);
end;
$$;

-- Pauses a schedule: no tick fires until it is resumed, and the ticks of the pause are not runs
-- (resuming is not an outage to catch up on).
create or replace function pgflow.pause_schedule(schedule_name text)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  s pgflow.schedules := pgflow._lock_schedule(pause_schedule.schedule_name);
begin
  update pgflow.schedules x set paused = true, updated_at = now()
  where x.schedule_name = s.schedule_name
  returning * into s;
  return pgflow._schedule_json(s);
end;
$$;

-- Resumes a paused schedule from its next tick after now (a running one is left as it is).
create or replace function pgflow.resume_schedule(schedule_name text)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  s pgflow.schedules := pgflow._lock_schedule(resume_schedule.schedule_name);
begin
  if s.paused then
    update pgflow.schedules x
    set paused = false, updated_at = now(),
        next_tick_at = pgflow._schedule_tick(s, greatest(clock_timestamp(), s.last_tick_at), true)
    where x.schedule_name = s.schedule_name
    returning * into s;
  end if;
  return pgflow._schedule_json(s);
end;
$$;

-- Deletes a schedule and its tick history; the runs it started stay. False when there was none.
create or replace function pgflow.delete_schedule(schedule_name text)
returns boolean
language plpgsql
volatile
security definer
set search_path = ''
as $$
begin
  delete from pgflow.schedules x where x.schedule_name = delete_schedule.schedule_name;
  return found;
end;
$$;

-- Every schedule, by name.
create or replace function pgflow.list_schedules()
returns setof jsonb
language sql
stable
security definer
set search_path = ''
as $$
  select pgflow._schedule_json(s) from pgflow.schedules s order by s.schedule_name
$$;

-- Fires every due tick of every active schedule: one run per tick, then the schedule's next tick.
-- Called by pg_cron's one job (schedule_maintenance), by every worker about once a second, or by
-- hand; any number of callers at once is safe. now is the clock it fires by (tests pass their
-- own). Returns how many runs it started.
--
-- Per schedule: the latest due tick and every tick less than 10 seconds late fire; of older ones
-- (an outage: nobody ticked) only as many as catch_up allows, the latest first, the rest counted in
-- skipped_ticks. A run that cannot start (flow deleted, input refused) spends its tick, recorded
-- with its error, without holding up the other schedules.
create or replace function pgflow.fire_due_schedules(now timestamptz default clock_timestamp())
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  on_time constant interval := interval '10 seconds';
  s pgflow.schedules;
  latest timestamptz;
  oldest_due timestamptz;
  ticks timestamptz[];
  t timestamptz;
  skipped bigint;
  new_run_id uuid;
  failure text;
  started integer := 0;
begin
  -- Waits that are due (sleeps, event timeouts: 0280_events.sql) end on the same tick.
  perform pgflow.fire_due_waits(fire_due_schedules.now);
  -- skip locked: a schedule another ticker is firing is its business; once it commits,
  -- next_tick_at has moved past what it fired (read committed re-checks the row when locking).
  for s in
    select * from pgflow.schedules x
    where not x.paused and x.next_tick_at <= fire_due_schedules.now
    order by x.next_tick_at
    for update skip locked
  loop
    latest := pgflow._schedule_tick(s, fire_due_schedules.now, false);
    ticks := array[]::timestamptz[];
    t := latest;
    while t is not null and t >= s.next_tick_at
          and (cardinality(ticks) < s.catch_up or fire_due_schedules.now - t < on_time) loop
      ticks := t || ticks;
      t := pgflow._schedule_tick(s, t - interval '1 microsecond', false);
    end loop;
    skipped := 0;
    if t is not null and t >= s.next_tick_at then
      -- Ticks from next_tick_at to t were missed: count them (bounded; an outage of months on a
      -- minute schedule is counted as 100000).
      oldest_due := s.next_tick_at;
      skipped := 1;
      while oldest_due < t and skipped < 100000 loop
        oldest_due := pgflow._schedule_tick(s, oldest_due, true);
        skipped := skipped + 1;
      end loop;
    end if;
    foreach t in array ticks loop
      insert into pgflow.schedule_ticks (schedule_name, tick_at, fired_at)
      values (s.schedule_name, t, fire_due_schedules.now)
      on conflict on constraint schedule_ticks_pkey do nothing;
      continue when not found;
      begin
        select r.run_id into new_run_id
        from pgflow.start_flow(s.flow_slug,
          case when s.tick_key is null then s.input
               else s.input || jsonb_build_object(s.tick_key,
                      to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) end) r;
        update pgflow.schedule_ticks k set run_id = new_run_id
        where k.schedule_name = s.schedule_name and k.tick_at = t;
        s.last_run_id := new_run_id;
        s.last_error := null;
        started := started + 1;
      exception when others then
        get stacked diagnostics failure = message_text;
        update pgflow.schedule_ticks k set error = failure
        where k.schedule_name = s.schedule_name and k.tick_at = t;
        s.last_error := format('tick %s: %s', t, failure);
      end;
    end loop;
    update pgflow.schedules x
    set next_tick_at = pgflow._schedule_tick(s, latest, true),
        last_tick_at = latest, last_run_id = s.last_run_id, last_error = s.last_error,
        skipped_ticks = x.skipped_ticks + skipped
    where x.schedule_name = s.schedule_name;
    delete from pgflow.schedule_ticks k
    where k.schedule_name = s.schedule_name and k.tick_at < latest - interval '1 day';
  end loop;
  return started;
end;
$$;
