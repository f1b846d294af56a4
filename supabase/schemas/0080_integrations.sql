-- Optional integrations: Supabase Realtime (realtime.send), pg_net (net.http_post), Vault
-- (vault.decrypted_secrets) and pg_cron (cron.schedule). The engine calls them where they are
-- installed, from functions that run with their owner's rights (the run-event triggers fire inside
-- the security definer start_flow; ensure_workers and schedule_maintenance run as the owner or as
-- pg_cron). So "a schema of that name exists" is not enough: on a database without the
-- integration, any role allowed to create a schema could plant a function of that name and have
-- the engine's owner run it (a planted realtime.send ran `alter role ... superuser` through the
-- next start_flow). An integration is used only when the object found is the real one:
--
-- - pg_net, Vault and pg_cron are extensions: the object must be a member of that extension
--   (pg_depend). Only a superuser, or the installer of a trusted extension, can make an object a
--   member, and the extension's name is the one its control file on the server gives.
-- - Realtime is not an extension: Supabase's Realtime service creates realtime.send, owned by
--   supabase_realtime_admin (older projects: supabase_admin). The function must be owned by a
--   superuser or by one of those two platform roles; a role that may only create schemas can make
--   neither, and cannot hand a function it created to them.
--
-- Every check reads the catalogs at call time (a project that adds an integration later needs no
-- migration) and nothing is cached in settings: a setting can be set by any session, so it could
-- vouch for a planted function.
create or replace function pgflow._extension_member(p_class regclass, p_object oid, p_extension text)
returns boolean
language sql
stable
set search_path = ''
as $$
  select exists (
    select 1
    from pg_catalog.pg_depend d
    join pg_catalog.pg_extension e on e.oid = d.refobjid
    where d.classid = p_class and d.objid = p_object
      and d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass and d.deptype = 'e'
      and e.extname = p_extension)
$$;

-- Whether an optional integration is present and really the one it claims to be: 'realtime'
-- (realtime.send(jsonb, text, text, boolean)), 'pg_net' (every net.http_post), 'vault'
-- (vault.decrypted_secrets) or 'pg_cron' (cron.schedule(text, text, text)).
create or replace function pgflow._trusted_integration(p_name text)
returns boolean
language plpgsql
stable
set search_path = ''
as $$
declare
  target oid;
begin
  case p_name
  when 'realtime' then
    target := pg_catalog.to_regprocedure('realtime.send(jsonb, text, text, boolean)');
    return target is not null and exists (
      select 1 from pg_catalog.pg_proc p join pg_catalog.pg_roles r on r.oid = p.proowner
      where p.oid = target
        and (r.rolsuper or r.rolname in ('supabase_realtime_admin', 'supabase_admin')));
  when 'pg_net' then
    -- The call names its arguments, so any overload could be chosen: all of them must be pg_net's.
    return coalesce((
      select pg_catalog.bool_and(pgflow._extension_member('pg_catalog.pg_proc', p.oid, 'pg_net'))
      from pg_catalog.pg_proc p
      where p.pronamespace = pg_catalog.to_regnamespace('net') and p.proname = 'http_post'), false);
  when 'vault' then
    target := pg_catalog.to_regclass('vault.decrypted_secrets');
    return target is not null and pgflow._extension_member('pg_catalog.pg_class', target, 'supabase_vault');
  when 'pg_cron' then
    target := pg_catalog.to_regprocedure('cron.schedule(text, text, text)');
    return target is not null and pgflow._extension_member('pg_catalog.pg_proc', target, 'pg_cron');
  else
    raise exception 'unknown integration %', p_name using errcode = '22023';
  end case;
end;
$$;
