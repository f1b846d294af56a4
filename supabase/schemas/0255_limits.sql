-- Flow control's definitions (docs/flow-control.md): a step's priority, and its concurrency limit
-- (a scope, a key path, and the limit itself). The release machinery that enforces them is
-- 0260_flow_control.sql.
--
-- A limit belongs to a scope, not to a version: the steps that name one scope share one budget,
-- whichever flows and versions they belong to. A step without an explicit scope gets
-- '<alias or flow slug>/<step slug>', so the versions of a flow deployed under one alias share
-- it (a v2 deploy does not double what an API sees). The limit's value lives in its own row,
-- which every compile that names the scope upserts: changing a limit takes a worker restart, not
-- a new version.

create table if not exists pgflow.concurrency_limits (
  scope text not null,
  -- At most this many tasks of one (scope, key) are queued or started at once.
  max_running integer not null,
  updated_at timestamptz not null default now(),
  constraint concurrency_limits_pkey primary key (scope),
  constraint concurrency_limits_scope_is_valid check (scope ~ '^[A-Za-z0-9_.:/-]{1,200}$'),
  constraint concurrency_limits_max_running_range check (max_running between 1 and 100000)
);

-- A scope's rate limit: at most max_starts tasks of one (scope, key) start in any window of length
-- per (0262_rate_limits.sql). Like a concurrency limit it belongs to its scope, and every compile
-- that names the scope sets it.
create table if not exists pgflow.rate_limits (
  scope text not null,
  max_starts integer not null,
  per interval not null,
  updated_at timestamptz not null default now(),
  constraint rate_limits_pkey primary key (scope),
  constraint rate_limits_scope_is_valid check (scope ~ '^[A-Za-z0-9_.:/-]{1,200}$'),
  constraint rate_limits_max_starts_range check (max_starts between 1 and 100000),
  -- 10 ms to a day: finer than timestamps can order, or coarser than a day, is a mistake.
  constraint rate_limits_per_range check (per between interval '10 milliseconds' and interval '1 day')
);

-- The accepted range of flow control's numeric options, as FLOW_CONTROL_BOUNDS in
-- src/dsl/flow_control.ts (tests/sql/flow_control_compile_test.ts compares the two): a priority is a rank,
-- higher first; a concurrency limit is a count of tasks; a rate limit is a count of starts per
-- an interval in milliseconds.
create or replace function pgflow.flow_control_bounds()
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select '{"priority": {"min": -1000, "max": 1000}, "concurrency": {"min": 1, "max": 100000},
           "rateLimit": {"min": 1, "max": 100000}, "ratePerMs": {"min": 10, "max": 86400000}}'::jsonb
$$;

-- The scope a step's limit belongs to when it names none: the versions behind one alias share it.
create or replace function pgflow._default_limit_scope(p_flow_slug text, p_step_slug text)
returns text
language sql
stable
set search_path = ''
as $$
  select coalesce(f.alias, f.flow_slug) || '/' || p_step_slug
  from pgflow.flows f where f.flow_slug = p_flow_slug
$$;

