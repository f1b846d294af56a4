-- TEST-ONLY stand-in for pg_net (installed by tests/edge/cluster.ts): the surface pgflow uses, with
-- pg_net's names and signature. net.http_post only queues the request (as pg_net does: its
-- background worker sends queued requests after the transaction commits); the test's relay
-- (tests/edge/relay.ts) plays that worker, and writes net._http_response like pg_net.
create schema if not exists net;

create table net.http_request_queue (
  id bigserial primary key,
  method text not null,
  url text not null,
  headers jsonb not null,
  body bytea,
  timeout_milliseconds integer not null
);

create table net._http_response (
  id bigint,
  status_code integer,
  content_type text,
  headers jsonb,
  content text,
  timed_out boolean,
  error_msg text,
  created timestamptz not null default now()
);

create function net.http_post(
  url text,
  body jsonb default '{}'::jsonb,
  params jsonb default '{}'::jsonb,
  headers jsonb default '{"Content-Type": "application/json"}'::jsonb,
  timeout_milliseconds integer default 5000
)
returns bigint
language sql
volatile
set search_path = ''
as $$
  insert into net.http_request_queue (method, url, headers, body, timeout_milliseconds)
  values ('POST', url, headers, pg_catalog.convert_to(body::text, 'UTF8'), timeout_milliseconds)
  returning id
$$;
