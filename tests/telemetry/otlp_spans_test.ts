/**
 * The OTLP/HTTP sender of run and step spans: the endpoint, headers, resource and encoding come
 * from the variables Deno's exporter reads (protobuf unless told http/json, as Deno); a span
 * arrives with its chosen ids and its times in nanoseconds, in either encoding.
 */
import assert from "node:assert/strict";
import { otlpTarget, sendSpans } from "../../src/telemetry/otlp_spans.ts";
import { startReceiver } from "./otlp_receiver.ts";

Deno.test("the target follows Deno's OTEL_* variables", () => {
  assert.deepEqual(otlpTarget({}), {
    url: "http://localhost:4318/v1/traces",
    headers: {},
    resource: { "service.name": "unknown_service" },
    encoding: "protobuf",
  });
  assert.deepEqual(
    otlpTarget({
      OTEL_EXPORTER_OTLP_ENDPOINT: "https://collector.example:4318/",
      OTEL_EXPORTER_OTLP_HEADERS: "x-api-key=a%3Db,x-team=ops",
      OTEL_SERVICE_NAME: "orders-worker",
      OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=prod,service.name=ignored",
    }),
    {
      url: "https://collector.example:4318/v1/traces",
      headers: { "x-api-key": "a=b", "x-team": "ops" },
      resource: { "deployment.environment": "prod", "service.name": "orders-worker" },
      encoding: "protobuf",
    },
  );
  const encoding = (env: Record<string, string>) =>
    (otlpTarget(env) as { encoding: string }).encoding;
  assert.equal(encoding({ OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" }), "protobuf");
  assert.equal(encoding({ OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" }), "json");
  assert.equal(
    encoding({
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
    }),
    "json",
    "the traces' own variable wins",
  );
  assert.equal(
    (otlpTarget({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318",
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://b:4318/custom",
    }) as { url: string }).url,
    "http://b:4318/custom",
  );
  assert.deepEqual(otlpTarget({ OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }), { unsupported: "grpc" });
  assert.deepEqual(otlpTarget({ OTEL_EXPORTER_OTLP_PROTOCOL: "console" }), {
    unsupported: "console",
  });
  assert.deepEqual(otlpTarget({ OTEL_EXPORTER_OTLP_PROTOCOL: "http/xml" }), {
    unsupported: "http/xml",
  });
});

for (const protocol of ["http/protobuf", "http/json"]) {
  Deno.test(`a sent span arrives with its ids, parent, times and status (${protocol})`, async () => {
    const receiver = startReceiver();
    try {
      const target = otlpTarget({
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
        OTEL_SERVICE_NAME: "orders-worker",
      });
      assert.ok(!("unsupported" in target));
      const span = {
        traceId: "0af7651916cd43dd8448eb211c80319c",
        spanId: "00f067aa0ba902b7",
        name: "pgflow.run orders",
        startUs: "1765000000123456",
        endUs: "1765000001123456",
      };
      await sendSpans(target, [
        {
          ...span,
          parentSpanId: "b7ad6b7169203331",
          attributes: { "pgflow.flow": "orders", "pgflow.tasks": 3, "pgflow.status": "failed" },
          status: "error",
        },
        { ...span, spanId: "00f067aa0ba902b8", attributes: {}, status: "ok" },
      ]);
      assert.deepEqual(receiver.requests, [{
        path: "/v1/traces",
        encoding: protocol === "http/json" ? "json" : "protobuf",
      }], "the body's encoding is the protocol's");
      assert.deepEqual(receiver.spans.map((s) => ({ ...s })), [{
        ...received,
        parentSpanId: "b7ad6b7169203331",
        attributes: { "pgflow.flow": "orders", "pgflow.tasks": 3, "pgflow.status": "failed" },
        status: { code: 2 },
      }, {
        ...received,
        spanId: "00f067aa0ba902b8",
        parentSpanId: "",
        attributes: {},
        status: { code: 1 },
      }]);
      const body = receiver.bodies[0];
      assert.ok(body.includes("orders-worker"), "the resource's service.name is sent");
      assert.ok(body.includes("@pgflow/shared"), "the scope is sent");
    } finally {
      await receiver.close();
    }
  });
}

const received = {
  traceId: "0af7651916cd43dd8448eb211c80319c",
  spanId: "00f067aa0ba902b7",
  name: "pgflow.run orders",
  kind: 1,
  startTimeUnixNano: "1765000000123456000",
  endTimeUnixNano: "1765000001123456000",
};

Deno.test("a refused request rejects, naming the status", async () => {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response("no", { status: 401 }),
  );
  try {
    const target = otlpTarget({
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${server.addr.port}`,
    });
    assert.ok(!("unsupported" in target));
    await assert.rejects(
      sendSpans(target, [{
        traceId: "0af7651916cd43dd8448eb211c80319c",
        spanId: "00f067aa0ba902b7",
        name: "x",
        startUs: "1",
        endUs: "2",
        attributes: {},
        status: "unset",
      }]),
      /answered 401/,
    );
  } finally {
    await server.shutdown();
  }
});
