-- The accepted range of every numeric flow and step option: integers, both ends included, durations
-- in seconds. The TypeScript DSL validates against the same table (OPTION_BOUNDS in
-- src/dsl/options.ts); both are tested against tests/fixtures/option_bounds.json.
--
-- The maxima keep every value SQL derives from an option far inside integer: a claim hides a
-- message for timeout + 2 s, stalled recovery waits timeout + 30 s, a retry waits
-- base_delay * 2^(attempt - 1) (capped). Without them one flow's timeout near 2^31 made every claim
-- batch on its queue fail, and stalled recovery fail for the whole database.
create or replace function pgflow.option_bounds()
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select '{
    "maxAttempts": {"min": 1, "max": 1000},
    "baseDelay": {"min": 1, "max": 31536000},
    "timeout": {"min": 3, "max": 31536000},
    "startDelay": {"min": 0, "max": 31536000}
  }'::jsonb
$$;

-- Whether a value is inside its option's bounds; NULL (an unset step option) is. The table checks
-- call this, so a value written directly into pgflow.flows or pgflow.steps is held to the same
-- table as the definition functions.
create or replace function pgflow.option_in_bounds(option_name text, option_value integer)
returns boolean
language sql
immutable
set search_path = ''
as $$
  select option_value is null
    or (option_value >= (pgflow.option_bounds() -> option_name ->> 'min')::integer
        and option_value <= (pgflow.option_bounds() -> option_name ->> 'max')::integer)
$$;

-- Raises, naming the option (as the DSL spells it and as SQL does) and the value, when a value is
-- outside its bounds, or NULL where a value is required. p_where names the flow or step.
create or replace function pgflow._check_option(
  p_where text, p_option text, p_sql_name text, p_value integer, p_required boolean
)
returns void
language plpgsql
immutable
set search_path = ''
as $$
declare
  b jsonb := pgflow.option_bounds() -> p_option;
begin
  if (p_value is null and p_required) or not pgflow.option_in_bounds(p_option, p_value) then
    raise exception '%: % (%) must be an integer between % and %, got %', p_where, p_option, p_sql_name,
      b ->> 'min', b ->> 'max', coalesce(p_value::text, 'NULL')
      using errcode = '22023',
        hint = format('%s is %s from %s to %s', p_option,
                      case when p_option = 'maxAttempts' then 'a count' else 'a number of seconds' end,
                      b ->> 'min', b ->> 'max');
  end if;
end;
$$;

-- What an unset flow option is stored as (a step's unset maxAttempts, baseDelay and timeout inherit
-- the flow's; its startDelay is 0). The one place these defaults are written: the flows table,
-- create_flow and the startup compiler read them here.
create or replace function pgflow.flow_option_default(option_name text)
returns integer
language sql
immutable
set search_path = ''
as $$
  select case option_name when 'maxAttempts' then 3 when 'baseDelay' then 1 when 'timeout' then 60 end
$$;
