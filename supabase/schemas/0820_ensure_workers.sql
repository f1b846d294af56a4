-- The keep-alive. Picks the enabled worker functions that have no live worker and whose debounce
-- has passed, records the invocation, and (where Supabase provides pg_net and the project URL is
-- in Vault) pings each function over HTTP so it starts a worker. A disabled function is never
-- pinged: that is what keeps a deploy fence closed. net.http_post and vault.decrypted_secrets are
-- used only when they are members of the pg_net and supabase_vault extensions
-- (pgflow._trusted_integration): this runs as its owner, often from pg_cron, and must never run a
-- function someone planted under those names.
create or replace function pgflow.ensure_workers()
returns table (function_name text, pinged boolean)
language plpgsql
volatile
set search_path = ''
as $$
#variable_conflict use_column
declare
  fn record;
  base_url text;
  auth text;
  can_ping boolean := pgflow._trusted_integration('pg_net') and pgflow._trusted_integration('vault');
begin
  if can_ping then
    execute $q$select max(decrypted_secret) filter (where name = 'supabase_project_url'),
                      coalesce(max(decrypted_secret) filter (where name = 'pgflow_auth_secret'),
                               max(decrypted_secret) filter (where name = 'supabase_service_role_key'))
               from vault.decrypted_secrets$q$ into base_url, auth;
    can_ping := base_url is not null and auth is not null;
  end if;
  for fn in
    update pgflow.worker_functions wf set last_invoked_at = now()
    where wf.enabled
      and (wf.last_invoked_at is null or wf.last_invoked_at < now() - wf.debounce)
      -- Read by heartbeat range (pgflow._recent_workers): this runs every few seconds, and must
      -- not scan every worker the function ever had.
      and not exists (
        select 1 from pgflow._recent_workers(clock_timestamp() - wf.debounce) w
        where w.function_name = wf.function_name and w.live)
    returning wf.function_name
  loop
    if can_ping then
      execute 'select net.http_post(url => $1, headers => $2, body => ''{}''::jsonb)'
      using rtrim(base_url, '/') || '/functions/v1/' || fn.function_name,
            jsonb_build_object('Content-Type', 'application/json', 'Authorization', 'Bearer ' || auth);
    end if;
    function_name := fn.function_name;
    pinged := can_ping;
    return next;
  end loop;
end;
$$;

-- The pg_cron schedule of a keep-alive interval: '<n> seconds' for whole seconds from 1 to 59
-- (pg_cron 1.5 or later runs those), cron syntax for whole minutes that divide an hour. Anything
-- else is refused, naming the value and what is accepted: pg_cron could only run it at another
-- interval than the one asked for (119.6 seconds would become every 2 minutes).
create or replace function pgflow._keep_alive_schedule(p_keep_alive interval)
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  seconds numeric := extract(epoch from p_keep_alive);
begin
  if seconds = pg_catalog.trunc(seconds) then
    if seconds between 1 and 59 then
      return seconds::integer || ' seconds';
    end if;
    if seconds between 60 and 3600 and seconds % 60 = 0 and 60 % (seconds / 60) = 0 then
      return case seconds when 60 then '* * * * *' when 3600 then '0 * * * *'
                          else '*/' || (seconds::integer / 60) || ' * * * *' end;
    end if;
  end if;
  raise exception 'keep_alive % is not an interval pg_cron can run exactly', coalesce(p_keep_alive::text, 'NULL')
    using errcode = '22023',
      hint = 'use whole seconds from 1 to 59 (pg_cron 1.5 or later), or whole minutes that divide an hour (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60)';
end;
$$;

-- Schedules ensure_workers, requeue_stalled_tasks and fire_due_schedules with pg_cron (Supabase
-- has it; elsewhere the worker's own periodic recovery and schedule ticks, and an external
-- keep-alive, do the same job). The keep-alive's
-- schedule is _keep_alive_schedule's, checked before anything else; seconds need pg_cron 1.5 or
-- later (older versions run a job at most once a minute: Debian 12's postgresql-15-cron is 1.4).
create or replace function pgflow.schedule_maintenance(keep_alive interval default '5 seconds')
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  keep_alive_schedule text := pgflow._keep_alive_schedule(keep_alive);
  version text;
  sub_minute boolean;
begin
  if to_regprocedure('cron.schedule(text, text, text)') is null then
    raise exception 'pg_cron is not installed' using errcode = '0A000',
      hint = 'enable pg_cron, or call pgflow.ensure_workers() from an external scheduler';
  end if;
  -- Called with the caller's rights (usually the owner's): only pg_cron's own function.
  if not pgflow._trusted_integration('pg_cron') then
    raise exception 'cron.schedule(text, text, text) is not a member of the pg_cron extension; it was not called'
      using errcode = '42501',
        hint = 'a function of that name was created outside pg_cron: drop it and create extension pg_cron, or call pgflow.ensure_workers() from an external scheduler';
  end if;
  select e.extversion into version from pg_catalog.pg_extension e where e.extname = 'pg_cron';
  sub_minute := pg_catalog.string_to_array(pg_catalog.split_part(version, '-', 1), '.')::integer[]
                >= array[1, 5];
  if keep_alive_schedule like '% seconds' and not sub_minute then
    raise exception 'keep_alive % needs pg_cron 1.5 or later (this database has pg_cron %, which runs jobs at most once a minute)',
      keep_alive, version
      using errcode = '22023',
        hint = 'pass keep_alive => interval ''1 minute'', or upgrade pg_cron';
  end if;
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_ensure_workers', keep_alive_schedule, 'select pgflow.ensure_workers()';
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_requeue_stalled_tasks', case when sub_minute then '15 seconds' else '* * * * *' end,
        'select pgflow.requeue_stalled_tasks()';
  -- One job fires every schedule's ticks (0270_schedules.sql); workers tick too, harmlessly.
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_fire_due_schedules', case when sub_minute then '1 seconds' else '* * * * *' end,
        'select pgflow.fire_due_schedules()';
end;
$$;
