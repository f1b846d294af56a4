/**
 * Bad input, generated from a seed (printed; replay with RELIABILITY_SEED): thousands of slugs,
 * queue names, route maps and worker configs are each accepted or rejected with an error that names
 * the value; TypeScript and SQL agree on every case; a rejected definition leaves no trace in SQL
 * (catalog and table snapshots before and after `pgflow.ensure_flow_compiled`); and foreign
 * messages (any body, however large, naming any flow) never authorise work.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import {
  createWorker,
  Flow,
  routeFlow,
  validateQueueName,
  validateSlug,
  WorkerConfigError,
} from "../../mod.ts";
import { extractFlowShape } from "../../src/compile/shape.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow, queueMessages, startTasks } from "../support/engine.ts";
import { rng, seedFromEnv } from "./harness.ts";

const db = testDatabase(import.meta.url);
const SEED = seedFromEnv();
console.log(`bad-input seed ${SEED} (replay with RELIABILITY_SEED=${SEED})`);

/** A small generator of awkward strings, biased towards the edges of every rule. */
class Gen {
  readonly next: () => number;
  constructor(seed: number) {
    this.next = rng(seed);
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(0, items.length - 1)];
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  /** Mostly name-like text, with every kind of wrong character and length sprinkled in. */
  name(): string {
    const special = ["", "run", "RUN", "a__b", "_a", "a_", "A", "a", "9a", "a-b", "a b", "a.b"];
    if (this.chance(0.08)) return this.pick(special);
    const length = this.pick([
      this.int(1, 8),
      this.int(1, 20),
      this.int(44, 50),
      this.int(124, 132),
    ]);
    const pools = [
      "abcdefghijklmnopqrstuvwxyz",
      "abcdefghijklmnopqrstuvwxyz0123456789_",
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_",
      "abc_-. ',;%\"\\\n\tédß😀$()",
    ];
    const pool = [...this.pick(pools.slice(0, 3))];
    const rare = [...pools[3]];
    let out = "";
    while ([...out].length < length) {
      out += this.chance(0.04) ? this.pick(rare) : this.pick(pool);
    }
    return out;
  }
  /** Any JSON value, sometimes deep, sometimes large. */
  json(depth = 0): unknown {
    const kind = this.int(0, depth > 2 ? 4 : 6);
    switch (kind) {
      case 0:
        return this.pick([0, -1, 1.5, 2 ** 53 + 2, 1e308]);
      case 1:
        return this.name();
      case 2:
        return this.chance(0.5);
      case 3:
        return null;
      case 4:
        return this.pick(["", "x".repeat(this.int(0, 5000))]);
      case 5:
        return Array.from({ length: this.int(0, 4) }, () => this.json(depth + 1));
      default:
        return Object.fromEntries(
          Array.from({ length: this.int(0, 4) }, () => [this.name(), this.json(depth + 1)]),
        );
    }
  }
}

/** Runs `fn`; returns the error it threw, or undefined. */
function thrown(fn: () => unknown): Error | undefined {
  try {
    fn();
    return undefined;
  } catch (error) {
    return error as Error;
  }
}

/** The part of a value an error message must show (long values may be shortened). */
function shown(value: string): string {
  return value.slice(0, 40);
}

db.test("3,000 generated slugs: TypeScript and SQL agree, rejections name the value", async ({ sql }) => {
  const gen = new Gen(SEED);
  const cases = Array.from({ length: 3000 }, () => gen.name());
  const rows = await sql<{ ok: boolean }[]>`
    select pgflow.is_valid_slug(s) as ok from unnest(${cases}::text[]) with ordinality u(s, i) order by i`;
  let accepted = 0;
  cases.forEach((slug, i) => {
    const error = thrown(() => validateSlug(slug, "step slug"));
    assert.equal(
      error === undefined,
      rows[i].ok,
      `TS and SQL disagree on slug ${JSON.stringify(slug)}`,
    );
    if (error) {
      assert.equal(error.name, "FlowDefinitionError");
      if (slug !== "") assert.ok(error.message.includes(shown(slug)), error.message);
    } else accepted++;
  });
  assert.ok(accepted > 300 && accepted < 2700, `a useful mix: ${accepted} accepted`);
});

