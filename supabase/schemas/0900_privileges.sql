-- No pgflow function is executable by PUBLIC (and so by anon or authenticated on Supabase). The
-- owner (postgres on Supabase) runs workers and maintenance. Grants are explicit and documented in
-- docs/permissions.md.
revoke execute on all functions in schema pgflow from public;

-- service_role (supabase-js with the service key; server code only) may start runs, read them and
-- act on them: start_flow, start_flows, cancel_run, retry_run and resume_run (security definer, so no write
-- access to tables or queues is needed), get_run, get_run_text, list_runs and waiting_tasks (read
-- with the caller's select rights) and select on the definition and run tables, the attempt
-- history and the concurrency limits. Nothing else: it
-- cannot claim, complete or fail tasks, change definitions or touch workers. Where the role does not exist (plain Postgres) it is created
-- without login, so the grant model is the same everywhere; grant it to your own backend role. A
-- migrating role that may not create roles skips this with a notice, and nothing is granted.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'service_role') then
    begin
      create role service_role nologin;
    exception when insufficient_privilege or duplicate_object then
      raise notice 'pgflow: role service_role was not created: %', sqlerrm;
    end;
  end if;
  if exists (select 1 from pg_roles where rolname = 'service_role') then
    grant usage on schema pgflow to service_role;
    grant execute on function pgflow.start_flow(text, jsonb, uuid, integer, text) to service_role;
    grant execute on function pgflow.start_flows(text, jsonb, integer, text) to service_role;
    grant execute on function pgflow.get_run(uuid), pgflow.get_run_text(uuid) to service_role;
    grant execute on function pgflow.cancel_run(uuid, text) to service_role;
    grant execute on function pgflow.retry_run(uuid, boolean, jsonb) to service_role;
    grant execute on function pgflow.resume_run(uuid, boolean) to service_role;
    grant execute on function pgflow.list_runs(text, text, timestamptz, text, integer, boolean) to service_role;
    grant execute on function pgflow.list_aliases() to service_role;
    -- A client that LISTENs for its runs says so, or nothing is sent (0045_listeners.sql).
    grant execute on function pgflow.listen_start(text[]), pgflow.listen_stop(text[]),
      pgflow.listen_barrier(text[]) to service_role;
    -- Waiting tasks and why they wait (flow control): get_run reads them for its steps, and a
    -- client may list them per queue.
    grant execute on function pgflow.waiting_tasks(text),
      pgflow.waiting_reason(text, text, bigint, integer),
      pgflow.rate_waiting_reason(text, text, integer, interval, timestamptz),
      pgflow._waiting_why(boolean, text, text, timestamptz),
      pgflow._rate_recent(text, text, interval, timestamptz) to service_role;
    -- Events (0280_events.sql): sending one completes a wait, so it is a server's act, like
    -- start_flow; an end user's send goes through a wrapper that checks the run is theirs.
    grant execute on function pgflow.send_event(text, jsonb, uuid, text, text, interval),
      pgflow.create_wait_token(uuid, text, interval), pgflow.send_event_with_token(text, jsonb) to service_role;
    grant select on pgflow.flows, pgflow.steps, pgflow.deps, pgflow.runs, pgflow.step_states,
      pgflow.step_tasks, pgflow.task_attempts, pgflow.aliases, pgflow.concurrency_limits,
      pgflow.rate_limits, pgflow.rate_limit_windows, pgflow.fair_windows, pgflow.queue_cursors to service_role;
  end if;
end
$$;
