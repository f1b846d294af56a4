/**
 * A picture of one trace: the telemetry test's three-step flow (step `b` fails once and is retried)
 * started inside a client's span, run by a worker process, both with Deno's exporter on and pointed
 * at a receiver in this process; then the trace tree printed from the spans received, and with
 * `--screenshot FILE` the dashboard's run view of the same run saved as a PNG (headless Chromium).
 *
 *   deno run -A bench/trace_tree.ts [--screenshot docs/images/trace_run_view.png]
 *
 * `printTree` draws any list of received spans; docs/telemetry.md shows its output.
 *
 * @module
 */
import { parseArgs } from "node:util";
import postgres from "postgres";
import { startLocalPostgres } from "../src/cli/db/launcher.ts";
import { installPgmq } from "../src/cli/db/pgmq.ts";
import { applyMigrations } from "../local/db_push.ts";
import { killChild, spawnDeno } from "../tests/e2e/process.ts";
import { type ReceivedSpan, startReceiver } from "../tests/telemetry/otlp_receiver.ts";
import { openBrowser } from "../tests/support/browser.ts";
import { startDashboardCli } from "../tests/cli/dashboard_cli.ts";
import { sleep } from "./clock.ts";

const SHOWN = [
  "pgflow.attempt",
  "pgflow.outcome",
  "pgflow.status",
  "error.type",
  "pgflow.worker_id",
];

/**
 * The spans as a tree (children under their parent, by start time), one line each: name, duration,
 * the attributes that tell attempts apart. A span whose parent was not received is a root.
 *
 * @example
 * ```ts ignore
 * console.log(printTree(receiver.spans).join("\n"));
 * ```
 */
export function printTree(spans: readonly ReceivedSpan[]): string[] {
  const ids = new Set(spans.map((s) => s.spanId));
  const children = new Map<string, ReceivedSpan[]>();
  for (const span of spans) {
    const parent = ids.has(span.parentSpanId) ? span.parentSpanId : "";
    children.set(parent, [...(children.get(parent) ?? []), span]);
  }
  const ns = (s: ReceivedSpan, k: "startTimeUnixNano" | "endTimeUnixNano") => BigInt(s[k]);
  const lines: string[] = [];
  const walk = (parent: string, prefix: string) => {
    const list = [...(children.get(parent) ?? [])].sort((a, b) =>
      Number(ns(a, "startTimeUnixNano") - ns(b, "startTimeUnixNano"))
    );
    list.forEach((span, i) => {
      const last = i === list.length - 1;
      const ms = Number(ns(span, "endTimeUnixNano") - ns(span, "startTimeUnixNano")) / 1e6;
      const attrs = SHOWN.filter((k) => span.attributes[k] !== undefined)
        .map((k) =>
          `${k.replace(/^pgflow\./, "")}=${
            k === "pgflow.worker_id" ? String(span.attributes[k]).slice(0, 8) : span.attributes[k]
          }`
        );
      const status = span.status?.code === 2 ? " ERROR" : "";
      const head = parent === "" ? "" : `${prefix}${last ? "└── " : "├── "}`;
      lines.push(
        `${head}${span.name}  ${ms.toFixed(1)} ms${status}${
          attrs.length ? `  ${attrs.join(" ")}` : ""
        }`,
      );
      walk(span.spanId, parent === "" ? "" : `${prefix}${last ? "    " : "│   "}`);
    });
  };
  walk("", "");
  return lines;
}

if (import.meta.main) {
  const { values: args } = parseArgs({
    args: Deno.args,
    options: { screenshot: { type: "string" } },
  });
  const fixture = (name: string) =>
    new URL(`../tests/telemetry/fixtures/${name}`, import.meta.url).pathname;
  const server = await startLocalPostgres();
  const receiver = startReceiver();
  const sql = postgres(server.url, { max: 2, onnotice: () => {} });
  try {
    await installPgmq(sql);
    await applyMigrations(sql);
    const otel = {
      DATABASE_URL: server.url,
      OTEL_DENO: "true",
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
    };
    const worker = spawnDeno(fixture("traced_worker.ts"), { ...otel, OTEL_SERVICE_NAME: "worker" });
    while ((await sql`select 1 from pgflow.workers where queue_name = 'otel_flow'`).length === 0) {
      await sleep(200);
    }
    const client = spawnDeno(fixture("traced_client.ts"), { ...otel, OTEL_SERVICE_NAME: "client" });
    await client.process.status;
    const [runId] = client.output().trim().split(/\s+/).slice(-3);
    while (
      (await sql`select 1 from pgflow.runs where run_id = ${runId}::uuid and status <> 'started'`)
        .length === 0
    ) await sleep(200);
    await killChild(worker, "SIGTERM");
    while (!receiver.spans.some((s) => s.name.startsWith("pgflow.run "))) await sleep(200);
    const trace = receiver.spans.filter((s) =>
      s.traceId === receiver.spans.find((r) => r.attributes["pgflow.run_id"] === runId)?.traceId
    );
    console.log(printTree(trace).join("\n"));

    if (args.screenshot !== undefined) {
      const dashboard = await startDashboardCli(["--database-url", server.url]);
      const browser = await openBrowser();
      try {
        const page = await browser.goto(`${dashboard.pageUrl}#run=${runId}`);
        await page.setViewport(1400, 900);
        await page.waitFor(
          `document.querySelectorAll("#run svg.dag g.node").length === 3`,
          "the run's DAG",
        );
        await page.evaluate(`document.querySelector("#run").scrollIntoView()`);
        await page.screenshot(args.screenshot);
        console.error(`saved ${args.screenshot}`);
      } finally {
        await browser.close();
        await dashboard.stop();
      }
    }
  } finally {
    await sql.end();
    await receiver.close();
    await server.destroy();
  }
}
