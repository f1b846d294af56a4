-- Waiting steps: event steps and durable sleeps (docs/waiting.md). Such a step has no handler and
-- no message: when it becomes ready (_start_ready_steps, the run's lock held) it is started with
-- no task and waits as a row of step_states: waiting_for names the event ('' for a sleep),
-- wait_until is its deadline (an event's timeout, a sleep's end) and wait_key the correlation key
-- read from the run input. Nothing polls for it: an event moves it in send_event's transaction,
-- and the periodic tick (fire_due_schedules, already run by pg_cron's job and by every worker)
-- moves the due ones in fire_due_waits. A worker's read never sees a wait, and stalled recovery,
-- which scans started tasks, never finds one.
--
-- An event for a step that is not waiting yet is kept (pending_events) and delivered when the
-- step starts waiting; the first event of a wait wins and every later one is ignored, and
-- send_event says which happened. Lock order: a run's row, then its step states (as everywhere).

-- An event step's event name; the JSON path into the run input giving the correlation key a keyed
-- send_event matches (NULL: only addressed sends reach it).
alter table pgflow.steps add column if not exists wait_event text;
-- Paths are kept as written (jsonpath would rewrite "$.orderId" as "$.\"orderId\"", and the
-- compiler compares the shape it sends with the stored one) and cast where they are read.
alter table pgflow.steps add column if not exists wait_key_path text;
-- How long an event step waits (NULL: forever) or a sleep sleeps, in seconds; or, for a sleep,
-- the JSON path into the step's input giving the time to wake at (an ISO 8601 string).
alter table pgflow.steps add column if not exists wait_seconds integer;
alter table pgflow.steps add column if not exists wait_until_path text;
-- What an event step's timeout does: NULL fails the step (then whenExhausted decides, as for a
-- task that ran out of attempts); {"value": v} completes it with v.
alter table pgflow.steps add column if not exists on_timeout jsonb;
do $$
begin
  alter table pgflow.steps add constraint steps_wait_fits_kind check (
    (kind = 'event') = (wait_event is not null)
    and (wait_key_path is null or kind = 'event')
    and (on_timeout is null or (kind = 'event' and wait_seconds is not null and jsonb_typeof(on_timeout) = 'object'
                                and on_timeout ? 'value'))
    and (kind <> 'sleep' or (wait_seconds is null) <> (wait_until_path is null))
    and (wait_until_path is null or kind = 'sleep')
    and (kind not in ('event', 'sleep') or step_type = 'single'));
exception when duplicate_object then
  null;
end
$$;
do $$
begin
  alter table pgflow.steps add constraint steps_wait_event_is_valid check (
    wait_event is null or wait_event ~ '^[A-Za-z0-9_.:-]{1,100}$');
  alter table pgflow.steps add constraint steps_wait_paths_are_jsonpath check (
    (wait_key_path is null or wait_key_path::jsonpath is not null)
    and (wait_until_path is null or wait_until_path::jsonpath is not null));
  alter table pgflow.steps add constraint steps_wait_seconds_range check (
    wait_seconds is null or wait_seconds between 0 and 31536000);
exception when duplicate_object then
  null;
end
$$;

-- A waiting step's state: the event it waits for ('' for a sleep), its correlation key, and its
-- deadline. Kept after the wait ends, so a late keyed event finds the wait it was for (and is
-- ignored) instead of being kept for a later run with the same key.
alter table pgflow.step_states add column if not exists waiting_for text;
alter table pgflow.step_states add column if not exists wait_key text;
alter table pgflow.step_states add column if not exists wait_until timestamptz;
-- Keyed sends: the waits of one (event, key). Partial: a task step's state never enters it.
create index if not exists step_states_wait_key_idx on pgflow.step_states (waiting_for, wait_key)
  where waiting_for is not null;
-- The tick's search for due waits. Partial on started: a finished wait leaves it.
create index if not exists step_states_wait_until_idx on pgflow.step_states (wait_until)
  where wait_until is not null and status = 'started';

-- Events that arrived before their step waited, kept until keep_until (send_event's keep, one day
-- by default) and pruned by the tick after that. Addressed (run_id and step_slug) or keyed
-- (event_name and correlation_key, run_id NULL). No foreign key to runs, like restart_of_run_id:
-- a run pruned or deleted leaves its pending events to expire.
create table if not exists pgflow.pending_events (
  event_id bigint generated always as identity,
  event_name text not null,
  run_id uuid,
  step_slug text,
  correlation_key text,
  payload jsonb not null,
  received_at timestamptz not null default clock_timestamp(),
  keep_until timestamptz not null,
  constraint pending_events_pkey primary key (event_id),
  constraint pending_events_address check ((run_id is null) = (step_slug is null)
                                           and (run_id is not null or correlation_key is not null))
);
-- One pending event per address: the first wins (send_event reports the others as duplicates).
create unique index if not exists pending_events_step_key on pgflow.pending_events (run_id, step_slug)
  where run_id is not null;
create unique index if not exists pending_events_correlation_key on pgflow.pending_events (event_name, correlation_key)
  where run_id is null;
create index if not exists pending_events_keep_until_idx on pgflow.pending_events (keep_until);

-- Per-wait tokens for webhooks: a caller holding one may send that one wait's event, once, before
-- it expires, and nothing else. Only the token's SHA-256 is stored, so reading this table gives
-- nobody a token. No foreign key to runs (see pending_events).
create table if not exists pgflow.wait_tokens (
  token_hash bytea not null,
  run_id uuid not null,
  step_slug text not null,
  created_at timestamptz not null default clock_timestamp(),
  expires_at timestamptz not null,
  used_at timestamptz,
  constraint wait_tokens_pkey primary key (token_hash)
);
create index if not exists wait_tokens_expires_at_idx on pgflow.wait_tokens (expires_at);

-- Starts a ready event or sleep step's wait (its row is 'started' already): records what it waits
-- for and until when, then takes a pending event for it, or completes a sleep already due. True
-- when the step finished at once (the caller then looks for newly ready steps). The caller holds
-- the run's lock.
create or replace function pgflow._start_wait(p_run_id uuid, p_step_slug text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  step pgflow.steps;
  run pgflow.runs;
  key text;
  deadline timestamptz;
  at_text text;
  pending pgflow.pending_events;
begin
  select r.* into run from pgflow.runs r where r.run_id = p_run_id;
  select s.* into step from pgflow.steps s where s.flow_slug = run.flow_slug and s.step_slug = p_step_slug;
  if step.kind = 'sleep' and step.wait_until_path is not null then
    at_text := jsonb_path_query_first(
      (select o from pgflow._task_input(p_run_id, run.flow_slug, p_step_slug, 0) o), step.wait_until_path::jsonpath) #>> '{}';
    begin
      deadline := at_text::timestamptz;
    exception when others then
      deadline := null;
    end;
    if deadline is null then
      perform pgflow._fail_run(p_run_id, p_step_slug,
        format('[TYPE_VIOLATION] sleep step %s: %s in its input must be a time such as "2026-05-01T12:00:00Z", got %s',
               p_step_slug, step.wait_until_path, coalesce(quote_literal(at_text), 'nothing')));
      return true;
    end if;
  elsif step.wait_seconds is not null then
    deadline := clock_timestamp() + make_interval(secs => step.wait_seconds);
  end if;
  if step.wait_key_path is not null then
    key := jsonb_path_query_first(run.input, step.wait_key_path::jsonpath) #>> '{}';
  end if;
  update pgflow.step_states ss
  set waiting_for = coalesce(step.wait_event, ''), wait_key = key, wait_until = deadline,
      remaining_tasks = 1, initial_tasks = 1
  where ss.run_id = p_run_id and ss.step_slug = p_step_slug;

  if step.kind = 'sleep' then
    if deadline <= clock_timestamp() then
      perform pgflow._complete_step(p_run_id, p_step_slug, pgflow._wait_time_json(deadline));
      return true;
    end if;
    return false;
  end if;
  -- An event that came early: addressed to this step, else the oldest keyed one for its key. A
  -- keyed sender that found no wait takes the same lock before it keeps its event, so the two
  -- cannot miss each other (see send_event).
  if key is not null then
    perform pg_advisory_xact_lock(pgflow._event_key_lock(step.wait_event, key));
  end if;
  delete from pgflow.pending_events e
  where e.event_id = (
    select e2.event_id from pgflow.pending_events e2
    where e2.keep_until > clock_timestamp()
      and ((e2.run_id = p_run_id and e2.step_slug = p_step_slug)
           or (key is not null and e2.run_id is null and e2.event_name = step.wait_event
               and e2.correlation_key = key))
    order by e2.run_id nulls last, e2.event_id
    limit 1
    for update skip locked)
  returning e.* into pending;
  if pending.event_id is not null then
    perform pgflow._complete_step(p_run_id, p_step_slug, pending.payload);
    return true;
  end if;
  return false;
end;
$$;

-- The advisory lock of one (event, correlation key): taken by a keyed send that found no wait and
-- by a wait starting with that key, so an event kept at the same moment a wait starts is not lost.
create or replace function pgflow._event_key_lock(p_event text, p_key text)
returns bigint
language sql
immutable
set search_path = ''
as $$
  select hashtextextended('pgflow.event' || chr(31) || p_event || chr(31) || p_key, 0)
$$;

-- A time as get_run writes times (ISO 8601, UTC, microseconds), as JSON: a sleep's output.
create or replace function pgflow._wait_time_json(p_at timestamptz)
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select to_jsonb(to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
$$;

-- Delivers an event to one step of one run, or keeps it, or says why not. The run's lock is taken
-- here. One result: {"run_id", "step_slug", "status": "delivered" | "kept" | "ignored", "reason"}.
create or replace function pgflow._deliver_event(p_run_id uuid, p_step_slug text, p_payload jsonb, p_keep interval)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  run pgflow.runs;
  state pgflow.step_states;
  step pgflow.steps;
  result jsonb := jsonb_build_object('run_id', p_run_id, 'step_slug', p_step_slug);
begin
  select r.* into run from pgflow.runs r where r.run_id = p_run_id for update;
  select ss.* into state from pgflow.step_states ss where ss.run_id = p_run_id and ss.step_slug = p_step_slug;
  select s.* into step from pgflow.steps s where s.flow_slug = run.flow_slug and s.step_slug = p_step_slug;
  if run.run_id is null then
    return result || jsonb_build_object('status', 'ignored', 'reason', 'no such run');
  elsif run.status <> 'started' then
    return result || jsonb_build_object('status', 'ignored', 'reason', 'run ' || run.status);
  elsif state.status = 'started' then
    -- The wait ends here: later events find it completed.
    perform pgflow._complete_step(p_run_id, p_step_slug, p_payload);
    perform pgflow._start_ready_steps(p_run_id);
    return result || jsonb_build_object('status', 'delivered');
  elsif state.status = 'created' then
    insert into pgflow.pending_events (event_name, run_id, step_slug, payload, keep_until)
    values (step.wait_event, p_run_id, p_step_slug, p_payload, clock_timestamp() + p_keep)
    on conflict (run_id, step_slug) where run_id is not null do nothing;
    if not found then
      return result || jsonb_build_object('status', 'ignored', 'reason', 'an earlier event is kept for this step');
    end if;
    return result || jsonb_build_object('status', 'kept', 'keep_until', pgflow._wait_time_json(clock_timestamp() + p_keep));
  end if;
  return result || jsonb_build_object('status', 'ignored', 'reason', 'step ' || state.status);
end;
$$;

-- Sends an event (docs/waiting.md). Addressed: to run_id, to its step step_slug, or to the step of
-- its flow that waits for event_name. Keyed (run_id NULL): to every step waiting for event_name
-- whose correlation key (steps.wait_key_path read from the run input) equals key; when none waits,
-- it is kept for the first that will, for keep. Returns {"event", "results": [one per step: see
-- _deliver_event]}; a keyed event that reached no wait and was not kept says why in one result
-- with no run. The payload is the step's output as sent: never logged, never in an error.
--
-- security definer, like start_flow: granted to service_role only (0900_privileges.sql). An
-- end user's approval goes through a wrapper of yours that checks the run is theirs
-- (docs/permissions.md).
create or replace function pgflow.send_event(
  event_name text,
  payload jsonb default 'null'::jsonb,
  run_id uuid default null,
  step_slug text default null,
  key text default null,
  keep interval default interval '1 day'
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
-- The conflict target below names columns that are also parameters; every parameter is qualified.
#variable_conflict use_column
declare
  flow text;
  target text;
  results jsonb := '[]'::jsonb;
  waiting record;
  any_wait boolean := false;
begin
  if send_event.event_name is null or send_event.event_name !~ '^[A-Za-z0-9_.:-]{1,100}$' then
    raise exception 'send_event: event name % is not valid', coalesce(quote_literal(send_event.event_name), 'NULL')
      using errcode = '22023', hint = 'use 1 to 100 letters, digits, _ . : or -, as in the step''s event option';
  end if;
  if send_event.keep is null or send_event.keep < interval '0' or send_event.keep > interval '30 days' then
    raise exception 'send_event: keep % is out of range', coalesce(send_event.keep::text, 'NULL')
      using errcode = '22023', hint = 'keep an early event between 0 and 30 days (default 1 day)';
  end if;
  payload := coalesce(send_event.payload, 'null'::jsonb);
  if send_event.run_id is not null then
    select r.flow_slug into flow from pgflow.runs r where r.run_id = send_event.run_id;
    if flow is null then
      return jsonb_build_object('event', send_event.event_name, 'results', jsonb_build_array(
        jsonb_build_object('run_id', send_event.run_id, 'step_slug', send_event.step_slug,
                           'status', 'ignored', 'reason', 'no such run')));
    end if;
    select s.step_slug into target from pgflow.steps s
    where s.flow_slug = flow and s.kind = 'event' and s.wait_event = send_event.event_name
      and (send_event.step_slug is null or s.step_slug = send_event.step_slug)
    order by s.step_index limit 1;
    if target is null then
      raise exception 'send_event: flow % has no event step% waiting for event %', flow,
        coalesce(' ' || quote_literal(send_event.step_slug), ''), quote_literal(send_event.event_name)
        using errcode = '22023',
          hint = format('send the event name the step declares (its steps waiting for events: %s)',
            coalesce((select string_agg(format('%s waits for %s', s.step_slug, s.wait_event), ', ' order by s.step_index)
                      from pgflow.steps s where s.flow_slug = flow and s.kind = 'event'), 'none'));
    end if;
    return jsonb_build_object('event', send_event.event_name, 'results',
      jsonb_build_array(pgflow._deliver_event(send_event.run_id, target, payload, send_event.keep)));
  end if;
  if send_event.key is null then
    raise exception 'send_event: event % names neither a run nor a key', quote_literal(send_event.event_name)
      using errcode = '22023', hint = 'pass run_id (and optionally step_slug), or key for the steps whose key path matches it';
  end if;
  -- Every wait for (event, key), in run order so concurrent senders lock runs in the same order.
  for waiting in
    select ss.run_id, ss.step_slug from pgflow.step_states ss
    where ss.waiting_for = send_event.event_name and ss.wait_key = send_event.key
    order by ss.run_id, ss.step_slug
  loop
    any_wait := true;
    results := results || pgflow._deliver_event(waiting.run_id, waiting.step_slug, payload, send_event.keep);
  end loop;
  if not any_wait then
    -- No wait for the key. A wait starting now holds this lock from its start to its commit
    -- (_start_wait): once it is ours, such a wait is committed and found by the search again,
    -- or it starts after our commit and takes the kept event.
    perform pg_advisory_xact_lock(pgflow._event_key_lock(send_event.event_name, send_event.key));
    for waiting in
      select ss.run_id, ss.step_slug from pgflow.step_states ss
      where ss.waiting_for = send_event.event_name and ss.wait_key = send_event.key
      order by ss.run_id, ss.step_slug
    loop
      any_wait := true;
      results := results || pgflow._deliver_event(waiting.run_id, waiting.step_slug, payload, send_event.keep);
    end loop;
  end if;
  if not any_wait then
    insert into pgflow.pending_events (event_name, correlation_key, payload, keep_until)
    values (send_event.event_name, send_event.key, payload, clock_timestamp() + send_event.keep)
    on conflict (event_name, correlation_key) where run_id is null do nothing;
    results := jsonb_build_array(case when found
      then jsonb_build_object('run_id', null, 'step_slug', null, 'status', 'kept',
                              'keep_until', pgflow._wait_time_json(clock_timestamp() + send_event.keep))
      else jsonb_build_object('run_id', null, 'step_slug', null, 'status', 'ignored',
                              'reason', 'an earlier event is kept for this key') end);
  end if;
  return jsonb_build_object('event', send_event.event_name, 'results', results);
end;
$$;

-- A token that lets its holder send one wait's event once, for expires_in (docs/waiting.md): give
-- it to the service that will call your webhook. Can be made before the step waits (an early
-- event is kept as usual). The token is 256 random bits, hex; only its SHA-256 is stored.
create or replace function pgflow.create_wait_token(
  run_id uuid, step_slug text, expires_in interval default interval '7 days'
)
returns text
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  token text := encode(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex');
begin
  if not exists (select 1 from pgflow.runs r join pgflow.steps s on s.flow_slug = r.flow_slug
                 where r.run_id = create_wait_token.run_id and s.step_slug = create_wait_token.step_slug
                   and s.kind = 'event') then
    raise exception 'create_wait_token: run % has no event step %', create_wait_token.run_id,
      coalesce(quote_literal(create_wait_token.step_slug), 'NULL')
      using errcode = '22023', hint = 'name a run and one of its flow''s event steps';
  end if;
  if create_wait_token.expires_in is null or create_wait_token.expires_in <= interval '0'
     or create_wait_token.expires_in > interval '366 days' then
    raise exception 'create_wait_token: expires_in % is out of range', coalesce(create_wait_token.expires_in::text, 'NULL')
      using errcode = '22023', hint = 'pass an interval above 0 and at most 366 days (default 7 days)';
  end if;
  -- gen_random_uuid() is a version 4 UUID: 122 random bits each, 244 in the token.
  insert into pgflow.wait_tokens (token_hash, run_id, step_slug, expires_at)
  values (sha256(convert_to(token, 'UTF8')), create_wait_token.run_id, create_wait_token.step_slug,
          clock_timestamp() + create_wait_token.expires_in);
  return token;
end;
$$;

-- Sends the event of the wait a token was made for (create_wait_token), once. Refuses an unknown,
-- used or expired token with {"status": "refused", "reason"}, without saying which run it named;
-- otherwise the token is spent and the result is send_event's for that run and step.
create or replace function pgflow.send_event_with_token(token text, payload jsonb default 'null'::jsonb)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  t pgflow.wait_tokens;
  event text;
begin
  select w.* into t from pgflow.wait_tokens w
  where w.token_hash = sha256(convert_to(coalesce(send_event_with_token.token, ''), 'UTF8'))
  for update;
  if t.token_hash is null then
    return jsonb_build_object('status', 'refused', 'reason', 'unknown token');
  elsif t.used_at is not null then
    return jsonb_build_object('status', 'refused', 'reason', 'token already used');
  elsif t.expires_at <= clock_timestamp() then
    return jsonb_build_object('status', 'refused', 'reason', 'token expired');
  end if;
  update pgflow.wait_tokens w set used_at = clock_timestamp() where w.token_hash = t.token_hash;
  select s.wait_event into event from pgflow.runs r
  join pgflow.steps s on s.flow_slug = r.flow_slug and s.step_slug = t.step_slug
  where r.run_id = t.run_id;
  if event is null then
    return jsonb_build_object('status', 'refused', 'reason', 'the run is gone');
  end if;
  return pgflow._deliver_event(t.run_id, t.step_slug, coalesce(send_event_with_token.payload, 'null'::jsonb),
                               interval '1 day') || jsonb_build_object('event', event);
end;
$$;

-- Ends every wait whose deadline has passed (at most 1,000 per call; the next tick takes the rest):
-- a sleep completes with its wake time, an event step's timeout completes it with its onTimeout
-- value or fails it (whenExhausted then decides, as for a task out of attempts). Then prunes
-- expired pending events and tokens. Run by the tick (fire_due_schedules), so every ticker fires
-- waits; any number at once is safe: a run another ticker holds is skipped until the next tick.
-- Returns how many waits it ended.
create or replace function pgflow.fire_due_waits(now timestamptz default clock_timestamp())
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  due record;
  locked uuid;
  ended integer := 0;
begin
  for due in
    select ss.run_id, ss.step_slug, ss.wait_until, ss.waiting_for, s.kind, s.on_timeout, s.when_exhausted, s.wait_seconds
    from pgflow.step_states ss
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    where ss.wait_until is not null and ss.status = 'started' and ss.wait_until <= fire_due_waits.now
    order by ss.wait_until
    limit 1000
  loop
    select r.run_id into locked from pgflow.runs r
    where r.run_id = due.run_id and r.status = 'started' for update skip locked;
    continue when locked is null;
    -- Re-read under the lock: an event may have ended the wait since the search.
    continue when not exists (select 1 from pgflow.step_states ss
                              where ss.run_id = due.run_id and ss.step_slug = due.step_slug
                                and ss.status = 'started' and ss.wait_until <= fire_due_waits.now);
    if due.kind = 'sleep' then
      perform pgflow._complete_step(due.run_id, due.step_slug, pgflow._wait_time_json(due.wait_until));
    elsif due.on_timeout is not null then
      perform pgflow._complete_step(due.run_id, due.step_slug, due.on_timeout -> 'value');
    elsif due.when_exhausted = 'fail' then
      perform pgflow._fail_run(due.run_id, due.step_slug,
        format('[WAIT_TIMEOUT] step %s: no %s event within %s s', due.step_slug, quote_literal(due.waiting_for),
               due.wait_seconds));
    else
      perform pgflow._skip_step(due.run_id, due.step_slug, 'wait_timeout', due.when_exhausted = 'skip-cascade');
    end if;
    perform pgflow._start_ready_steps(due.run_id);
    ended := ended + 1;
  end loop;
  delete from pgflow.pending_events e
  where e.event_id in (select e2.event_id from pgflow.pending_events e2
                       where e2.keep_until <= fire_due_waits.now limit 1000);
  delete from pgflow.wait_tokens w
  where w.token_hash in (select w2.token_hash from pgflow.wait_tokens w2
                         where w2.expires_at <= fire_due_waits.now - interval '1 day' limit 1000);
  return ended;
end;
$$;

-- A waiting step's part of the shape (src/compile/shape.ts: StepShape.wait), as the compiler sends
-- it: {"kind": "event", "event", "key"?, "seconds"?, "onTimeout"?: {"value"}} or
-- {"kind": "sleep", "seconds" | "until"}. NULL for any other kind.
create or replace function pgflow._wait_shape(s pgflow.steps)
returns jsonb
language sql
immutable
set search_path = ''
as $$
  select case when s.kind in ('event', 'sleep') then
    jsonb_build_object('kind', s.kind)
    || case when s.wait_event is null then '{}'::jsonb else jsonb_build_object('event', s.wait_event) end
    || case when s.wait_key_path is null then '{}'::jsonb else jsonb_build_object('key', s.wait_key_path) end
    || case when s.wait_seconds is null then '{}'::jsonb else jsonb_build_object('seconds', s.wait_seconds) end
    || case when s.wait_until_path is null then '{}'::jsonb else jsonb_build_object('until', s.wait_until_path) end
    || case when s.on_timeout is null then '{}'::jsonb else jsonb_build_object('onTimeout', s.on_timeout) end
  end
$$;

-- What is wrong with step i's "wait" in a shape sent to ensure_flow_compiled, one line per problem.
create or replace function pgflow._wait_step_problems(p_step jsonb, i integer)
returns text[]
language plpgsql
immutable
set search_path = ''
as $$
declare
  w jsonb := p_step -> 'wait';
  problems text[] := '{}';
begin
  if w is null then
    return problems;
  end if;
  if jsonb_typeof(w) <> 'object' or (w ->> 'kind') is null or (w ->> 'kind') not in ('event', 'sleep') then
    return array[format('step %s: wait must be {"kind": "event" | "sleep", ...}', i)];
  end if;
  if p_step ->> 'stepType' <> 'single' then
    problems := problems || format('step %s: a waiting step cannot be a map', i);
  end if;
  if (w ->> 'kind') = 'event' and (jsonb_typeof(w -> 'event') is distinct from 'string'
                                  or (w ->> 'event') !~ '^[A-Za-z0-9_.:-]{1,100}$') then
    problems := problems || format('step %s: the event name must be 1 to 100 letters, digits, _ . : or -', i);
  end if;
  if w ? 'seconds' and (jsonb_typeof(w -> 'seconds') <> 'number' or (w ->> 'seconds')::numeric <> floor((w ->> 'seconds')::numeric)
                        or (w ->> 'seconds')::numeric not between 0 and 31536000) then
    problems := problems || format('step %s: wait seconds must be a whole number from 0 to 31536000 (a year)', i);
  end if;
  if (w ->> 'kind') = 'sleep' and (w ? 'seconds') = (w ? 'until') then
    problems := problems || format('step %s: a sleep needs exactly one of seconds and until', i);
  end if;
  if w ? 'onTimeout' and (jsonb_typeof(w -> 'onTimeout') <> 'object' or not (w -> 'onTimeout') ? 'value'
                          or not w ? 'seconds' or (w ->> 'kind') <> 'event') then
    problems := problems || format('step %s: onTimeout must be {"value": ...} on an event step with a timeout', i);
  end if;
  begin
    perform (w ->> 'key')::jsonpath, (w ->> 'until')::jsonpath;
  exception when others then
    problems := problems || format('step %s: key and until must be JSON paths such as "$.orderId"', i);
  end;
  return problems;
end;
$$;

-- Records step p_step_slug's wait (its "wait" in the shape, checked by _wait_step_problems).
create or replace function pgflow._set_wait(p_flow_slug text, p_step_slug text, p_wait jsonb)
returns void
language sql
volatile
set search_path = ''
as $$
  update pgflow.steps s
  set kind = p_wait ->> 'kind', wait_event = p_wait ->> 'event', wait_key_path = p_wait ->> 'key',
      wait_seconds = (p_wait ->> 'seconds')::integer, wait_until_path = p_wait ->> 'until',
      on_timeout = p_wait -> 'onTimeout'
  where s.flow_slug = p_flow_slug and s.step_slug = p_step_slug
$$;
