/**
 * Sends finished spans whose ids were chosen in advance (a run's, a step's: see span_ids.ts) to the
 * OTLP/HTTP endpoint Deno's own exporter is configured with. The OpenTelemetry API cannot make such
 * a span: a tracer draws every span id itself, so a span emitted at a run's end could never be the
 * parent its attempts named hours before. Only these spans go this way; attempts and the handler's
 * own spans stay on the API and Deno's exporter.
 *
 * The encoding follows `OTEL_EXPORTER_OTLP_PROTOCOL` as Deno's exporter does: protobuf by default
 * and for `http/protobuf` (otlp_protobuf.ts), JSON for `http/json`. gRPC and the console exporter
 * are not spoken here, and with them run and step spans are not sent (docs/telemetry.md).
 *
 * @module
 */
import { ENGINE_VERSION } from "../util/version.ts";
import { encodeTraceRequest } from "./otlp_protobuf.ts";

/** One finished span, its ids and times already known. */
export interface FinishedSpan {
  readonly traceId: string;
  readonly spanId: string;
  /** The parent's span id; absent for a root span. */
  readonly parentSpanId?: string;
  readonly name: string;
  /** Microseconds since the epoch, as Postgres gave them (text: beyond 2^53 once in nanoseconds). */
  readonly startUs: string;
  readonly endUs: string;
  readonly attributes: Readonly<Record<string, string | number>>;
  /** OTLP status: ok, error, or unset (a cancelled run is neither). */
  readonly status: "ok" | "error" | "unset";
}

/** Where and how spans are sent, from the `OTEL_*` variables Deno's exporter reads. */
export interface OtlpTarget {
  /** The traces endpoint (`.../v1/traces`). */
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  /** Resource attributes: `service.name` and `OTEL_RESOURCE_ATTRIBUTES`. */
  readonly resource: Readonly<Record<string, string>>;
  /** The body's encoding: `http/protobuf` (Deno's default) or `http/json`. */
  readonly encoding: "protobuf" | "json";
}

/**
 * The target named by the environment, or why there is none (a protocol not spoken here).
 *
 * @example
 * ```ts
 * import { otlpTarget } from "./otlp_spans.ts";
 *
 * const target = otlpTarget({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://localhost:4318" });
 * // { url: "http://localhost:4318/v1/traces", headers: {}, resource: {...}, encoding: "protobuf" }
 * ```
 */
export function otlpTarget(
  env: Readonly<Record<string, string>>,
): OtlpTarget | { unsupported: string } {
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ??
    "http/protobuf";
  if (protocol !== "http/protobuf" && protocol !== "http/json") return { unsupported: protocol };
  const base = (env.OTEL_EXPORTER_OTLP_ENDPOINT ?? "http://localhost:4318").replace(/\/+$/, "");
  const resource = pairs(env.OTEL_RESOURCE_ATTRIBUTES);
  resource["service.name"] = env.OTEL_SERVICE_NAME ?? resource["service.name"] ?? "unknown_service";
  return {
    url: env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? `${base}/v1/traces`,
    headers: {
      ...pairs(env.OTEL_EXPORTER_OTLP_HEADERS),
      ...pairs(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS),
    },
    resource,
    encoding: protocol === "http/json" ? "json" : "protobuf",
  };
}

/** Most spans in one request: a sweep may claim thousands, and endpoints bound a body's size. */
const MAX_PER_REQUEST = 1000;

/**
 * Posts `spans` as OTLP/HTTP requests in the target's encoding (a request per thousand spans);
 * rejects with the status when one is refused.
 *
 * @example
 * ```ts
 * import { sendSpans } from "./otlp_spans.ts";
 *
 * await sendSpans(
 *   { url: "http://localhost:4318/v1/traces", headers: {}, resource: {}, encoding: "protobuf" },
 *   [],
 * );
 * ```
 */
export async function sendSpans(
  target: OtlpTarget,
  spans: readonly FinishedSpan[],
  timeoutMs = 10_000,
): Promise<void> {
  for (let from = 0; from < spans.length; from += MAX_PER_REQUEST) {
    const part = spans.slice(from, from + MAX_PER_REQUEST);
    const response = await fetch(target.url, {
      method: "POST",
      headers: {
        ...target.headers,
        "content-type": target.encoding === "json" ? "application/json" : "application/x-protobuf",
      },
      body: target.encoding === "json"
        ? JSON.stringify(otlpJson(target, part))
        : encodeTraceRequest(target.resource, SCOPE, part),
      signal: AbortSignal.timeout(timeoutMs),
    });
    await response.body?.cancel();
    if (!response.ok) throw new Error(`the OTLP endpoint answered ${response.status}`);
  }
}

const SCOPE = { name: "@pgflow/shared", version: ENGINE_VERSION };

const STATUS = { unset: 0, ok: 1, error: 2 } as const;
const INTERNAL = 1;

function otlpJson(target: OtlpTarget, spans: readonly FinishedSpan[]) {
  return {
    resourceSpans: [{
      resource: { attributes: keyValues(target.resource) },
      scopeSpans: [{
        scope: SCOPE,
        spans: spans.map((s) => ({
          traceId: s.traceId,
          spanId: s.spanId,
          ...(s.parentSpanId === undefined ? {} : { parentSpanId: s.parentSpanId }),
          name: s.name,
          kind: INTERNAL,
          startTimeUnixNano: `${s.startUs}000`,
          endTimeUnixNano: `${s.endUs}000`,
          attributes: keyValues(s.attributes),
          status: { code: STATUS[s.status] },
        })),
      }],
    }],
  };
}

function keyValues(attributes: Readonly<Record<string, string | number>>) {
  return Object.entries(attributes).map(([key, value]) => ({
    key,
    value: typeof value === "number" ? { intValue: String(value) } : { stringValue: value },
  }));
}

/** `k=v,k2=v2` (values percent-encoded), as the OTEL_* list variables are written. */
function pairs(list: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of (list ?? "").split(",")) {
    const at = item.indexOf("=");
    if (at <= 0) continue;
    out[decodeURIComponent(item.slice(0, at).trim())] = decodeURIComponent(
      item.slice(at + 1).trim(),
    );
  }
  return out;
}
