/**
 * A run's events come in the order they happened, even when a batch of completions waited for
 * another run's lock: a dependent's start never precedes the completion of any of its
 * dependencies, and times never go backwards within a run, in the live stream (snapshots read
 * after each commit) and in a late one (one snapshot at the end) alike.
 */
import assert from "node:assert/strict";
import { eventsBetween } from "../../src/client/diff.ts";
import { type AnyRunState, toRunState } from "../../src/client/snapshot.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

const describe = (events: ReturnType<typeof eventsBetween>) =>
  events.map((e) => ("stepSlug" in e && e.stepSlug ? `${e.type} ${e.stepSlug}` : e.type));

db.test("a batch that waited for another run's lock does not date its changes before ones committed meanwhile", async ({ sql, connect }) => {
  // a and b are roots; c needs both.
  await defineFlow(sql, "eo_flow", [
    { slug: "a", queue: "eo_q" },
    { slug: "b", queue: "eo_q" },
    { slug: "c", deps: ["a", "b"], queue: "eo_q" },
  ], { mode: "routed" });
  // The batch locks its runs in run id order: r0 first, so it waits there before touching r1.
  const [r0, r1] = [crypto.randomUUID(), crypto.randomUUID()].sort();
  for (const id of [r0, r1]) await sql`select pgflow.start_flow('eo_flow', '{}', ${id}::uuid)`;
  const worker = await registerWorker(sql, "eo_q");
  const tasks = await readAndStart(sql, "eo_q", worker, [["eo_flow", "a"], ["eo_flow", "b"]], 10);
  assert.equal(tasks.length, 4);
  const attempt = (run: string, step: string) =>
    tasks.find((t) => t.run_id === run && t.step_slug === step)!.attempt;
  const snapshot = async () =>
    toRunState((await sql`select pgflow.get_run(${r1}::uuid) as run`)[0].run)!;
  const live: AnyRunState[] = [await snapshot()];

  // Someone holds r0's lock (a long completion of another worker, say).
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const locked = Promise.withResolvers<void>();
  const locker = connect().begin(async (tx) => {
    await tx`select 1 from pgflow.runs where run_id = ${r0}::uuid for update`;
    locked.resolve();
    await held;
  });
  await locked.promise;

  // A batch completing r0's a and r1's b waits on r0's lock (sent now: execute()).
  const batcher = connect();
  const batch = batcher`select pgflow.complete_tasks(
    ${[r0, r1]}::uuid[], ${["a", "b"]}::text[], ${[0, 0]}::int[], ${['"a0"', '"b1"']}::jsonb[],
    ${[attempt(r0, "a"), attempt(r1, "b")]}::int[])`.execute();
  await waitFor(async () =>
    (await sql`select 1 from pg_stat_activity
               where wait_event_type = 'Lock' and query like '%complete_tasks%'
                 and datname = current_database()`).length > 0, {
    what: "the batch waiting on r0's lock",
  });

  // Meanwhile r1's a completes alone: c still waits for b.
  await sql`select pgflow.complete_task(${r1}::uuid, 'a', 0, '"a1"', ${attempt(r1, "a")})`;
  live.push(await snapshot());
  release();
  await locker;
  await batch;
  live.push(await snapshot());

  const liveEvents = live.flatMap((s, i) => eventsBetween(i === 0 ? undefined : live[i - 1], s));
  const lateEvents = eventsBetween(undefined, live.at(-1)!);
  const expected = [
    "run:started",
    "step:started a",
    "step:started b",
    "step:completed a",
    "step:completed b",
    "step:started c",
  ];
  assert.deepEqual(describe(liveEvents), expected, "live stream");
  assert.deepEqual(describe(lateEvents), expected, "late stream");
  for (const [name, events] of [["live", liveEvents], ["late", lateEvents]] as const) {
    const times = events.map((e) => e.at);
    assert.deepEqual(times, [...times].sort(), `${name}: times never go backwards (${times})`);
  }
  const last = live.at(-1)!;
  const step = (slug: string) => last.steps.find((s) => s.stepSlug === slug)!;
  assert.ok(step("c").startedAt! >= step("a").completedAt!, "c started after a completed");
  assert.ok(step("c").startedAt! >= step("b").completedAt!, "c started after b completed");
  await batcher.end();
});
