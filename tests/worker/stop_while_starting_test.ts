/**
 * A worker told to stop (or that its platform unloads) while it is still starting claims nothing:
 * at each step of the startup (the connection, the compile, the registration, the LISTEN, the
 * moment before the first read) the stop ends the startup before any read, `start()` resolves with
 * the worker stopped, and a row it registered is marked stopped. Queued work stays queued and
 * unread, for the next worker, instead of waiting for stalled recovery.
 */
import assert from "node:assert/strict";
import {
  createLogger,
  createPool,
  createWorker,
  Flow,
  type FlowWorker,
  type Sql,
} from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { assertUntouched, FAST, startRun, startWorker } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const flow = new Flow<{ n: number }>({ slug: "stop_starting" })
  .step({ slug: "only" }, (input) => input.n);

/** Where in the startup the stop comes, and how the test sees that point go by. */
const POINTS = [
  { at: "the connection", log: "database connection" },
  { at: "the compile", query: "ensure_flow_compiled" },
  { at: "the registration", query: "register_worker" },
  // Opening the LISTEN reads the pool's options (src/task/wakeups.ts).
  { at: "the LISTEN", options: true },
  { at: "the first read", log: "worker started" },
] as const;

/**
 * `sql` that calls `hook` as a query containing `text` is made, or as its options are read: the
 * startup's own calls mark its steps.
 */
function watched(sql: Sql, point: (typeof POINTS)[number], hook: () => void): Sql {
  return new Proxy(sql, {
    apply(target, self, args) {
      const strings = args[0] as TemplateStringsArray | undefined;
      if ("query" in point && Array.isArray(strings) && strings.join("?").includes(point.query)) {
        hook();
      }
      return Reflect.apply(target as unknown as (...a: unknown[]) => unknown, self, args);
    },
    get(target, key, receiver) {
      if (key === "options" && "options" in point) hook();
      return Reflect.get(target, key, receiver);
    },
  });
}

for (const point of POINTS) {
  db.test(`stop({ unloading }) during ${point.at}: nothing is read or claimed`, async ({ sql, url }) => {
    const pool = createPool(url, { max: 4 });
    let worker: FlowWorker | undefined;
    try {
      // The flow and its queue exist, with queued work, before the worker starts.
      const warm = await startWorker([], flow, { connectionString: url });
      await warm.worker.stop();
      const run = await startRun(sql, "stop_starting", { n: 1 });

      let stopping: Promise<void> | undefined;
      const hook = () => stopping ??= worker!.stop({ unloading: "EarlyDrop" });
      worker = createWorker(flow, {
        ...FAST,
        sql: watched(pool, point, hook),
        wakeups: "listen",
        logger: createLogger({
          level: "debug",
          sink: (record) => {
            if ("log" in point && record.event === point.log) hook();
          },
        }),
      });
      await worker.start();
      assert.ok(stopping !== undefined, `the startup went past ${point.at}`);
      await stopping;
      assert.equal(worker.state, "stopped", "start() resolves once the stop is done");

      await assertUntouched(sql, run, "stop_starting");
      const rows = await sql`
        select stopped_at from pgflow.workers where worker_id = ${worker.id}::uuid`;
      for (const row of rows) assert.ok(row.stopped_at !== null, "a registered row is stopped");
      const registered = point.at !== "the connection" && point.at !== "the compile";
      assert.equal(rows.length, registered ? 1 : 0, "a row only once the registration ran");
    } finally {
      await worker?.stop();
      await pool.end();
    }
  });
}
