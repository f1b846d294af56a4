/**
 * A pool's first query sends and reads arrays correctly even when the process is descheduled
 * right after writing it. postgres.js 3.4.7 learns array types from a query of its own on each
 * new connection and applies the answer a few promise jobs after it starts the first query; under
 * Deno a reply already waiting is handled among those jobs. The pool from `createPool` holds the
 * first query for one event-loop turn (src/platform/wire_gate.ts); a plain postgres.js pool,
 * under the same stall, shows the race is real here.
 */
import assert from "node:assert/strict";
import net from "node:net";
import postgres from "postgres";
import { createPool } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";

const db = testDatabase(import.meta.url);

const MARK = "first-query-stall-mark";
// Long enough that postgres.js writes the query at once instead of on its next turn (1 KB).
const TEXT = `/* ${MARK} ${"x".repeat(1200)} */
  select array_length($1::uuid[], 1) as n, $2::text[] as back`;
const STALL_MS = 5;

/** Runs `body` while every socket write of the marked query is followed by a busy stall. */
async function withStallAfterWrite<T>(body: () => Promise<T>): Promise<T> {
  const write = net.Socket.prototype.write;
  const stalling = function (this: net.Socket, ...args: unknown[]): boolean {
    const written = (write as (...a: unknown[]) => boolean).apply(this, args);
    const chunk = args[0];
    if (chunk instanceof Uint8Array && new TextDecoder().decode(chunk).includes(MARK)) {
      const until = performance.now() + STALL_MS;
      while (performance.now() < until) { /* the process is busy: the reply arrives meanwhile */ }
    }
    return written;
  };
  net.Socket.prototype.write = stalling as typeof write;
  try {
    return await body();
  } finally {
    net.Socket.prototype.write = write;
  }
}

/** The first query on a new pool from `open`: its outcome, 20 times. */
async function firstQueries(open: () => postgres.Sql): Promise<string[]> {
  const outcomes: string[] = [];
  for (let i = 0; i < 20; i++) {
    const sql = open();
    const ids = Array.from({ length: 30 }, () => crypto.randomUUID());
    try {
      const [row] = await sql.unsafe(TEXT, [ids, ids]);
      outcomes.push(
        row.n === ids.length && Array.isArray(row.back) &&
          row.back.join() === ids.join()
          ? "ok"
          : `wrong: ${JSON.stringify(row).slice(0, 80)}`,
      );
    } catch (error) {
      outcomes.push((error as Error).message.split(":")[0]);
    } finally {
      await sql.end({ timeout: 1 });
    }
  }
  return outcomes;
}

db.test("a pool's first query binds and reads arrays even when the reply beats the type fetch", async ({ url }) => {
  const plain = await withStallAfterWrite(() =>
    firstQueries(() => postgres(url, { max: 2, onnotice: () => {} }))
  );
  assert.ok(
    plain.includes("malformed array literal"),
    `the stall should expose postgres.js's race on a plain pool: ${[...new Set(plain)]}`,
  );
  const pooled = await withStallAfterWrite(() => firstQueries(() => createPool(url, { max: 2 })));
  assert.deepEqual([...new Set(pooled)], ["ok"]);
});
