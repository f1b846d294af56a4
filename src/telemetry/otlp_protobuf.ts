/**
 * OTLP/HTTP protobuf for run and step spans: the binary `ExportTraceServiceRequest`, written by
 * hand for the few fields these spans use (no protobuf library to bundle). Deno's exporter sends
 * `http/protobuf` unless told otherwise, and some OTLP endpoints accept nothing else, so the run
 * and step spans go the way Deno's own go.
 *
 * Fields written (opentelemetry/proto/trace/v1/trace.proto, common/v1, resource/v1):
 * `ExportTraceServiceRequest.resource_spans` (1); `ResourceSpans.resource` (1), `.scope_spans` (2);
 * `Resource.attributes` (1); `ScopeSpans.scope` (1), `.spans` (2); `InstrumentationScope.name` (1),
 * `.version` (2); `Span.trace_id` (1), `.span_id` (2), `.parent_span_id` (4), `.name` (5), `.kind`
 * (6), `.start_time_unix_nano` (7, fixed64), `.end_time_unix_nano` (8, fixed64), `.attributes` (9),
 * `.status` (15); `Status.code` (3); `KeyValue.key` (1), `.value` (2); `AnyValue.string_value` (1),
 * `.int_value` (3).
 *
 * @module
 */
import type { FinishedSpan } from "./otlp_spans.ts";

const VARINT = 0;
const FIXED64 = 1;
const BYTES = 2;
const STATUS = { unset: 0, ok: 1, error: 2 } as const;
const INTERNAL = 1;
const utf8 = new TextEncoder();

/** A message being written: its bytes, in order. */
class Writer {
  readonly #chunks: number[] = [];

  tag(field: number, wireType: number): this {
    return this.varint(BigInt((field << 3) | wireType));
  }

  /** A varint; an int64 below zero is written as its 64-bit two's complement (ten bytes). */
  varint(value: bigint): this {
    let v = BigInt.asUintN(64, value);
    while (v > 0x7fn) {
      this.#chunks.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    this.#chunks.push(Number(v));
    return this;
  }

  fixed64(value: bigint): this {
    let v = BigInt.asUintN(64, value);
    for (let i = 0; i < 8; i++) {
      this.#chunks.push(Number(v & 0xffn));
      v >>= 8n;
    }
    return this;
  }

  bytes(field: number, bytes: Uint8Array | readonly number[]): this {
    this.tag(field, BYTES).varint(BigInt(bytes.length));
    for (const b of bytes) this.#chunks.push(b);
    return this;
  }

  string(field: number, text: string): this {
    return this.bytes(field, utf8.encode(text));
  }

  message(field: number, write: (w: Writer) => void): this {
    const inner = new Writer();
    write(inner);
    return this.bytes(field, inner.#chunks);
  }

  finish(): Uint8Array<ArrayBuffer> {
    return Uint8Array.from(this.#chunks);
  }
}

function hex(id: string): Uint8Array {
  const out = new Uint8Array(id.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(id.slice(i * 2, i * 2 + 2), 16);
  return out;
}

function keyValues(
  w: Writer,
  field: number,
  attributes: Readonly<Record<string, string | number>>,
) {
  for (const [key, value] of Object.entries(attributes)) {
    w.message(field, (kv) => {
      kv.string(1, key).message(2, (any) => {
        if (typeof value === "number") any.tag(3, VARINT).varint(BigInt(Math.trunc(value)));
        else any.string(1, value);
      });
    });
  }
}

/**
 * The `ExportTraceServiceRequest` carrying `spans` under one resource and the engine's scope.
 *
 * @example
 * ```ts
 * import { encodeTraceRequest } from "./otlp_protobuf.ts";
 *
 * const body = encodeTraceRequest({ "service.name": "worker" }, { name: "@pgflow/shared", version: "0.1.0" }, []);
 * // POST it with content-type application/x-protobuf
 * ```
 */
export function encodeTraceRequest(
  resource: Readonly<Record<string, string>>,
  scope: { readonly name: string; readonly version: string },
  spans: readonly FinishedSpan[],
): Uint8Array<ArrayBuffer> {
  return new Writer().message(1, (rs) => {
    rs.message(1, (r) => keyValues(r, 1, resource));
    rs.message(2, (ss) => {
      ss.message(1, (s) => s.string(1, scope.name).string(2, scope.version));
      for (const span of spans) {
        ss.message(2, (s) => {
          s.bytes(1, hex(span.traceId)).bytes(2, hex(span.spanId));
          if (span.parentSpanId !== undefined) s.bytes(4, hex(span.parentSpanId));
          s.string(5, span.name).tag(6, VARINT).varint(BigInt(INTERNAL));
          s.tag(7, FIXED64).fixed64(BigInt(span.startUs) * 1000n);
          s.tag(8, FIXED64).fixed64(BigInt(span.endUs) * 1000n);
          keyValues(s, 9, span.attributes);
          s.message(15, (st) => {
            if (STATUS[span.status] !== 0) st.tag(3, VARINT).varint(BigInt(STATUS[span.status]));
          });
        });
      }
    });
  }).finish();
}
