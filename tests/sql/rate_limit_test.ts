/**
 * Rate limits (docs/flow-control.md, Rate limits): the claim starts at most N tasks of a key per
 * window and sends the others back to waiting with not_before, their messages archived and their
 * attempts not counted; the release sends them again when their time has come, by priority; a
 * step may have a concurrency limit too; cancel leaves nothing behind; the compiler stores and
 * tunes rate limits like concurrency limits, and bad values fail at the DSL and SQL boundaries.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { Flow, FlowDefinitionError, routeFlow } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow, defineFlow, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

type Sql = postgres.Sql;

async function claim(sql: Sql, slug: string, worker: string, qty = 10) {
  return await sql<{ disposition: string; run_id: string; task_index: number; attempt: number }[]>`
    select disposition, run_id, task_index, attempt
    from pgflow.read_and_claim(${slug + "_q"}, ${worker}, 30, ${qty}, 0, 50,
                               ${sql.json([[slug, "s"]])})`;
}

async function tasks(sql: Sql, slug: string) {
  return await sql<
    {
      task_index: number;
      status: string;
      message_id: string | null;
      attempts_count: number;
      not_before: Date | null;
      rate_key: string;
    }[]
  >`select task_index, status, message_id, attempts_count, not_before, rate_key
    from pgflow.step_tasks where flow_slug = ${slug} order by task_index`;
}

/** A map flow whose step `s` starts at most `limit` per `per` per key `$.k` of its element. */
async function rateLimited(sql: Sql, slug: string, limit: number, per: string): Promise<void> {
  await defineFlow(sql, slug, [{ slug: "s", queue: `${slug}_q`, type: "map" }], { mode: "routed" });
  await sql`select pgflow.set_step_rate_limit(${slug}, 's', ${limit}, ${per}::interval, '$.k', 'input')`;
}

db.test("a full window sends tasks back to waiting, archived and uncounted; release sends them again when time allows", async ({ sql }) => {
  await rateLimited(sql, "rl1", 2, "1 hour");
  const items = [...Array(5).keys()].map(() => ({ k: "a" })).concat([{ k: "b" }]);
  await sql`select pgflow.start_flow('rl1', ${sql.json(items)})`;
  const worker = await registerWorker(sql, "rl1_q");
  const rows = await claim(sql, "rl1", worker);
  const byDisposition = (d: string) => rows.filter((r) => r.disposition === d).length;
  assert.deepEqual([byDisposition("claimed"), byDisposition("rate_limited")], [3, 3]);
  const after = await tasks(sql, "rl1");
  const waiting = after.filter((t) => t.status === "waiting");
  assert.equal(waiting.length, 3);
  assert.ok(waiting.every((t) => t.rate_key === "a" && t.message_id === null));
  assert.ok(waiting.every((t) => t.attempts_count === 0), "a rate-limited claim is no attempt");
  assert.ok(waiting.every((t) => t.not_before!.getTime() > Date.now() + 3_500_000));
  const [{ archived }] = await sql`select count(*)::int as archived from pgmq.a_rl1_q`;
  assert.equal(archived, 3, "their messages are archived, not left to be read again");
  const [{ reason }] = await sql`select reason from pgflow.waiting_tasks('rl1_q')`;
  assert.match(reason, /^rate limit rl1\/s key a: 2 per 3600 s, next at \d{4}-\d\d-\d\d /);
  const [{ run }] =
    await sql`select distinct run_id as run from pgflow.step_tasks where flow_slug = 'rl1'`;
  const [{ waiting: shown }] = await sql`select s -> 'waiting' as waiting
    from jsonb_array_elements(pgflow.get_run(${run}) -> 'steps') s where s ->> 'step_slug' = 's'`;
  assert.deepEqual(
    shown.map((w: { tasks: number; in_flight: number; max_running: number }) => [
      w.tasks,
      w.in_flight,
      w.max_running,
    ]),
    [[3, 2, 2]],
    "get_run shows them: 3 waiting, 2 starts in the window of 2",
  );

  assert.equal((await sql`select pgflow.release_rate_waiting() as n`)[0].n, 0, "not yet");
  // An hour passes for key a: its window's starts and the tasks' not_before move back.
  await sql`update pgflow.rate_limit_windows
            set starts = array(select s - interval '1 hour' from unnest(starts) s)
            where scope = 'rl1/s'`;
  await sql`update pgflow.step_tasks set not_before = not_before - interval '1 hour'
            where status = 'waiting' and flow_slug = 'rl1'`;
  assert.equal((await sql`select pgflow.release_rate_waiting() as n`)[0].n, 2, "the window's room");
  const again = await claim(sql, "rl1", worker);
  assert.deepEqual(again.map((r) => r.disposition), ["claimed", "claimed"]);
  assert.ok(again.every((r) => r.attempt === 1));
  const [{ starts }] = await sql`select cardinality(starts) as starts from pgflow.rate_limit_windows
                                 where scope = 'rl1/s' and key = 'a'`;
  assert.equal(starts, 2, "a window keeps the last limit starts");
});

