-- Declaring shared queues. Every decision about one queue name is taken under a transaction lock on
-- that name, so concurrent compiles that declare the same queue serialise and both succeed.

-- What a queue name already is, in words an error message can use; null when it is free.
create or replace function pgflow._queue_owner(p_queue text)
returns text
language sql
stable
set search_path = ''
as $$
  select coalesce(
    (select format('the default queue of flow %s', f.flow_slug) from pgflow.flows f
     where lower(f.flow_slug) = p_queue and f.queue_mode = 'flow' limit 1),
    (select format('the private queue of step %s.%s', s.flow_slug, s.step_slug)
     from pgflow.steps s join pgflow.flows f on f.flow_slug = s.flow_slug
     where s.queue_name = p_queue and f.queue_mode = 'step' limit 1),
    (select 'an external queue (not created by pgflow)'
     from pgmq.list_queues() q where lower(q.queue_name) = p_queue limit 1)
  )
$$;

-- Checks that a name can be used as a shared queue, without changing anything. Takes the name's
-- lock, which the caller keeps until it commits.
create or replace function pgflow._check_shared_queue(p_queue text, p_flow_slug text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  spellings text[];
begin
  if not pgflow.is_valid_queue_name(p_queue) then
    raise exception 'flow %: invalid shared queue name %', p_flow_slug, coalesce(quote_literal(p_queue), 'NULL')
      using errcode = '22023',
        hint = 'use lowercase letters, digits and single underscores, starting with a letter, at most 47 characters';
  end if;
  perform pgmq.validate_queue_name(p_queue);
  perform pg_advisory_xact_lock(pgflow._queue_lock_key(p_queue));

  select array_agg(q.queue_name::text order by q.queue_name) into spellings
  from pgmq.list_queues() q where lower(q.queue_name) = p_queue;
  if cardinality(spellings) > 1 then
    raise exception 'flow %: queue % is listed by PGMQ under several spellings %; refusing to use it', p_flow_slug, p_queue, spellings
      using errcode = '55000', hint = 'these names share one table pair; drop the extra spellings from pgmq.meta by hand first';
  end if;
  if exists (select 1 from pgflow.shared_queues s where s.queue_name = p_queue) then
    return true;
  end if;
  if spellings is not null then
    raise exception 'flow %: queue % is %, not a shared queue', p_flow_slug, spellings[1], pgflow._queue_owner(p_queue)
      using errcode = '55000', hint = 'route the step to another queue name';
  end if;
  return false;
end;
$$;

-- Declares a shared queue or reuses a declared one: absent → pgmq.create and record the declaration;
-- declared → reuse (recreating the PGMQ queue if someone dropped it); anything else → an error.
create or replace function pgflow._provision_shared_queue(p_queue text, p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if not pgflow._check_shared_queue(p_queue, p_flow_slug) then
    insert into pgflow.shared_queues (queue_name, declared_by_flow) values (p_queue, p_flow_slug);
  end if;
  if not exists (select 1 from pgmq.list_queues() q where q.queue_name = p_queue) then
    perform pgmq.create(p_queue);
  end if;
end;
$$;
