-- PROPOSED FIX for supabase/schemas/0820_ensure_workers.sql (the lead's; see the edge branch's
-- report). Applied by keep_alive_test.ts over the shipped function until the schema has it: delete
-- this file and its use there once it does.
--
-- pg_cron before 1.5 (Debian 12's postgresql-15-cron is 1.4.2) knows no '<n> seconds' schedules:
-- the shipped function fails there with "invalid schedule: 5 seconds", and even on 1.5+ a
-- keep_alive of a minute or more became '60 seconds', which no pg_cron accepts. This version picks
-- a schedule pg_cron can run: '<n> seconds' for 1-59 s where pg_cron is 1.5 or later, cron syntax
-- for whole minutes up to an hour, and otherwise an error that names the value and the fix.
create or replace function pgflow.schedule_maintenance(keep_alive interval default '5 seconds')
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  seconds numeric := extract(epoch from keep_alive);
  version text;
  sub_minute boolean;
  keep_alive_schedule text;
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
  if seconds >= 1 and seconds < 60 and seconds = pg_catalog.trunc(seconds) then
    if not sub_minute then
      raise exception 'keep_alive % needs pg_cron 1.5 or later (this database has pg_cron %, which runs jobs at most once a minute)',
        keep_alive, version
        using errcode = '22023',
          hint = 'pass keep_alive => interval ''1 minute'', or upgrade pg_cron';
    end if;
    keep_alive_schedule := seconds::integer || ' seconds';
  elsif seconds >= 60 and seconds <= 3600 and seconds::integer % 60 = 0 and 60 % (seconds::integer / 60) = 0 then
    keep_alive_schedule := case when seconds = 60 then '* * * * *'
                                else '*/' || (seconds::integer / 60) || ' * * * *' end;
  else
    raise exception 'keep_alive % is not a schedule pg_cron can run', keep_alive
      using errcode = '22023',
        hint = 'use whole seconds from 1 to 59 (pg_cron 1.5 or later), or whole minutes that divide an hour (1, 2, 3, 5, 10, 15, 20, 30, 60)';
  end if;
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_ensure_workers', keep_alive_schedule, 'select pgflow.ensure_workers()';
  execute 'select cron.schedule($1, $2, $3)'
  using 'pgflow_requeue_stalled_tasks', case when sub_minute then '15 seconds' else '* * * * *' end,
        'select pgflow.requeue_stalled_tasks()';
end;
$$;