db.test("waiting rate-limited tasks are released by priority", async ({ sql }) => {
  await rateLimited(sql, "rl2", 1, "1 hour");
  const worker = await registerWorker(sql, "rl2_q");
  await sql`select pgflow.start_flow('rl2', ${sql.json([{ k: "a" }])})`;
  assert.deepEqual((await claim(sql, "rl2", worker)).map((r) => r.disposition), ["claimed"]);
  await sql`select pgflow.start_flow('rl2', ${sql.json([{ k: "a" }])}, priority => 0)`;
  await sql`select pgflow.start_flow('rl2', ${sql.json([{ k: "a" }])}, priority => 10)`;
  assert.deepEqual((await claim(sql, "rl2", worker)).map((r) => r.disposition), [
    "rate_limited",
    "rate_limited",
  ]);
  await sql`update pgflow.rate_limit_windows set starts = array[now() - interval '2 hours']
            where scope = 'rl2/s'`;
  await sql`update pgflow.step_tasks set not_before = now() - interval '1 second'
            where status = 'waiting' and flow_slug = 'rl2'`;
  assert.equal((await sql`select pgflow.release_rate_waiting() as n`)[0].n, 1);
  const [{ priority }] = await sql`select priority from pgflow.step_tasks
                                   where status = 'queued' and flow_slug = 'rl2'`;
  assert.equal(priority, 10, "the priority-10 run's task goes first");
});

db.test("with a concurrency limit too, both hold; cancel leaves no waiting task or message", async ({ sql }) => {
  await rateLimited(sql, "rl3", 1, "1 hour");
  await sql`select pgflow.set_step_flow_control('rl3', 's', concurrency => 3)`;
  const [{ run }] = await sql`select (pgflow.start_flow('rl3', ${
    sql.json([...Array(6).keys()].map(() => ({ k: "a" })))
  })).run_id as run`;
  const worker = await registerWorker(sql, "rl3_q");
  const rows = await claim(sql, "rl3", worker);
  assert.deepEqual(
    [rows.filter((r) => r.disposition === "claimed").length, rows.length],
    [1, 3],
    "three released by the concurrency limit, one started by the rate limit",
  );
  const t = await tasks(sql, "rl3");
  assert.equal(t.filter((x) => x.status === "started").length, 1);
  assert.equal(
    t.filter((x) => x.status === "queued").length,
    0,
    "the window has no room: none sent",
  );
  assert.equal(t.filter((x) => x.status === "waiting").length, 5);
  // An hour passes: pgflow.tick releases them through the concurrency limit's own pass, and the
  // claim still starts one per window.
  await sql`update pgflow.rate_limit_windows
            set starts = array(select s - interval '1 hour' from unnest(starts) s)
            where scope = 'rl3/s'`;
  await sql`update pgflow.step_tasks set not_before = not_before - interval '1 hour'
            where status = 'waiting' and flow_slug = 'rl3'`;
  assert.ok((await sql`select pgflow.tick() as n`)[0].n >= 1, "tick released what time allows");
  assert.deepEqual(
    (await claim(sql, "rl3", worker)).filter((r) => r.disposition === "claimed").length,
    1,
  );
  await sql`select pgflow.cancel_run(${run})`;
  const [c] = await sql`select count(*) filter (where status = 'waiting')::int as waiting,
                               count(*) filter (where status = 'cancelled')::int as cancelled
                        from pgflow.step_tasks where flow_slug = 'rl3'`;
  assert.deepEqual([c.waiting, c.cancelled], [0, 6]);
  const [{ visible }] = await sql`select count(*)::int as visible from pgmq.q_rl3_q`;
  assert.equal(visible, 0);
});

function version(slug: string, limit: number, per: string | number) {
  const flow = new Flow<{ channel: string }>({ slug, alias: "notify" })
    .step({ slug: "send", rateLimit: { limit, per, key: "$.channel" } }, () => 1);
  return routeFlow(flow, { queues: { send: "rl_c_q" } });
}