db.test("3,000 generated queue names: TypeScript, pgflow and PGMQ agree", async ({ connect }) => {
  const gen = new Gen(SEED + 1);
  const cases = Array.from({ length: 3000 }, () => gen.name().toLowerCase());
  // One session: the PGMQ probe is a temporary function.
  const one = connect();
  await one.unsafe(
    `create function pg_temp.pgmq_accepts(q text) returns boolean language plpgsql as $$
    begin perform pgmq.validate_queue_name(q); return true; exception when others then return false; end $$`,
  );
  const rows = await one<{ ok: boolean; pgmq: boolean }[]>`
    select pgflow.is_valid_queue_name(q) as ok, pg_temp.pgmq_accepts(q) as pgmq
    from unnest(${cases}::text[]) with ordinality u(q, i) order by i`;
  let accepted = 0;
  cases.forEach((name, i) => {
    const error = thrown(() => validateQueueName(name));
    assert.equal(error === undefined, rows[i].ok, `TS and SQL disagree on ${JSON.stringify(name)}`);
    if (error) {
      assert.equal(error.name, "RoutingError");
      if (name !== "") assert.ok(error.message.includes(name), error.message);
    } else {
      accepted++;
      assert.ok(rows[i].pgmq, `PGMQ refuses ${name}, which pgflow accepts`);
    }
  });
  assert.ok(accepted > 300 && accepted < 2700, `a useful mix: ${accepted} accepted`);
});

/** A random flow of 1-4 steps with valid, distinct slugs. */
function randomFlow(gen: Gen, slug: string) {
  const steps: string[] = [];
  while (steps.length < gen.int(1, 4)) {
    const s = gen.pick(["a", "b", "classify", "enrich", "Deliver", "step_2", "x1"]);
    if (!steps.some((t) => t.toLowerCase() === s.toLowerCase())) steps.push(s);
  }
  let flow = new Flow<{ n: number }>({ slug }) as unknown as Flow;
  for (const s of steps) {
    flow = (flow as unknown as { step: (o: { slug: string }, h: () => number) => Flow }).step(
      { slug: s },
      () => 1,
    );
  }
  return { flow, steps };
}

/** A route map for `steps`: usually plausible, often wrong in one way or another. */
function randomRoutes(gen: Gen, steps: string[]): Record<string, unknown> {
  const queues: Record<string, unknown> = {};
  for (const s of steps) {
    if (gen.chance(0.06)) continue; // missing step
    queues[s] = gen.chance(0.6)
      ? gen.pick(["shared_a", "shared_b", "thread_processing"])
      : gen.chance(0.85)
      ? gen.name()
      : gen.pick([7, null, { q: "shared_a" }, ["shared_a"], true]);
  }
  if (gen.chance(0.06)) queues[gen.name()] = "shared_a"; // unknown step
  return queues;
}

db.test("2,000 generated route maps: routeFlow and the SQL definition check agree", async ({ sql }) => {
  const gen = new Gen(SEED + 2);
  const cases: { flow: Flow; queues: Record<string, unknown>; error?: Error }[] = [];
  for (let i = 0; i < 2000; i++) {
    const { flow, steps } = randomFlow(gen, `fz_route_${i}`);
    const queues = randomRoutes(gen, steps);
    const error = thrown(() => routeFlow(flow as never, { queues } as never));
    cases.push({ flow, queues, error });
  }
  const rows = await sql<{ problems: string[] }[]>`
    select pgflow._definition_problems(c ->> 'slug', c -> 'shape', c -> 'routes') as problems
    from jsonb_array_elements(${
    sql.json(
      cases.map((c) => ({
        slug: c.flow.slug,
        shape: extractFlowShape(c.flow as never),
        routes: { mode: "routed", queues: c.queues },
      })) as never,
    )
  }) with ordinality u(c, i) order by i`;
  let rejected = 0;
  cases.forEach((c, i) => {
    const sqlOk = rows[i].problems.length === 0;
    const where = `${c.flow.slug} ${JSON.stringify(c.queues)}: TS ${
      c.error?.message ?? "accepts"
    }; SQL ${rows[i].problems.join("; ") || "accepts"}`;
    assert.equal(c.error === undefined, sqlOk, `TS and SQL disagree: ${where}`);
    if (c.error) {
      rejected++;
      assert.equal(c.error.name, "RoutingError", where);
      // The message names what is wrong: a missing or unknown step, or the offending value.
      const named = Object.entries(c.queues).some(([k, v]) =>
        c.error!.message.includes(`"${k}"`) &&
        (typeof v !== "string" || v === "" || c.error!.message.includes(v))
      ) || /missing step|unknown step/.test(c.error.message);
      assert.ok(named, where);
    }
  });
  assert.ok(rejected > 200 && rejected < 1800, `a useful mix: ${rejected} rejected`);
});

/** Every pgflow table's contents and every pgflow/pgmq relation, as comparable text. */
async function snapshot(sql: postgres.Sql): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const rels = await sql<{ name: string; kind: string; ns: string }[]>`
    select c.relname as name, c.relkind::text as kind, n.nspname as ns from pg_class c
    join pg_namespace n on n.oid = c.relnamespace
    where n.nspname in ('pgflow', 'pgmq') order by 3, 1`;
  out.relations = rels.map((r) => `${r.ns}.${r.name}:${r.kind}`).join(",");
  for (const r of rels.filter((r) => r.kind === "r")) {
    const [row] = await sql.unsafe(
      `select count(*) as n, md5(coalesce(string_agg(t::text, '|' order by t::text), '')) as h
       from "${r.ns}"."${r.name}" t`,
    );
    out[`${r.ns}.${r.name}`] = `${row.n}:${row.h}`;
  }
  return out;
}

