-- Who may manage schedules (docs/permissions.md): service_role, as it may start runs. The write
-- functions are security definer (0270_schedules.sql), so it needs no write access to the tables;
-- it reads them to list schedules and their ticks. Firing ticks (fire_due_schedules) stays with the
-- owner: pg_cron's job and the workers run as the owner. 0900 created service_role where it could.
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'service_role') then
    grant execute on function
      pgflow.create_schedule(text, text, text, jsonb, text, interval, text, integer, boolean),
      pgflow.update_schedule(text, text, text, jsonb, text, interval, text, integer),
      pgflow.pause_schedule(text), pgflow.resume_schedule(text), pgflow.delete_schedule(text),
      pgflow.list_schedules(), pgflow.cron_next_times(text, text, timestamptz, integer)
      to service_role;
    grant select on pgflow.schedules, pgflow.schedule_ticks to service_role;
  end if;
end
$$;
