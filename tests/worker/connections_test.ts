/**
 * The worker's pool behind poolers: no request is ever sent behind an unanswered Sync (what a
 * transaction pooler cannot route), through PgBouncer in transaction mode nothing hangs, and a
 * call whose reply is lost is abandoned with its connection while the pool goes on.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { createPool, DatabaseTimeoutError } from "../../mod.ts";
import { bounded, describeConnection } from "../../tools.ts";
import { testDatabase } from "../support/db.ts";
import { startPgBouncer } from "../../local/pgbouncer.ts";
import { startWireProxy } from "../support/wire_proxy.ts";

const db = testDatabase(import.meta.url);

/**
 * Queries of every shape a handler may send on `context.sql`: without parameters (postgres.js
 * pipelines those), with a parameter postgres.js cannot serialize (it then writes a lone Sync),
 * with errors, arrays and a transaction. Returns each query's outcome.
 */
async function mixedWorkload(sql: postgres.Sql, transaction = true): Promise<Set<string>> {
  const jobs: Promise<string>[] = [];
  for (let i = 0; i < 120; i++) {
    const kind = i % 6;
    const query = kind === 0
      ? sql`select 1 as one`
      : kind === 1
      ? sql`select ${undefined as unknown as number} as nothing`
      : kind === 2
      ? sql`select nonexistent_function(${i})`
      : kind === 3
      ? sql`select ${[i, i + 1]}::int[] as pair`
      : kind === 4
      ? sql`select now()`
      : sql`select ${i}::int as i`;
    jobs.push(query.then(() => "ok", (e: Error) => e.message.split(":")[0]));
  }
  if (transaction) {
    jobs.push(
      sql.begin(async (tx) => {
        await tx`select 1`;
        await tx`select ${2}::int`;
        await assert.rejects(async () => await tx`select ${undefined as unknown as number}`);
      }).then(() => "transaction ok"),
    );
  }
  return new Set(await Promise.all(jobs));
}

/**
 * Rejects when `promise` takes longer than `ms`: a hang fails naming what hung, sooner than the
 * file's bound would. `ms` is far beyond what the work takes on a busy machine, never a measure.
 */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish in ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

db.test("the pool never sends a request behind an unanswered Sync", async ({ url }) => {
  const proxy = startWireProxy(Number(new URL(url).port));
  // max_pipeline is a postgres.js option its type declarations leave out.
  const plain = postgres(proxy.via(url), {
    max: 2,
    prepare: false,
    onnotice: () => {},
    ...{ max_pipeline: 0 },
  });
  const gated = createPool(proxy.via(url), { max: 2 });
  try {
    // The check sees what plain postgres.js does, even with max_pipeline: 0 (the lone Sync), which
    // also breaks its transactions. (Its undefined parameters on a busy connection would hang,
    // but max_pipeline: 0 keeps every connection idle when a query is handed to it.)
    await within(mixedWorkload(plain, false), 60_000, "the plain pool");
    const seen = proxy.violations;
    assert.ok(seen > 0, "plain postgres.js sends requests behind an unanswered Sync");
    const outcomes = await within(mixedWorkload(gated), 60_000, "the worker's pool");
    assert.equal(proxy.violations, seen, "the worker's pool sent none");
    assert.deepEqual(
      [...outcomes].sort(),
      [
        "UNDEFINED_VALUE",
        "function nonexistent_function(unknown) does not exist",
        "ok",
        "transaction ok",
      ].sort(),
    );
  } finally {
    await plain.end({ timeout: 1 });
    await gated.end({ timeout: 1 });
    await proxy.close();
  }
});

for (const mode of ["transaction", "session"] as const) {
  db.test(`through PgBouncer in ${mode} mode every kind of query finishes`, async ({ url }) => {
    const bouncer = await startPgBouncer({ serverPort: Number(new URL(url).port), mode });
    const sql = createPool(bouncer.via(url), { max: 3 });
    try {
      for (let round = 0; round < 3; round++) {
        const outcomes = await within(mixedWorkload(sql), 60_000, `round ${round}`);
        assert.ok(outcomes.has("ok") && outcomes.has("transaction ok"));
      }
      const info = await describeConnection(sql, bouncer.via(url));
      assert.equal(info.kind, "pooler");
      const log = await bouncer.log();
      assert.doesNotMatch(log, /not linked|got dirty/, "PgBouncer lost track of no server");
    } finally {
      await sql.end({ timeout: 1 });
      await bouncer.destroy();
    }
  });
}

db.test("an undefined parameter on a busy connection fails that query alone", async ({ url }) => {
  // Plain postgres.js rejects the query running before it and never sends it: a hang.
  const sql = createPool(url, { max: 1 });
  try {
    await sql`select 1`; // an open, idle connection: the next query goes straight to it
    const results = await within(
      Promise.all([
        sql`select pg_sleep(0.05)`.then(() => "first ok"),
        sql`select ${undefined as unknown as number} as v`.then(() => "sent", (e) => e.code),
        sql`select now()`.then(() => "third ok"),
      ]),
      60_000,
      "the three queries",
    );
    assert.deepEqual(results, ["first ok", "UNDEFINED_VALUE", "third ok"]);
  } finally {
    await sql.end({ timeout: 1 });
  }
});

db.test("a direct connection is told apart from a pooler; the password is not kept", async ({ url }) => {
  const sql = createPool(url, { max: 1 });
  try {
    const withPassword = new URL(url);
    withPassword.password = "s3cret";
    const info = await describeConnection(sql, withPassword.toString());
    assert.equal(info.kind, "direct");
    assert.doesNotMatch(JSON.stringify(info), /s3cret/);
  } finally {
    await sql.end();
  }
});

db.test("a call whose reply is lost is abandoned, its connection replaced", async ({ url }) => {
  const proxy = startWireProxy(Number(new URL(url).port));
  const sql = createPool(proxy.via(url), { max: 1 });
  try {
    assert.equal((await sql`select ${1}::int as v`)[0].v, 1);
    // The reply of this very call is lost (a wait then a loss left it to timing whether the reply
    // came first on a busy machine).
    const lost = proxy.loseReplyTo(/select 'probe'/);
    const probe = bounded(sql`select 'probe', ${2}::int as v`, "probe", 1_000);
    await lost;
    await assert.rejects(probe, (e: unknown) => {
      assert.ok(e instanceof DatabaseTimeoutError, String(e));
      assert.match(e.message, /^probe: no answer within 1000 ms; its connection was replaced$/);
      return true;
    });
    // The pool goes on, on a new connection.
    assert.equal((await sql`select ${3}::int as v`)[0].v, 3);
    assert.equal(proxy.connections, 2);
  } finally {
    await sql.end({ timeout: 1 });
    await proxy.close();
  }
});

db.test("a call still waiting for a connection is cancelled, not its neighbour", async ({ url }) => {
  const sql = createPool(url, { max: 1 });
  try {
    const busy = sql`select pg_sleep(0.6), ${1}::int as v`.execute();
    const queued = bounded(sql`select ${2}::int as v`, "queued", 200);
    await assert.rejects(queued, DatabaseTimeoutError);
    // The connection running the first query was left alone: it answers.
    assert.equal((await busy)[0].v, 1);
    assert.equal((await sql`select ${3}::int as v`)[0].v, 3);
  } finally {
    await sql.end();
  }
});