db.test("rejected definitions leave SQL exactly as it was", async ({ sql }) => {
  const gen = new Gen(SEED + 3);
  // Things a bad definition could collide with: a shared queue in use, an external PGMQ queue,
  // a plain flow's queue.
  const base = new Flow<{ n: number }>({ slug: "fz_base" }).step({ slug: "a" }, () => 1);
  assert.equal(
    (await compileFlow(sql, routeFlow(base, { queues: { a: "shared_a" } }))).status,
    "compiled",
  );
  const plain = new Flow<{ n: number }>({ slug: "fz_plain" }).step({ slug: "a" }, () => 1);
  assert.equal((await compileFlow(sql, plain)).status, "compiled");
  await sql`select pgmq.create('external_q')`;

  let before = await snapshot(sql);
  let rejected = 0;
  for (let i = 0; rejected < 100 && i < 2000; i++) {
    const { flow, steps } = randomFlow(gen, `fz_bad_${i}`);
    let queues = randomRoutes(gen, steps);
    // Half the cases pass the definition check but collide with a queue pgflow did not declare.
    if (i % 2 === 0) {
      queues = Object.fromEntries(
        steps.map((s) => [s, gen.pick(["external_q", "fz_plain", "shared_a"])]),
      );
    }
    const shape = extractFlowShape(flow as never);
    if (gen.chance(0.1)) (shape.steps as unknown as Record<string, unknown>[])[0].stepType = "loop";
    const error = await sql`select pgflow.ensure_flow_compiled(${flow.slug}, ${
      sql.json(shape as never)
    },
        ${sql.json({ mode: "routed", queues } as never)}, '{}'::jsonb)`.then(
      () => undefined,
      (e: Error) => e,
    );
    if (error === undefined) {
      // Accepted definitions are fine too; they change the snapshot, so start a new baseline.
      before = await snapshot(sql);
      continue;
    }
    rejected++;
    assert.ok(/fz_bad_\d+|external_q|fz_plain|invalid|queue/.test(error.message), error.message);
    // Not a table row, not a relation changed (sequences may advance; they are not compared).
    assert.deepEqual(await snapshot(sql), before, `after ${error.message}`);
  }
  assert.equal(rejected, 100);
});

/** Options with their documented integer ranges. */
const INT_OPTIONS: Record<string, [number, number]> = {
  maxConcurrent: [1, 1000],
  batchSize: [1, 1000],
  visibilityTimeout: [1, 3600],
  maxPollSeconds: [1, 60],
  pollIntervalMs: [10, 10_000],
  maxPgConnections: [2, 100],
  heartbeatIntervalMs: [100, 60_000],
  stalledRecoveryIntervalMs: [0, 3_600_000],
  scheduleTickIntervalMs: [0, 3_600_000],
};

Deno.test("3,000 generated worker configs: each is accepted or rejected naming option and value", () => {
  const gen = new Gen(SEED + 4);
  const flow = new Flow<{ n: number }>({ slug: "fz_cfg" }).step({ slug: "a" }, () => 1);
  const values = (key: string) =>
    INT_OPTIONS[key] && gen.chance(0.6) ? gen.int(...INT_OPTIONS[key]) : gen.pick<unknown>([
      gen.int(-5, 5000),
      gen.int(0, 4_000_000),
      1.5,
      NaN,
      Infinity,
      "10",
      null,
      true,
      [1],
      { n: 1 },
      gen.name(),
      crypto.randomUUID(),
    ]);
  let accepted = 0;
  for (let i = 0; i < 3000; i++) {
    const config: Record<string, unknown> = { connectionString: "postgres://u@h/db", env: {} };
    for (let k = gen.int(1, 3); k > 0; k--) {
      const key = gen.pick([...Object.keys(INT_OPTIONS), "functionName", "workerId", gen.name()]);
      if (key in config) continue;
      config[key] = values(key);
    }
    let expected: string | undefined; // the key the error must name
    for (const [key, value] of Object.entries(config)) {
      if (key === "connectionString" || key === "env") continue;
      const range = INT_OPTIONS[key];
      const bad = range
        ? !(Number.isInteger(value) && (value as number) >= range[0] &&
          (value as number) <= range[1])
        : key === "functionName"
        ? !(typeof value === "string" && /^[A-Za-z0-9_-]{1,128}$/.test(value))
        : key === "workerId"
        ? !(typeof value === "string" && /^[0-9a-f-]{36}$/i.test(value))
        : true;
      if (bad) expected ??= key;
    }
    const poll = (config.pollIntervalMs as number | undefined) ?? 50;
    const maxPoll = (config.maxPollSeconds as number | undefined) ?? 2;
    if (expected === undefined && poll > maxPoll * 1000) expected = "pollIntervalMs";
    const error = thrown(() => createWorker(flow, config as never));
    const where = `${JSON.stringify(config)}: ${error?.message ?? "accepted"}`;
    if (expected === undefined) {
      assert.equal(error, undefined, where);
      accepted++;
      continue;
    }
    assert.ok(error instanceof WorkerConfigError, where);
    // Several options may be wrong; the one reported must be one of them, shown with its value.
    // Messages start with the option's name ("pollIntervalMs must be ..."), or quote an unknown
    // one; a plain substring search could match a name inside some other option's value.
    const culprit = Object.keys(config).find((k) =>
      error.message.startsWith(`${k} `) ||
      error.message.includes(`unknown worker option ${JSON.stringify(k)}`)
    );
    assert.ok(culprit !== undefined, where);
    const value = config[culprit];
    if (!(culprit in INT_OPTIONS) && culprit !== "functionName" && culprit !== "workerId") {
      assert.match(error.message, /unknown worker option/, where); // the key is the value here
    } else if (typeof value === "number" && culprit in INT_OPTIONS) {
      assert.ok(error.message.includes(String(value)), where);
    } else if (typeof value === "string") {
      assert.ok(error.message.includes(JSON.stringify(value).slice(1, 20)), where);
    }
  }
  assert.ok(accepted > 100, `a useful mix: ${accepted} accepted`);
});

