-- Deleting one concrete flow: its definitions, its runtime rows and the queues pgflow created for
-- it (pgflow.created_queues). On every other queue (shared queues, and any queue pgflow did not
-- create) only this flow's tracked messages go, found through its task snapshots: other flows'
-- messages and unknown messages stay exactly as they were, and the queue and its archive stay.

-- Removes the given messages from a queue and from its archive. Live messages go through
-- pgmq.delete; PGMQ has no public function for archive rows, so those are pruned directly (the one
-- direct table access product SQL allows itself).
create or replace function pgflow._purge_tracked_messages(p_queue text, p_msg_ids bigint[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if p_msg_ids is null or cardinality(p_msg_ids) = 0
     or not exists (select 1 from pgmq.list_queues() q where q.queue_name = p_queue) then
    return;
  end if;
  perform pgmq.delete(p_queue, p_msg_ids);
  execute format('delete from pgmq.%I where msg_id = any ($1)', pgmq.format_table_name(p_queue, 'a'))
  using p_msg_ids;
end;
$$;

-- Deletes one flow's data; the caller holds the flow's compile lock (pgflow.flow:<slug>) and has
-- dealt with the aliases that point at it (delete_flow_and_data, or a local-development recompile).
--
-- Lock order, the same as every other writer's: the flow, then each of its runs (in run_id order,
-- as complete_tasks takes them), then messages, then task rows. complete_task, fail_task and
-- stalled recovery take the run first and its task and messages after; a claim takes a message and
-- then its task. So a completion in flight finishes before the delete goes on, and the task and
-- message it created are then seen and removed here; a completion that comes later finds its run
-- gone and changes nothing. Neither fails, and no message of the flow is left behind.
create or replace function pgflow._delete_flow_data(p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  flow pgflow.flows;
  grp record;
  dropped text[];
  own_queue text;
begin
  select * into flow from pgflow.flows f where f.flow_slug = p_flow_slug for update;
  if not found then
    raise exception 'flow % does not exist', coalesce(quote_literal(p_flow_slug), 'NULL')
      using errcode = '22023';
  end if;
  perform 1 from pgflow.runs r where r.flow_slug = flow.flow_slug order by r.run_id for update;

  -- The queues dropped with the flow: only those pgflow created for it, that no other flow routes
  -- to, and that PGMQ lists under this one spelling (another spelling shares the table pair, and
  -- dropping it would destroy that queue too).
  select coalesce(array_agg(c.queue_name order by c.queue_name), '{}') into dropped
  from pgflow.created_queues c
  where c.flow_slug = flow.flow_slug
    and not exists (select 1 from pgflow.steps s where s.queue_name = c.queue_name and s.flow_slug <> flow.flow_slug)
    and (select array_agg(q.queue_name::text) from pgmq.list_queues() q where lower(q.queue_name) = c.queue_name)
        = array[c.queue_name];

  -- Every other queue the flow's tasks used keeps everything but this flow's tracked messages,
  -- found through the task snapshots (read after the run locks, so a completion that just
  -- committed is included).
  for grp in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as ids
    from pgflow.step_tasks t
    where t.flow_slug = flow.flow_slug and t.message_id is not null
      and not (t.queue_name = any (dropped))
    group by t.queue_name
    order by t.queue_name
  loop
    perform pgflow._purge_tracked_messages(grp.queue_name, grp.ids);
  end loop;

  foreach own_queue in array dropped loop
    perform pgmq.drop_queue(own_queue);
  end loop;

  delete from pgflow.step_tasks t where t.flow_slug = flow.flow_slug;
  delete from pgflow.step_states ss where ss.flow_slug = flow.flow_slug;
  delete from pgflow.runs r where r.flow_slug = flow.flow_slug;
  delete from pgflow.created_queues c where c.flow_slug = flow.flow_slug;
  delete from pgflow.deps d where d.flow_slug = flow.flow_slug;
  delete from pgflow.steps s where s.flow_slug = flow.flow_slug;
  delete from pgflow.flows f where f.flow_slug = flow.flow_slug;
  -- A queue left with one flow no longer takes turns (0258_fair_window.sql); its window, if any,
  -- went with the waiting tasks deleted above.
  perform pgflow._sync_queue_cursor(c.queue_name) from pgflow.queue_cursors c;
  delete from pgflow.fair_windows w
  where not exists (select 1 from pgflow.queue_cursors c where c.queue_name = w.queue_name);
end;
$$;

-- The aliases that point at a flow about to be deleted. Left alone, an alias would start whatever
-- is compiled under the slug next, an unrelated flow perhaps. An alias whose only version is this
-- flow goes with it; one that other versions carry is not deleted with it: the deletion is refused,
-- naming the activation that points the alias at another version first (an operator's choice,
-- after a coverage check, as every move of an alias is).
--
-- Only the alias the flow carries can point at it (an alias moves only to a version carrying it).
-- Its row is locked before the flow's, the order activate_alias takes them in, so an activation
-- that is moving the alias onto this flow either commits first (and is seen here) or waits and
-- then finds the flow gone.
create or replace function pgflow._release_aliases(p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  carried text;
  target text;
  other text;
begin
  select f.alias into carried from pgflow.flows f where f.flow_slug = p_flow_slug;
  if carried is null then
    return;
  end if;
  select a.flow_slug into target from pgflow.aliases a where a.alias = carried for update;
  if target is distinct from p_flow_slug then
    return;
  end if;
  select f.flow_slug into other from pgflow.flows f
  where f.alias = carried and f.flow_slug <> p_flow_slug
  order by f.created_at desc, f.flow_slug limit 1;
  if other is not null then
    raise exception 'flow % is the target of alias %, which starts it; it was not deleted', p_flow_slug, carried
      using errcode = '55000',
        hint = format('point the alias at another version first, e.g. select pgflow.activate_alias(%L, %L, %L); then delete the flow',
                      carried, p_flow_slug, other);
  end if;
  delete from pgflow.aliases a where a.alias = carried;
end;
$$;

-- Deletes one concrete flow with its data (see the top of this file). Refused while another flow's
-- step runs it as a child (0290_child_flows.sql), or while an alias points at it and other versions
-- carry that alias; an alias whose only version it is goes with it
-- (pgflow._release_aliases).
create or replace function pgflow.delete_flow_and_data(flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform pg_advisory_xact_lock(pgflow._flow_lock_key(delete_flow_and_data.flow_slug));
  if not exists (select 1 from pgflow.flows f where f.flow_slug = delete_flow_and_data.flow_slug) then
    raise exception 'flow % does not exist', coalesce(quote_literal(delete_flow_and_data.flow_slug), 'NULL')
      using errcode = '22023';
  end if;
  perform pgflow._refuse_deleting_child_flow(delete_flow_and_data.flow_slug);
  perform pgflow._release_aliases(delete_flow_and_data.flow_slug);
  perform pgflow._delete_flow_data(delete_flow_and_data.flow_slug);
end;
$$;
