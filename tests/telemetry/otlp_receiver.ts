/**
 * A small OTLP/HTTP receiver for the telemetry tests: keeps every span and metric name it is sent,
 * and every request body as text (to search for what must never be exported). JSON bodies are read
 * whole; protobuf bodies (Deno's default) are decoded for spans only, by the test's own decoder.
 */
import { decodeTraceRequest } from "./otlp_protobuf_decode.ts";

/** One received span, its attributes flattened to plain values. */
export interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly startTimeUnixNano: string;
  readonly endTimeUnixNano: string;
  readonly attributes: Readonly<Record<string, string | number | boolean>>;
  readonly status?: { readonly code?: number; readonly message?: string };
}

interface AnyValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}

/** A running receiver. */
export interface OtlpReceiver {
  /** The endpoint to give as `OTEL_EXPORTER_OTLP_ENDPOINT`. */
  readonly endpoint: string;
  readonly spans: ReceivedSpan[];
  /** Names of every metric received, with their data points' attributes. */
  readonly metrics: { name: string; points: Record<string, unknown>[] }[];
  /** Every request body, as received (as UTF-8 text). */
  readonly bodies: string[];
  /** Every request's path and encoding, in order. */
  readonly requests: { path: string; encoding: "json" | "protobuf" }[];
  close(): Promise<void>;
}

function plain(value: AnyValue): string | number | boolean {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  return value.boolValue ?? "";
}

function attributes(list: { key: string; value: AnyValue }[] = []) {
  return Object.fromEntries(list.map((a) => [a.key, plain(a.value)]));
}

/** Starts a receiver on a free port of 127.0.0.1. */
export function startReceiver(): OtlpReceiver {
  const spans: ReceivedSpan[] = [];
  const metrics: OtlpReceiver["metrics"] = [];
  const bodies: string[] = [];
  const requests: OtlpReceiver["requests"] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const raw = new Uint8Array(await req.arrayBuffer());
    // Strings are UTF-8 in both encodings: a marker in a protobuf body is found in this text too.
    const text = new TextDecoder().decode(raw);
    bodies.push(text);
    const path = new URL(req.url).pathname;
    const protobuf = req.headers.get("content-type") === "application/x-protobuf";
    requests.push({ path, encoding: protobuf ? "protobuf" : "json" });
    const body = !protobuf
      ? JSON.parse(text)
      : path === "/v1/traces"
      ? decodeTraceRequest(raw)
      : {};
    if (path === "/v1/traces") {
      for (const rs of body.resourceSpans ?? []) {
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              ...s,
              parentSpanId: s.parentSpanId ?? "",
              attributes: attributes(s.attributes),
            });
          }
        }
      }
    } else if (path === "/v1/metrics") {
      for (const rm of body.resourceMetrics ?? []) {
        for (const sm of rm.scopeMetrics ?? []) {
          for (const m of sm.metrics ?? []) {
            const data = m.sum ?? m.histogram ?? m.gauge ?? {};
            metrics.push({
              name: m.name,
              points: (data.dataPoints ?? []).map((p: { attributes?: [] }) => ({
                ...p,
                attributes: attributes(p.attributes),
              })),
            });
          }
        }
      }
    }
    return Response.json({});
  });
  return {
    endpoint: `http://127.0.0.1:${server.addr.port}`,
    spans,
    metrics,
    bodies,
    requests,
    // A graceful shutdown waits for requests in flight: bounded, so a sender that hung mid-request
    // cannot hang the test after it.
    close: async () => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([server.shutdown(), new Promise((r) => timer = setTimeout(r, 10_000))]);
      clearTimeout(timer);
    },
  };
}
