/** Resident memory of one worker process after it has run a given number of tasks. */
import type postgres from "postgres";
import { startBacklog } from "./load.ts";

/** Memory figures in bytes. */
export interface MemoryResult {
  readonly tasks: number;
  readonly rssReady: number;
  readonly rssDone: number;
  readonly heapDone: number;
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
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("./memory_worker.ts", import.meta.url).pathname,
      url,
      String(tasks),
      String(pollIntervalMs),
    ],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const chunks = child.stdout.pipeThrough(new TextDecoderStream())[Symbol.asyncIterator]();
  let buffer = "";
  const next = async (): Promise<Line> => {
    while (!buffer.includes("\n")) {
      const { value, done } = await chunks.next();
      if (done) throw new Error("the memory worker exited early");
      buffer += value;
    }
    const end = buffer.indexOf("\n");
    const line = buffer.slice(0, end);
    buffer = buffer.slice(end + 1);
    return JSON.parse(line) as Line;
  };
  const ready = await next();
  await startBacklog(sql, ["bench_memory"], tasks);
  const done = await next();
  const status = await child.status;
  if (!status.success) throw new Error(`the memory worker exited with ${status.code}`);
  return { tasks, rssReady: ready.rss, rssDone: done.rss, heapDone: done.heapUsed };
}
