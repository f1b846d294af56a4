-- Trace context for runs started by the database itself (a child-flow step's child run): the
-- traceparent that names the parent step's span, so the child's spans join the parent's trace
-- under that step. The ids are the ones the worker derives (src/telemetry/span_ids.ts): a span id
-- is FNV-1a 64 of a text naming the span, the trace of a run started without a traceparent is its
-- run id; both sides are checked against each other by tests/telemetry/trace_context_sql_test.ts.

-- FNV-1a 64 of the text's UTF-8 bytes as 16 hex digits (never the invalid all-zero id). numeric
-- carries the 64-bit product, which bigint would overflow; xor with a byte touches the low 8 bits.
create or replace function pgflow._span_id(p_text text)
returns text
language plpgsql
immutable
strict
set search_path = ''
as $$
declare
  bytes bytea := convert_to(p_text, 'UTF8');
  h numeric := 14695981039346656037;
  low integer;
  id text;
begin
  for i in 0 .. length(bytes) - 1 loop
    low := mod(h, 256)::integer;
    h := h - low + (low # get_byte(bytes, i));
    h := mod(h * 1099511628211, 18446744073709551616);
  end loop;
  -- to_hex of a negative bigint is its two's complement: the unsigned value's hex digits.
  id := lpad(to_hex((case when h >= 9223372036854775808 then h - 18446744073709551616 else h end)::bigint),
             16, '0');
  return case when id = '0000000000000000' then '0000000000000001' else id end;
end;
$$;

-- The traceparent naming step p_step_slug's span of run p_run_id, in the run's trace (its
-- traceparent's, else the trace its run id names), with the run's trace flags (sampled by default).
create or replace function pgflow._step_traceparent(p_run_id uuid, p_step_slug text, p_traceparent text)
returns text
language sql
immutable
set search_path = ''
as $$
  select '00-'
    || coalesce(m[1], replace(p_run_id::text, '-', ''))
    || '-' || pgflow._span_id('step ' || p_run_id::text || ' ' || p_step_slug)
    || '-' || coalesce(m[3], '01')
  from (select regexp_match(p_traceparent, '^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$') as m) x
$$;
