/**
 * A minimal OTLP protobuf decoder for the telemetry tests, written apart from the encoder in
 * src/telemetry/otlp_protobuf.ts (sharing no code with it): it reads the protobuf wire format
 * generically and maps an `ExportTraceServiceRequest` to the OTLP/JSON shape the receiver already
 * reads. Deno's own exporter sends protobuf by default, so the same decoder reads Deno's spans too:
 * an encoder agreeing with this decoder agrees with Deno's.
 */

/** One field of a message as it was on the wire. */
type Field = { wire: 0 | 1 | 5; value: bigint } | { wire: 2; value: Uint8Array };

/** The fields of one message, by field number, in order. */
function fields(bytes: Uint8Array): Map<number, Field[]> {
  const out = new Map<number, Field[]>();
  let at = 0;
  const varint = (): bigint => {
    let result = 0n;
    for (let shift = 0n;; shift += 7n) {
      if (at >= bytes.length) throw new Error("truncated varint");
      const b = bytes[at++];
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
    }
  };
  const little = (n: number): bigint => {
    let v = 0n;
    for (let i = n - 1; i >= 0; i--) v = (v << 8n) | BigInt(bytes[at + i]);
    at += n;
    return v;
  };
  while (at < bytes.length) {
    const key = Number(varint());
    const number = key >>> 3;
    const wire = key & 7;
    let field: Field;
    if (wire === 0) field = { wire, value: varint() };
    else if (wire === 1) field = { wire, value: little(8) };
    else if (wire === 5) field = { wire, value: little(4) };
    else if (wire === 2) {
      const length = Number(varint());
      if (at + length > bytes.length) throw new Error("truncated field");
      field = { wire, value: bytes.subarray(at, at + length) };
      at += length;
    } else throw new Error(`unknown wire type ${wire}`);
    out.set(number, [...(out.get(number) ?? []), field]);
  }
  return out;
}

const text = new TextDecoder("utf-8", { fatal: true });
const bytesOf = (f: Field | undefined) => (f?.wire === 2 ? f.value : new Uint8Array());
const all = (m: Map<number, Field[]>, n: number) => m.get(n) ?? [];
const one = (m: Map<number, Field[]>, n: number) => m.get(n)?.at(-1);
const str = (m: Map<number, Field[]>, n: number) => text.decode(bytesOf(one(m, n)));
const hex = (b: Uint8Array) => [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
const num = (f: Field | undefined) => (f !== undefined && f.wire !== 2 ? f.value : undefined);

function anyValue(m: Map<number, Field[]>): Record<string, unknown> {
  if (m.has(1)) return { stringValue: str(m, 1) };
  if (m.has(2)) return { boolValue: num(one(m, 2)) !== 0n };
  if (m.has(3)) return { intValue: String(BigInt.asIntN(64, num(one(m, 3))!)) };
  if (m.has(4)) {
    const view = new DataView(new ArrayBuffer(8));
    view.setBigUint64(0, num(one(m, 4))!, true);
    return { doubleValue: view.getFloat64(0, true) };
  }
  return {};
}

function keyValues(list: Field[]) {
  return list.map((f) => {
    const kv = fields(bytesOf(f));
    return { key: str(kv, 1), value: anyValue(fields(bytesOf(one(kv, 2)))) };
  });
}

function span(m: Map<number, Field[]>) {
  const status = fields(bytesOf(one(m, 15)));
  const code = num(one(status, 3));
  return {
    traceId: hex(bytesOf(one(m, 1))),
    spanId: hex(bytesOf(one(m, 2))),
    ...(m.has(4) ? { parentSpanId: hex(bytesOf(one(m, 4))) } : {}),
    name: str(m, 5),
    kind: Number(num(one(m, 6)) ?? 0n),
    startTimeUnixNano: String(num(one(m, 7)) ?? 0n),
    endTimeUnixNano: String(num(one(m, 8)) ?? 0n),
    attributes: keyValues(all(m, 9)),
    status: code === undefined ? {} : { code: Number(code) },
  };
}

/**
 * An `ExportTraceServiceRequest` in the OTLP/JSON shape: `{ resourceSpans: [{ resource,
 * scopeSpans: [{ scope, spans }] }] }`.
 */
export function decodeTraceRequest(body: Uint8Array) {
  return {
    resourceSpans: all(fields(body), 1).map((rsField) => {
      const rs = fields(bytesOf(rsField));
      return {
        resource: { attributes: keyValues(all(fields(bytesOf(one(rs, 1))), 1)) },
        scopeSpans: all(rs, 2).map((ssField) => {
          const ss = fields(bytesOf(ssField));
          const scope = fields(bytesOf(one(ss, 1)));
          return {
            scope: { name: str(scope, 1), version: str(scope, 2) },
            spans: all(ss, 2).map((s) => span(fields(bytesOf(s)))),
          };
        }),
      };
    }),
  };
}