db.test("the compiler stores a rate limit; a later compile tunes it, and versions of an alias share it", async ({ sql }) => {
  assert.equal((await compileFlow(sql, version("notify_v1", 1, "1 second"))).status, "compiled");
  const [step] = await sql`select rate_scope, rate_key::text as key, rate_key_from from pgflow.steps
                           where flow_slug = 'notify_v1'`;
  assert.deepEqual([step.rate_scope, step.key, step.rate_key_from], [
    "notify/send",
    '$."channel"',
    "run",
  ]);
  const limit = async () =>
    (await sql`select max_starts, extract(epoch from per)::float8 as per from pgflow.rate_limits
               where scope = 'notify/send'`)[0];
  assert.deepEqual({ ...(await limit()) }, { max_starts: 1, per: 1 });
  const again = await compileFlow(sql, version("notify_v1", 5, 60_000));
  assert.equal(again.status, "verified");
  assert.deepEqual(again.optionDifferences, [], "a rate limit is not drift: it is applied");
  assert.deepEqual({ ...(await limit()) }, { max_starts: 5, per: 60 });
  assert.equal((await compileFlow(sql, version("notify_v2", 2, "500 ms"))).status, "compiled");
  assert.deepEqual({ ...(await limit()) }, { max_starts: 2, per: 0.5 }, "v2 shares v1's window");
  // The key path of an existing version is its definition's: a compile does not change it.
  const keyed = routeFlow(
    new Flow<{ channel: string }>({ slug: "notify_v1", alias: "notify" })
      .step({ slug: "send", rateLimit: { limit: 2, per: "1 second", key: "$.team" } }, () => 1),
    { queues: { send: "rl_c_q" } },
  );
  assert.equal((await compileFlow(sql, keyed)).status, "verified");
  const [{ key }] = await sql`select rate_key::text as key from pgflow.steps
                              where flow_slug = 'notify_v1'`;
  assert.equal(key, '$."channel"', "the stored key governs");
});

db.test("bad rate limits fail at the SQL boundary naming the option, the value and the fix", async ({ sql }) => {
  await defineFlow(sql, "rl5", [{ slug: "s", queue: "rl5_q" }], { mode: "routed" });
  const cases: [string, number, string, string | null, RegExp][] = [
    [
      "s",
      0,
      "1 second",
      null,
      /step rl5\.s: rateLimit\.limit must be an integer between 1 and 100000/,
    ],
    [
      "s",
      1,
      "1 ms",
      null,
      /step rl5\.s: rateLimit\.per must be an interval from 10 ms to 86400000 ms/,
    ],
    ["s", 1, "2 days", null, /rateLimit\.per .* got 172800000/],
    ["s", 1, "1 second", "$.x[", /step rl5\.s: rateLimit\.key "\$\.x\[" is not a JSON path/],
    ["t", 1, "1 second", null, /step rl5\.t does not exist/],
  ];
  for (const [step, limit, per, key, message] of cases) {
    await assert.rejects(
      sql`select pgflow.set_step_rate_limit('rl5', ${step}, ${limit}, ${per}::interval, ${key})`,
      message,
    );
  }
  await assert.rejects(
    sql`select pgflow.set_rate_limit('rl5/s', 1, interval '3 days')`,
    /set_rate_limit: rateLimit\.per must be an interval/,
  );
  const shape = {
    steps: [{
      slug: "a",
      index: 0,
      stepType: "single",
      dependencies: [],
      whenUnmet: "skip",
      whenExhausted: "fail",
      requiredInputPattern: { defined: false },
      forbiddenInputPattern: { defined: false },
    }],
  };
  const options = { flow: {}, steps: { a: { rateLimit: { limit: 1, per: "soon" } } } };
  await assert.rejects(
    sql`select pgflow.ensure_flow_compiled('rl_bad', ${sql.json(shape)}, ${
      sql.json({ mode: "routed", queues: { a: "rl_bad_q" } })
    }, ${sql.json(options)})`,
    /flow rl_bad: invalid definition: step a: rateLimit\.per must be an interval .* got "soon"/,
  );
});

Deno.test("the DSL refuses bad rate limits at definition, naming the option and the fix", () => {
  const step = (rateLimit: unknown) => () =>
    new Flow<{ c: string }>({ slug: "f" }).step(
      { slug: "s", rateLimit: rateLimit as { limit: number; per: string } },
      () => 1,
    );
  const cases: [unknown, RegExp][] = [
    [{ limit: 0, per: "1 second" }, /step "s".*rateLimit\.limit is 0.*between 1 and 100000/],
    [
      { limit: 1, per: "1 fortnight" },
      /rateLimit\.per is "1 fortnight".*write e\.g\. per: "1 second"/,
    ],
    [
      { limit: 1, per: 5 },
      /rateLimit\.per is 5, but it must be a whole number of milliseconds from 10/,
    ],
    [{ limit: 1, per: "1 s", key: "channel" }, /rateLimit\.key is "channel", not a JSON path/],
    [{ limit: 1, per: "1 s", keyFrom: "input" }, /rateLimit\.keyFrom needs a key/],
    [{ limit: 1, per: "1 s", scope: "x" }, /rateLimit has an unknown option "scope"/],
    [3, /rateLimit is 3; write e\.g\. \{ limit: 1, per: "1 second"/],
  ];
  for (const [rateLimit, message] of cases) {
    assert.throws(
      step(rateLimit),
      (e: unknown) => e instanceof FlowDefinitionError && message.test(e.message),
    );
  }
  const ok = new Flow<{ c: string }>({ slug: "f", rateLimit: { limit: 2, per: "2 minutes" } })
    .step({ slug: "s" }, () => 1);
  assert.deepEqual(ok.flowControl.rateLimit, { limit: 2, per: 120_000 });
});