-- The key of one task within its scope: the JSON path's first match in the input, a string as
-- itself, anything else as its JSON text. A path that finds nothing gives '' (one shared key for
-- every such task: a limit is never exceeded because an input lacked the field).
create or replace function pgflow._limit_key(p_input jsonb, p_path jsonpath)
returns text
language sql
immutable
set search_path = ''
as $$
  select coalesce(case jsonb_typeof(v) when 'string' then v #>> '{}' else v::text end, '')
  from (select jsonb_path_query_first(p_input, p_path, '{}'::jsonb, true) as v) x
$$;

-- A rate limit's interval in milliseconds, as the DSL gives it (a number of milliseconds) or as
-- SQL does (an interval's text, '1 second'); NULL when it is neither.
create or replace function pgflow._rate_per_ms(p_per jsonb)
returns numeric
language plpgsql
immutable
set search_path = ''
as $$
begin
  if jsonb_typeof(p_per) = 'number' then
    return (p_per #>> '{}')::numeric;
  elsif jsonb_typeof(p_per) = 'string' then
    return extract(epoch from (p_per #>> '{}')::interval) * 1000;
  end if;
  return null;
exception when others then
  return null;
end;
$$;

-- The problems of a limit's key and keyFrom (p_limit: {"key": "$.path", "keyFrom": "run" |
-- "input"}), named p_option in the lines, p_example the path suggested as a fix.
create or replace function pgflow._limit_key_problems(p_where text, p_option text, p_limit jsonb, p_example text)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  problems text[] := '{}';
  v jsonb := nullif(p_limit -> 'key', 'null'::jsonb);
begin
  if v is not null then
    if jsonb_typeof(v) <> 'string' then
      problems := problems || format('%s: %s.key must be a JSON path string such as "%s", got %s',
        p_where, p_option, p_example, left(v::text, 200));
    else
      begin
        perform (v #>> '{}')::jsonpath;
      exception when others then
        problems := problems || format('%s: %s.key %s is not a JSON path (%s); write e.g. "%s"',
          p_where, p_option, left(v::text, 200), sqlerrm, p_example);
      end;
    end if;
  end if;
  v := nullif(p_limit -> 'keyFrom', 'null'::jsonb);
  if v is not null and v not in ('"run"'::jsonb, '"input"'::jsonb) then
    problems := problems || format('%s: %s.keyFrom must be "run" (the run input) or "input" (the step''s input), got %s',
      p_where, p_option, left(v::text, 200));
  end if;
  return problems;
end;
$$;

-- Every problem with one step's (or a flow's) rateLimit, one line each as below.
create or replace function pgflow._rate_limit_problems(p_where text, p_rate jsonb)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  problems text[] := '{}';
  b jsonb := pgflow.flow_control_bounds();
  v jsonb;
  ms numeric;
begin
  if jsonb_typeof(p_rate) <> 'object' then
    return array[format('%s: rateLimit must be an object such as {"limit": 1, "per": "1 second", "key": "$.channel"}, got %s',
      p_where, left(p_rate::text, 200))];
  end if;
  v := p_rate -> 'limit';
  if v is null or not (jsonb_typeof(v) = 'number' and v::text ~ '^-?[0-9]{1,10}$'
                       and (v::text)::bigint between (b -> 'rateLimit' ->> 'min')::bigint
                                                 and (b -> 'rateLimit' ->> 'max')::bigint) then
    problems := problems || format('%s: rateLimit.limit must be an integer between %s and %s (starts per interval), got %s',
      p_where, b -> 'rateLimit' ->> 'min', b -> 'rateLimit' ->> 'max', coalesce(v::text, 'nothing'));
  end if;
  v := p_rate -> 'per';
  ms := pgflow._rate_per_ms(v);
  if ms is null or ms <> trunc(ms) or ms < (b -> 'ratePerMs' ->> 'min')::numeric
     or ms > (b -> 'ratePerMs' ->> 'max')::numeric then
    problems := problems || format('%s: rateLimit.per must be an interval from %s ms to %s ms (a day), as milliseconds or text such as "1 second", got %s',
      p_where, b -> 'ratePerMs' ->> 'min', b -> 'ratePerMs' ->> 'max', left(coalesce(v::text, 'nothing'), 200));
  end if;
  problems := problems || pgflow._limit_key_problems(p_where, 'rateLimit', p_rate, '$.channel');
  return problems;
end;
$$;

-- The key of one new task for a limit whose key path is p_path (NULL: one key, ''), read from the
-- run input (p_from 'run') or the task's own input ('input': a map task's element, else the
-- step's input built from its dependencies).
create or replace function pgflow._task_limit_key(
  p_path jsonpath, p_from text, p_step_type text, p_run_input jsonb, p_element jsonb,
  p_run_id uuid, p_flow_slug text, p_step_slug text, p_index integer
)
returns text
language sql
stable
set search_path = ''
as $$
  select case when p_path is null then ''
              when p_from = 'input' and p_step_type = 'map' then pgflow._limit_key(p_element, p_path)
              when p_from = 'input'
                then pgflow._limit_key((select o from pgflow._task_input(p_run_id, p_flow_slug, p_step_slug, p_index) o),
                                       p_path)
              else pgflow._limit_key(p_run_input, p_path) end
$$;

-- Every problem with one step's (or a flow's) flow-control options, as the DSL spells them, one
-- line each naming p_where, the option, the value and the fix; empty when they are valid.
-- p_options: {"priority": n, "concurrency": {"limit": n, "key": "$.path", "keyFrom": "run" |
-- "input", "scope": "name"}, "rateLimit": {"limit": n, "per": ms | "interval", "key": "$.path",
-- "keyFrom": "run" | "input"}}; absent or JSON null means unset.
create or replace function pgflow._flow_control_problems(p_where text, p_options jsonb)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  problems text[] := '{}';
  b jsonb := pgflow.flow_control_bounds();
  c jsonb := nullif(p_options -> 'concurrency', 'null'::jsonb);
  r jsonb := nullif(p_options -> 'rateLimit', 'null'::jsonb);
  v jsonb;
begin
  if r is not null then
    problems := pgflow._rate_limit_problems(p_where, r);
  end if;
  v := nullif(p_options -> 'priority', 'null'::jsonb);
  if v is not null and not (jsonb_typeof(v) = 'number' and v::text ~ '^-?[0-9]{1,10}$'
                            and (v::text)::bigint between (b -> 'priority' ->> 'min')::bigint
                                                      and (b -> 'priority' ->> 'max')::bigint) then
    problems := problems || format('%s: priority must be an integer between %s and %s (higher goes first), got %s',
      p_where, b -> 'priority' ->> 'min', b -> 'priority' ->> 'max', v);
  end if;
  if c is null then
    return problems;
  end if;
  if jsonb_typeof(c) <> 'object' then
    return problems || format('%s: concurrency must be an object such as {"limit": 3, "key": "$.customerId"}, got %s',
      p_where, left(c::text, 200));
  end if;
  v := c -> 'limit';
  if v is null or not (jsonb_typeof(v) = 'number' and v::text ~ '^-?[0-9]{1,10}$'
                       and (v::text)::bigint between (b -> 'concurrency' ->> 'min')::bigint
                                                 and (b -> 'concurrency' ->> 'max')::bigint) then
    problems := problems || format('%s: concurrency.limit must be an integer between %s and %s (tasks at once), got %s',
      p_where, b -> 'concurrency' ->> 'min', b -> 'concurrency' ->> 'max', coalesce(v::text, 'nothing'));
  end if;
  problems := problems || pgflow._limit_key_problems(p_where, 'concurrency', c, '$.customerId');
  v := nullif(c -> 'scope', 'null'::jsonb);
  if v is not null and not (jsonb_typeof(v) = 'string' and (v #>> '{}') ~ '^[A-Za-z0-9_.:-]{1,100}$') then
    problems := problems || format('%s: concurrency.scope must be 1 to 100 letters, digits, "_", ".", ":" or "-" (a name shared by the steps that share the limit, e.g. "slack-api"), got %s',
      p_where, left(v::text, 200));
  end if;
  return problems;
end;
$$;

-- The step, its row locked for a change of its flow control; an unknown step fails, naming it.
create or replace function pgflow._step_for_update(p_flow_slug text, p_step_slug text)
returns pgflow.steps
language plpgsql
volatile
set search_path = ''
as $$
declare
  step pgflow.steps;
begin
  select * into step from pgflow.steps s
  where s.flow_slug = p_flow_slug and s.step_slug = p_step_slug
  for update;
  if not found then
    raise exception 'step %.% does not exist', coalesce(p_flow_slug, 'NULL'), coalesce(p_step_slug, 'NULL')
      using errcode = '22023', hint = 'create it with pgflow.add_step first';
  end if;
  return step;
end;
$$;

-- Sets a step's flow control: its priority and its concurrency limit (NULL: none). The SQL form
-- of the DSL's options, validated the same way. The limit's value is upserted for its scope (the
-- step's own '<alias or flow>/<step>' unless concurrency_scope names a shared one), so every step
-- and version naming the scope gets the new limit; tasks already created keep the scope and key
-- they were created with. Returns the step.
create or replace function pgflow.set_step_flow_control(
  flow_slug text,
  step_slug text,
  priority integer default 0,
  concurrency integer default null,
  concurrency_key text default null,
  concurrency_key_from text default 'run',
  concurrency_scope text default null
)
returns pgflow.steps
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  step pgflow.steps;
  problems text[];
  scope text;
begin
  step := pgflow._step_for_update(set_step_flow_control.flow_slug, set_step_flow_control.step_slug);
  if concurrency is null and (concurrency_key is not null or concurrency_scope is not null) then
    raise exception 'step %.%: concurrency_key and concurrency_scope need a concurrency limit',
      step.flow_slug, step.step_slug
      using errcode = '22023', hint = 'pass concurrency => n (tasks at once), or leave the key and scope out';
  end if;
  problems := pgflow._flow_control_problems(format('step %s.%s', step.flow_slug, step.step_slug),
    jsonb_build_object('priority', priority,
                       'concurrency', case when concurrency is not null then
                         jsonb_build_object('limit', concurrency, 'key', concurrency_key,
                                            'keyFrom', concurrency_key_from, 'scope', concurrency_scope) end));
  if cardinality(problems) > 0 then
    raise exception '%', array_to_string(problems, '; ') using errcode = '22023';
  end if;
  scope := case when concurrency is not null
                then coalesce(concurrency_scope, pgflow._default_limit_scope(step.flow_slug, step.step_slug)) end;
  update pgflow.steps s
  set priority = coalesce(set_step_flow_control.priority, 0),
      concurrency_scope = scope,
      concurrency_key = set_step_flow_control.concurrency_key::jsonpath,
      concurrency_key_from = case when set_step_flow_control.concurrency_key is not null
                                  then coalesce(set_step_flow_control.concurrency_key_from, 'run') end
  where s.flow_slug = step.flow_slug and s.step_slug = step.step_slug
  returning * into step;
  if scope is not null then
    perform pgflow.set_concurrency_limit(scope, concurrency);
  end if;
  return step;
end;
$$;

-- Sets the limit of a scope (creating it), and releases at once the waiting tasks a raised limit
-- lets go. An operator's way to change a limit between deploys; the next compile of a flow that
-- names the scope sets it to that flow's value again. Returns how many tasks were released.
create or replace function pgflow.set_concurrency_limit(scope text, max_running integer)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  b jsonb := pgflow.flow_control_bounds() -> 'concurrency';
  k record;
  released integer := 0;
begin
  if max_running is null or max_running < (b ->> 'min')::integer or max_running > (b ->> 'max')::integer then
    raise exception 'set_concurrency_limit: max_running must be an integer between % and %, got %',
      b ->> 'min', b ->> 'max', coalesce(max_running::text, 'NULL')
      using errcode = '22023', hint = 'the limit is how many tasks of one key may be queued or started at once';
  end if;
  if scope is null or scope !~ '^[A-Za-z0-9_.:/-]{1,200}$' then
    raise exception 'set_concurrency_limit: invalid scope %', coalesce(quote_literal(scope), 'NULL')
      using errcode = '22023', hint = 'a scope is a step''s "<alias or flow>/<step>" or a shared name such as slack-api';
  end if;
  insert into pgflow.concurrency_limits as l (scope, max_running)
  values (set_concurrency_limit.scope, set_concurrency_limit.max_running)
  on conflict on constraint concurrency_limits_pkey do update
  set max_running = excluded.max_running, updated_at = now()
  where l.max_running is distinct from excluded.max_running;
  -- In lock order (see pgflow._release_noted).
  for k in
    select distinct t.limit_key, pgflow._limit_lock_key(t.limit_scope, t.limit_key) as lock_key
    from pgflow.step_tasks t
    where t.status = 'waiting' and t.limit_scope = set_concurrency_limit.scope
    order by 2, 1
  loop
    released := released + pgflow._release_waiting(set_concurrency_limit.scope, k.limit_key);
  end loop;
  return released;
end;
$$;

-- The startup compiler's part (0720_ensure_flow_compiled.sql). A new version (p_define) gets each
-- step's flow control from the options, the flow's as the default of a step that sets none. An
-- existing version keeps its stored priority, scopes and keys, like its other options, but the
-- limits it supplies (concurrency, and a rate limit's count and interval) are applied to its
-- steps' scopes: a limit is tuned by deploying, without a new version.
create or replace function pgflow._apply_flow_control(p_flow_slug text, p_options jsonb, p_define boolean)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  s record;
  opts jsonb;
  c jsonb;
  r jsonb;
begin
  for s in select st.step_slug, st.concurrency_scope, st.rate_scope from pgflow.steps st
           where st.flow_slug = p_flow_slug order by st.step_index loop
    opts := pgflow._effective_flow_control(p_options, s.step_slug);
    c := nullif(opts -> 'concurrency', 'null'::jsonb);
    r := nullif(opts -> 'rateLimit', 'null'::jsonb);
    if p_define and r is not null then
      perform pgflow.set_step_rate_limit(p_flow_slug, s.step_slug, (r ->> 'limit')::integer,
        pgflow._rate_per_ms(r -> 'per') * interval '1 millisecond', r ->> 'key', coalesce(r ->> 'keyFrom', 'run'));
    elsif r is not null and s.rate_scope is not null then
      perform pgflow.set_rate_limit(s.rate_scope, (r ->> 'limit')::integer,
        pgflow._rate_per_ms(r -> 'per') * interval '1 millisecond');
    end if;
    if p_define then
      if c is not null or coalesce((opts ->> 'priority')::integer, 0) <> 0 then
        perform pgflow.set_step_flow_control(p_flow_slug, s.step_slug,
          coalesce((opts ->> 'priority')::integer, 0), (c ->> 'limit')::integer, c ->> 'key',
          coalesce(c ->> 'keyFrom', 'run'), c ->> 'scope');
      end if;
    elsif c is not null and s.concurrency_scope is not null then
      perform pgflow.set_concurrency_limit(s.concurrency_scope, (c ->> 'limit')::integer);
    end if;
  end loop;
end;
$$;

-- A step's flow-control options as compiled: its own, else the flow's (each key on its own).
create or replace function pgflow._effective_flow_control(p_options jsonb, p_step_slug text)
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select jsonb_strip_nulls(jsonb_build_object(
    'priority', coalesce(nullif(p_options -> 'steps' -> p_step_slug -> 'priority', 'null'::jsonb),
                         nullif(p_options -> 'flow' -> 'priority', 'null'::jsonb)),
    'concurrency', coalesce(nullif(p_options -> 'steps' -> p_step_slug -> 'concurrency', 'null'::jsonb),
                            nullif(p_options -> 'flow' -> 'concurrency', 'null'::jsonb)),
    'rateLimit', coalesce(nullif(p_options -> 'steps' -> p_step_slug -> 'rateLimit', 'null'::jsonb),
                          nullif(p_options -> 'flow' -> 'rateLimit', 'null'::jsonb))))
$$;

-- Every flow-control problem of a compile's options, flow and steps, one line each.
create or replace function pgflow._flow_control_option_problems(p_options jsonb)
returns text[]
language sql
immutable
set search_path = ''
as $$
  select coalesce(array_agg(p order by o, p), '{}')
  from (
    select 0 as o, unnest(pgflow._flow_control_problems('flow', p_options -> 'flow')) as p
    where jsonb_typeof(p_options -> 'flow') = 'object'
    union all
    select 1, unnest(pgflow._flow_control_problems('step ' || s.key, s.value))
    from jsonb_each(case when jsonb_typeof(p_options -> 'steps') = 'object' then p_options -> 'steps'
                         else '{}'::jsonb end) s
    where jsonb_typeof(s.value) = 'object'
  ) x
$$;

-- Raises, naming the flow, when a run's priority (start_flow's) is outside the bounds.
create or replace function pgflow._check_run_priority(p_flow_slug text, p_priority integer)
returns void
language plpgsql
immutable
set search_path = ''
as $$
declare
  b jsonb := pgflow.flow_control_bounds() -> 'priority';
begin
  if p_priority is null or p_priority < (b ->> 'min')::integer or p_priority > (b ->> 'max')::integer then
    raise exception 'flow %: priority must be an integer between % and %, got %', p_flow_slug,
      b ->> 'min', b ->> 'max', coalesce(p_priority::text, 'NULL')
      using errcode = '22023', hint = 'higher goes first; 0 is the default, a nightly batch might use -10';
  end if;
end;
$$;
