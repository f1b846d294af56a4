/**
 * Resident memory of one worker process after it has run a given number of tasks, and while a
 * large message another sender put on its queue is read again at every visibility timeout.
 *
 * `deno run -A bench/memory.ts [MEGABYTES] [SECONDS]` runs the second alone (default a 20 MB
 * message for 6 s) and prints its figures.
 *
 * @module
 */
import { jsonLines } from "./json_lines.ts";
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { startBacklog } from "./load.ts";

/** Memory figures in bytes. */
export interface MemoryResult {
  readonly tasks: number;
  readonly rssReady: number;
  readonly rssDone: number;
  readonly heapDone: number;
}

/** Memory figures in bytes of an idle worker whose queue holds one large foreign message. */
export interface ForeignMessageResult {
  /** Size of the message's body. */
  readonly megabytes: number;
  /** How long the worker was sampled (its visibility timeout is 1 s: about one read a second). */
  readonly seconds: number;
  /** Resident set when the worker was polling, before the message was sent. */
  readonly rssReady: number;
  /** Highest resident set while the message was on the queue. */
  readonly rssPeak: number;
  /** Highest heap used meanwhile. */
  readonly heapPeak: number;
}

interface Line {
  event: string;
  rss: number;
  heapUsed: number;
}

export async function measureMemory(
  url: string,
  sql: postgres.Sql,
  tasks: number,
  pollIntervalMs: number,
): Promise<MemoryResult> {
  const child = spawnWorker([url, String(tasks), String(pollIntervalMs)]);
  const ready = await child.next();
  await startBacklog(sql, ["bench_memory"], tasks);
  const done = await child.next();
  await child.exited();
  return { tasks, rssReady: ready.rss, rssDone: done.rss, heapDone: done.heapUsed };
}

/**
 * Starts an idle worker in a process of its own, then sends a `megabytes` message that is no
 * task's to its queue, and reports the worker's highest memory over `seconds` (it reads the
 * message about once a second). Before read_and_claim left unclaimed bodies in the database
 * (issue 14), every read brought the whole body into the worker; now only its id arrives. The
 * message is deleted afterwards.
 */
export async function measureForeignMessage(
  url: string,
  sql: postgres.Sql,
  megabytes: number,
  seconds: number,
): Promise<ForeignMessageResult> {
  const child = spawnWorker([url, "0", "50", String(seconds)]);
  const ready = await child.next();
  const [{ id }] = await sql<{ id: string }[]>`
    select pgmq.send('bench_memory', jsonb_build_object('blob', repeat('x', ${
    megabytes * 2 ** 20
  })))::text as id`;
  try {
    const done = await child.next();
    await child.exited();
    return { megabytes, seconds, rssReady: ready.rss, rssPeak: done.rss, heapPeak: done.heapUsed };
  } finally {
    await sql`select pgmq.delete('bench_memory', ${id}::bigint)`;
  }
}

function spawnWorker(args: string[]) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("./memory_worker.ts", import.meta.url).pathname, ...args],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const next = jsonLines<Line>(child.stdout, "the memory worker");
  const exited = async () => {
    const status = await child.status;
    if (!status.success) throw new Error(`the memory worker exited with ${status.code}`);
  };
  return { next, exited };
}

if (import.meta.main) {
  const megabytes = Number(Deno.args[0] ?? 20);
  const seconds = Number(Deno.args[1] ?? 6);
  const db = await openPgflowDatabase();
  const sql = postgres(db.url, { max: 1, onnotice: () => {} });
  try {
    const r = await measureForeignMessage(db.url, sql, megabytes, seconds);
    const mib = (b: number) => (b / 2 ** 20).toFixed(1);
    console.log(
      `one idle worker, a ${megabytes} MB foreign message on its queue for ${seconds} s ` +
        `(visibility timeout 1 s): RSS ${mib(r.rssReady)} MiB at start, peak ${
          mib(r.rssPeak)
        } MiB (+${mib(r.rssPeak - r.rssReady)}); heap peak ${mib(r.heapPeak)} MiB`,
    );
  } finally {
    await sql.end();
    await db.close();
  }
}
