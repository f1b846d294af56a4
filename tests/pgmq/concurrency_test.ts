// Two sessions at once: visibility, SKIP LOCKED, blocking.
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import { freshQueue, pgError, RUN_TARGET, sortedIds } from "./helpers.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

/** Returns once backend `pid` waits for a lock on the server. */
async function waitingForLock(sql: postgres.Sql, pid: number): Promise<void> {
  await waitFor(
    async () =>
      (await sql`select 1 from pg_stat_activity where pid = ${pid} and wait_event_type = 'Lock'`)
        .length > 0,
    { what: `backend ${pid} to wait for a lock`, timeoutMs: 60_000 },
  );
}

async function backendPid(conn: postgres.Sql): Promise<number> {
  return (await conn<{ pid: number }[]>`select pg_backend_pid() as pid`)[0].pid;
}

db.test("33 [all] an uncommitted send is invisible to others, without blocking them", async ({ sql, connect }) => {
  const q = freshQueue("t_uncommitted");
  await sql`select pgmq.create(${q}::text)`;
  const a = connect();
  const b = connect();
  await b`set statement_timeout = '2s'`; // a blocked read would fail instead of hanging
  await a`begin`;
  const [{ id }] = await a`select pgmq.send(${q}::text, '{"a":1}'::jsonb) as id`;
  assert.equal((await b`select * from pgmq.read(${q}::text, 30, 1)`).length, 0);
  assert.equal((await b`select * from pgmq.pop(${q}::text)`).length, 0);
  await a`commit`;
  const rows = await b`select * from pgmq.read(${q}::text, 30, 1)`;
  assert.deepEqual(rows.map((r) => r.msg_id), [id]);
});

db.test("34 [all] readers skip a message another transaction holds", async ({ sql, connect }) => {
  const q = freshQueue("t_skiplocked");
  await sql`select pgmq.create(${q}::text)`;
  await sql`select * from pgmq.send_batch(${q}::text, array['{}'::jsonb, '{}'::jsonb, '{}'::jsonb])`;
  const a = connect();
  const b = connect();
  await b`set statement_timeout = '2s'`;
  await a`begin`;
  const held = await a`select * from pgmq.read(${q}::text, 0, 1)`;
  assert.deepEqual(sortedIds(held), [1]);
  // vt 0 has already expired, yet message 1 stays locked by A until A ends.
  const others = await b`select * from pgmq.read(${q}::text, 0, 5)`;
  assert.deepEqual(sortedIds(others), [2, 3]);
  const popped = await b`select * from pgmq.pop(${q}::text)`;
  assert.equal(popped.length, 1);
  assert.notEqual(Number(popped[0].msg_id), 1);
  await a`rollback`;
  const after = await b`select * from pgmq.read(${q}::text, 0, 5)`;
  const one = after.find((r) => Number(r.msg_id) === 1);
  assert.ok(one, "message 1 is readable again after the rollback");
  assert.equal(one.read_ct, 1);
});

db.test("35 [all] delete waits for a row another transaction holds", async ({ sql, connect }) => {
  const q = freshQueue("t_blocked_delete");
  await sql`select pgmq.create(${q}::text)`;
  await sql`select * from pgmq.send_batch(${q}::text, array['{}'::jsonb, '{}'::jsonb, '{}'::jsonb])`;
  const a = connect();
  const b = connect();
  await a`begin`;
  assert.deepEqual(sortedIds(await a`select * from pgmq.read(${q}::text, 0, 1)`), [1]);
  await b`set lock_timeout = '300ms'`;
  await assert.rejects(() => b`select pgmq.delete(${q}::text, 1::bigint)`, pgError("55P03"));
  await a`rollback`;
  const [{ ok }] = await b`select pgmq.delete(${q}::text, 1::bigint) as ok`;
  assert.equal(ok, true);
});

db.test("[all] a blocked archive completes once the holder commits", async ({ sql, connect }) => {
  const q = freshQueue("t_blocked_archive");
  await sql`select pgmq.create(${q}::text)`;
  await sql`select pgmq.send(${q}::text, '{}'::jsonb)`;
  const a = connect();
  const b = connect();
  const bPid = await backendPid(b);
  await a`begin`;
  assert.deepEqual(sortedIds(await a`select * from pgmq.read(${q}::text, 30, 1)`), [1]);
  const archiving = b`select pgmq.archive(${q}::text, 1::bigint) as ok`.then((r) => r[0].ok);
  let done = false;
  archiving.then(() => (done = true), () => (done = true));
  await waitingForLock(sql, bPid);
  assert.equal(done, false, "archive waits for the row lock");
  await a`commit`;
  assert.equal(await archiving, true);
  const [{ n }] = await sql.unsafe(`select count(*)::int as n from pgmq.a_${q}`);
  assert.equal(n, 1);
});

db.test("[all] concurrent readers never get the same message", async ({ sql, connect }) => {
  const q = freshQueue("t_no_dupes");
  await sql`select pgmq.create(${q}::text)`;
  await sql`
    select * from pgmq.send_batch(${q}::text,
      (select array_agg(jsonb_build_object('i', g)) from generate_series(1, 40) g))`;
  const readers = [connect(), connect(), connect(), connect()];
  const batches = await Promise.all(
    readers.map(async (r) => {
      const got: number[] = [];
      for (;;) {
        const rows = await r`select * from pgmq.read(${q}::text, 60, 3)`;
        if (rows.length === 0) return got;
        got.push(...rows.map((x) => Number(x.msg_id)));
      }
    }),
  );
  const all = batches.flat().sort((x, y) => x - y);
  assert.deepEqual(all, Array.from({ length: 40 }, (_, i) => i + 1));
});

/**
 * PGMQ's extension up to 1.5.1 takes no advisory lock when creating a queue, so two concurrent
 * creates of one new queue may fail with a catalog unique violation; the clone and 1.5.2+ do not.
 */
const UNLOCKED_CREATE = RUN_TARGET.extension &&
  !/^(1\.5\.[2-9]|1\.[6-9]|1\.\d\d|[2-9])/.test(RUN_TARGET.version ?? "");

db.test(
  "[ver] concurrent create of one new queue serialises (clone and 1.5.2+)",
  async ({ sql, connect }) => {
    const q = freshQueue("t_race_create");
    const a = connect();
    const b = connect();
    const bPid = await backendPid(b);
    await a`begin`;
    await a`select pgmq.create(${q}::text)`;
    const second = b`select pgmq.create(${q}::text)`.then(() => "ok");
    await waitingForLock(sql, bPid);
    await a`commit`;
    assert.equal(await second, "ok");
    assert.equal((await sql`select 1 from pgmq.meta where queue_name = ${q}`).length, 1);
  },
  { ignore: UNLOCKED_CREATE },
);
