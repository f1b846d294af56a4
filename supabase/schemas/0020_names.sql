-- Slug and queue-name rules. The TypeScript DSL mirrors these exactly (src/dsl, src/routing).

-- Letters, digits and single underscores, starting with a letter, no leading or trailing '_',
-- no '__', at most 128 characters, and not the reserved word 'run'.
create or replace function pgflow.is_valid_slug(slug text)
returns boolean
language sql
immutable
set search_path = ''
as $$
  select slug is not null
    and length(slug) <= 128
    and slug ~ '^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*$'
    and slug <> 'run'
$$;

-- Explicit (shared) queue names: canonical lowercase, no '__' (generated private names contain
-- '__', so the two can never collide), at most 47 characters (PGMQ's limit).
create or replace function pgflow.is_valid_queue_name(queue_name text)
returns boolean
language sql
immutable
set search_path = ''
as $$
  select queue_name is not null
    and length(queue_name) <= 47
    and queue_name ~ '^[a-z][a-z0-9_]*$'
    and position('__' in queue_name) = 0
$$;

-- The private queue of one step (withStepQueues): lower(flow__step) when it fits in 47 characters,
-- else lower(flow__<index>); an error when even that does not fit.
create or replace function pgflow.private_queue_name(flow_slug text, step_slug text, step_index integer)
returns text
language plpgsql
immutable
set search_path = ''
as $$
declare
  by_slug text := lower(flow_slug || '__' || step_slug);
  by_index text := lower(flow_slug || '__' || step_index::text);
begin
  if length(by_slug) <= 47 then
    return by_slug;
  elsif length(by_index) <= 47 then
    return by_index;
  end if;
  raise exception 'private queue name for step %.% does not fit in 47 characters: %', flow_slug, step_slug, by_index
    using errcode = '22023', hint = 'use a flow slug of at most ' || (45 - length(step_index::text)) || ' characters, or route the step to a shared queue';
end;
$$;

-- Worker function names (Supabase Edge Function names): 1-128 letters, digits, '_' or '-', the same
-- rule as the worker's functionName option (src/worker/config.ts). The keep-alive puts the name
-- into a URL path (/functions/v1/<name>), so nothing else ('/', '.', '?', '%', spaces) may appear.
create or replace function pgflow.is_valid_function_name(function_name text)
returns boolean
language sql
immutable
set search_path = ''
as $$
  select function_name is not null and function_name ~ '^[A-Za-z0-9_-]{1,128}$'
$$;
