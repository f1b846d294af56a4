-- A five-field cron evaluator (minute hour day-of-month month day-of-week), for schedules
-- (0270_schedules.sql). pg_cron's parser is not callable from SQL and pg_cron may be absent, so
-- pgflow evaluates cron expressions itself.
--
-- A parsed expression is a bigint[] of six masks: bit v of element 1..5 is set when value v is
-- allowed in that field (minutes 0-59, hours 0-23, days 1-31, months 1-12, weekdays 0-6 with
-- Sunday 0), and element 6 holds two flags: 1 when the day-of-month field is restricted (not '*'),
-- 2 when the day-of-week field is. As in Vixie cron and pg_cron, a day matches when either
-- restricted day field matches, and when only one is restricted, that one decides.

-- One field: comma-separated items, each '*', 'a', 'a-b', with an optional '/step' ('a/step'
-- runs from a to the field's end). Values may be names (jan-dec, sun-sat). Fails naming the
-- expression, the field and the item.
create or replace function pgflow._cron_field(
  p_expression text, p_field text, p_label text, p_lo integer, p_hi integer, p_names text[], p_name_base integer
)
returns bigint
language plpgsql
immutable
set search_path = ''
as $$
declare
  item text;
  parts text[];
  range_text text;
  step integer;
  first_value integer;
  last_value integer;
  mask bigint := 0;
  bounds text[];
  v integer;
begin
  if p_field = '' then
    raise exception 'cron expression % has an empty % field', quote_literal(p_expression), p_label
      using errcode = '22023',
        hint = 'write five fields: minute hour day-of-month month day-of-week, e.g. ''*/15 * * * *''';
  end if;
  foreach item in array pg_catalog.string_to_array(lower(p_field), ',') loop
    parts := pg_catalog.regexp_match(item, '^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/([0-9]{1,3}))?$');
    if parts is null then
      raise exception 'cron expression %: % field item % is not a value, a range a-b or a step */n',
        quote_literal(p_expression), p_label, quote_literal(item)
        using errcode = '22023',
          hint = format('the %s field takes %s to %s, ranges a-b, steps */n or a-b/n, lists a,b', p_label, p_lo, p_hi);
    end if;
    range_text := parts[1];
    step := coalesce(parts[2]::integer, 1);
    if step < 1 then
      raise exception 'cron expression %: % field item % has step 0', quote_literal(p_expression), p_label, quote_literal(item)
        using errcode = '22023', hint = 'a step is 1 or more, e.g. */5';
    end if;
    if range_text = '*' then
      first_value := p_lo;
      last_value := p_hi;
    else
      bounds := pg_catalog.string_to_array(range_text, '-');
      for i in 1 .. pg_catalog.array_length(bounds, 1) loop
        if bounds[i] ~ '^[0-9]{1,2}$' then
          v := bounds[i]::integer;
        elsif p_names is not null and pg_catalog.array_position(p_names, bounds[i]) is not null then
          v := pg_catalog.array_position(p_names, bounds[i]) - 1 + p_name_base;
        else
          v := null;
        end if;
        if v is null or v < p_lo or v > p_hi then
          raise exception 'cron expression %: % field value % is out of range', quote_literal(p_expression), p_label,
            quote_literal(bounds[i])
            using errcode = '22023', hint = format('the %s field takes %s to %s%s', p_label, p_lo, p_hi,
              case when p_names is null then '' else format(' or names (%s)', pg_catalog.array_to_string(p_names, ', ')) end);
        end if;
        bounds[i] := v::text;
      end loop;
      first_value := bounds[1]::integer;
      -- 'a/step' runs to the end of the field; a plain 'a' is the one value.
      last_value := case when pg_catalog.array_length(bounds, 1) = 2 then bounds[2]::integer
                         when parts[2] is not null then p_hi else first_value end;
      if first_value > last_value then
        raise exception 'cron expression %: % field range % runs backwards', quote_literal(p_expression), p_label,
          quote_literal(item)
          using errcode = '22023', hint = 'write the smaller value first, e.g. 1-5';
      end if;
    end if;
    v := first_value;
    while v <= last_value loop
      mask := mask | (1::bigint << v);
      v := v + step;
    end loop;
  end loop;
  return mask;
end;
$$;

-- Parses a cron expression into its masks (see the top of this file), or fails naming the
-- expression and what is wrong. Accepts @hourly, @daily (@midnight), @weekly, @monthly and
-- @yearly (@annually). Day-of-week 7 is Sunday, as 0 is.
create or replace function pgflow._cron_parse(p_expression text)
returns bigint[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  expression text := pg_catalog.btrim(coalesce(p_expression, ''));
  fields text[];
  weekdays bigint;
begin
  expression := case lower(expression)
    when '@hourly' then '0 * * * *'
    when '@daily' then '0 0 * * *'
    when '@midnight' then '0 0 * * *'
    when '@weekly' then '0 0 * * 0'
    when '@monthly' then '0 0 1 * *'
    when '@yearly' then '0 0 1 1 *'
    when '@annually' then '0 0 1 1 *'
    else expression end;
  fields := pg_catalog.regexp_split_to_array(expression, '\s+');
  if expression = '' or pg_catalog.array_length(fields, 1) <> 5 then
    raise exception 'cron expression % has % fields, not 5', coalesce(quote_literal(p_expression), 'NULL'),
      case when expression = '' then 0 else pg_catalog.array_length(fields, 1) end
      using errcode = '22023',
        hint = 'write five fields: minute hour day-of-month month day-of-week, e.g. ''*/15 * * * *''; '
               'for seconds use an interval schedule (every => ''1 second'')';
  end if;
  weekdays := pgflow._cron_field(p_expression, fields[5], 'day-of-week', 0, 7,
                                 array['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], 0);
  -- 7 is another name for Sunday.
  if weekdays & (1::bigint << 7) <> 0 then
    weekdays := (weekdays & ~(1::bigint << 7)) | 1;
  end if;
  return array[
    pgflow._cron_field(p_expression, fields[1], 'minute', 0, 59, null, 0),
    pgflow._cron_field(p_expression, fields[2], 'hour', 0, 23, null, 0),
    pgflow._cron_field(p_expression, fields[3], 'day-of-month', 1, 31, null, 0),
    pgflow._cron_field(p_expression, fields[4], 'month', 1, 12,
                       array['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'], 1),
    weekdays,
    (case when fields[3] = '*' then 0 else 1 end) | (case when fields[5] = '*' then 0 else 2 end)
  ];
end;
$$;

-- The first local minute at or after p_local (p_forward) or at or before it that the parsed
-- expression matches; null when none within eight years (e.g. '0 0 30 2 *'). It jumps a whole
-- month, day or hour that cannot match, so one call takes at most a few hundred steps.
create or replace function pgflow._cron_local(p_spec bigint[], p_local timestamp, p_forward boolean)
returns timestamp
language plpgsql
immutable
set search_path = ''
as $$
declare
  t timestamp := date_trunc('minute', p_local);
  bound interval := interval '8 years';
  day_ok boolean;
  dom_ok boolean;
  dow_ok boolean;
begin
  loop
    if (p_forward and t > p_local + bound) or (not p_forward and t < p_local - bound) then
      return null;
    end if;
    if p_spec[4] & (1::bigint << extract(month from t)::integer) = 0 then
      t := case when p_forward then date_trunc('month', t) + interval '1 month'
                else date_trunc('month', t) - interval '1 minute' end;
      continue;
    end if;
    dom_ok := p_spec[3] & (1::bigint << extract(day from t)::integer) <> 0;
    dow_ok := p_spec[5] & (1::bigint << extract(dow from t)::integer) <> 0;
    day_ok := case when p_spec[6] = 3 then dom_ok or dow_ok else dom_ok and dow_ok end;
    if not day_ok then
      t := case when p_forward then date_trunc('day', t) + interval '1 day'
                else date_trunc('day', t) - interval '1 minute' end;
      continue;
    end if;
    if p_spec[2] & (1::bigint << extract(hour from t)::integer) = 0 then
      t := case when p_forward then date_trunc('hour', t) + interval '1 hour'
                else date_trunc('hour', t) - interval '1 minute' end;
      continue;
    end if;
    if p_spec[1] & (1::bigint << extract(minute from t)::integer) = 0 then
      t := t + case when p_forward then interval '1 minute' else interval '-1 minute' end;
      continue;
    end if;
    return t;
  end loop;
end;
$$;

-- The next time strictly after p_after (p_forward) or the latest at or before it, as an instant,
-- of a cron expression read on the wall clock of p_time_zone. A local time that a daylight-saving
-- change skips fires when that wall-clock time would have been (Postgres reads 02:30 in a skipped
-- hour as 03:30), never twice at one instant; one that occurs twice fires once, at its second
-- occurrence. Null when the expression never matches.
create or replace function pgflow._cron_tick(
  p_spec bigint[], p_time_zone text, p_at timestamptz, p_forward boolean
)
returns timestamptz
language plpgsql
stable
set search_path = ''
as $$
declare
  local_time timestamp := p_at at time zone p_time_zone;
  instant timestamptz;
begin
  local_time := case when p_forward then date_trunc('minute', local_time) + interval '1 minute'
                     else date_trunc('minute', local_time) end;
  -- Around a daylight-saving change a local minute can map before p_at (forward) or after it
  -- (backward): step past it. A handful of steps at most.
  for i in 1 .. 200 loop
    local_time := pgflow._cron_local(p_spec, local_time, p_forward);
    if local_time is null then
      return null;
    end if;
    instant := local_time at time zone p_time_zone;
    if (p_forward and instant > p_at) or (not p_forward and instant <= p_at) then
      return instant;
    end if;
    local_time := local_time + case when p_forward then interval '1 minute' else interval '-1 minute' end;
  end loop;
  return null;
end;
$$;

-- The next n times a cron expression fires after a moment, in a time zone: for operators checking
-- an expression before they schedule it (pgflow schedules create prints them).
--   select * from pgflow.cron_next_times('0 9 * * mon-fri', 'Europe/Paris', now(), 3);
create or replace function pgflow.cron_next_times(
  expression text, time_zone text default 'UTC', after timestamptz default now(), n integer default 5
)
returns setof timestamptz
language plpgsql
stable
security definer
set search_path = ''
as $$
declare
  spec bigint[] := pgflow._cron_parse(expression);
  t timestamptz := after;
begin
  perform pgflow._check_time_zone(time_zone);
  for i in 1 .. least(greatest(coalesce(n, 0), 0), 1000) loop
    t := pgflow._cron_tick(spec, time_zone, t, true);
    exit when t is null;
    return next t;
  end loop;
end;
$$;

-- A time zone name Postgres knows from its time zone database (pg_timezone_names: 'UTC',
-- 'Europe/Paris'), or an error naming it. Abbreviations ('CEST') and offsets ('+02') are refused:
-- they carry no daylight-saving rules, and '+02' means two hours west of Greenwich in POSIX.
create or replace function pgflow._check_time_zone(p_time_zone text)
returns text
language plpgsql
stable
set search_path = ''
as $$
begin
  if p_time_zone is null
     or not exists (select 1 from pg_catalog.pg_timezone_names z where z.name = p_time_zone) then
    raise exception 'time zone % is not known to this database', coalesce(quote_literal(p_time_zone), 'NULL')
      using errcode = '22023',
        hint = 'use an IANA name such as ''UTC'', ''Europe/Paris'' or ''America/New_York'' (select name from pg_timezone_names lists them)';
  end if;
  return p_time_zone;
end;
$$;