db.test("1,000 foreign messages of any shape never authorise work", async ({ sql }) => {
  const gen = new Gen(SEED + 5);
  const flow = routeFlow(
    new Flow<{ n: number }>({ slug: "fz_victim" }).step({ slug: "a" }, () => 1).step(
      { slug: "b", dependsOn: ["a"] },
      () => 2,
    ),
    { queues: { a: "fz_victim_q", b: "fz_victim_q" } },
  );
  await compileFlow(sql, flow);
  const runs = await sql`select (pgflow.start_flow('fz_victim', jsonb_build_object('n', g))).run_id
                         from generate_series(1, 5) g`;
  const real = await queueMessages(sql, "fz_victim_q");
  const bodies: unknown[] = Array.from({ length: 1000 }, (_, i) => {
    if (i === 0) return { pad: "y".repeat(2_000_000) };
    if (i % 5 === 0) return real[i % real.length].message; // a replayed real body
    if (i % 7 === 0) {
      return {
        flow_slug: "fz_victim",
        run_id: runs[i % runs.length].run_id,
        step_slug: gen.pick(["a", "b"]),
        task_index: 0,
        msg_id: real[i % real.length].msg_id,
      };
    }
    return gen.json();
  });
  const [{ ids }] = await sql`
    select array_agg(id order by i)::text[] as ids from (
      select i, pgmq.send('fz_victim_q', b) as id
      from jsonb_array_elements(${sql.json(bodies as never)}) with ordinality u(b, i)) s`;
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}::uuid, 'fz_victim_q', 'fz')`;
  await sql`select pgmq.create('fz_other_q')`;
  const before = await snapshot(sql);
  const rows = await startTasks(sql, "fz_victim_q", ids, worker, [["fz_victim", "a"], [
    "fz_victim",
    "b",
  ]]);
  assert.equal(rows.length, 1000);
  assert.deepEqual([...new Set(rows.map((r) => r.disposition))], ["unknown"]);
  // The real tasks' ids on another queue are nobody's: identity is (queue, id).
  const elsewhere = await startTasks(sql, "fz_other_q", real.map((m) => m.msg_id), worker, [[
    "fz_victim",
    "a",
  ]]);
  assert.deepEqual([...new Set(elsewhere.map((r) => r.disposition))], ["unknown"]);
  // Nothing changed: no task claimed, no message archived, hidden or rewritten.
  assert.deepEqual(await snapshot(sql), before);
  const [{ n }] =
    await sql`select count(*)::int as n from pgflow.step_tasks where status <> 'queued'`;
  assert.equal(n, 0);

  // Malformed claims are refused as a whole and change nothing either.
  for (const bad of ['"a"', "{}", "[[1, 2]]", '[["fz_victim"]]', "null"]) {
    const error = await sql`select * from pgflow.start_tasks('fz_victim_q', ${ids}::bigint[],
        ${worker}::uuid, ${bad}::jsonb)`.then(() => undefined, (e: Error) => e);
    assert.match(String(error), /supported must be a JSON array of \[flow_slug, step_slug\] pairs/);
  }
  assert.deepEqual(await snapshot(sql), before);
  assert.equal((await queueMessages(sql, "fz_victim_q")).length, real.length + 1000);
});
