/**
 * Shape round trip, as a property: seeded random flows (plain, step-queued and routed; single,
 * array and map steps; many dependencies written in any order; `if` / `ifNot` patterns with keys
 * in any order; every `whenUnmet` / `whenExhausted` mode; odd but valid ASCII slugs up to 128
 * characters) are compiled, then compiled again and `verified`; the shape and route plan SQL
 * stores (`pgflow._flow_shape`, `pgflow._flow_route_plan`) are exactly the ones TypeScript sends
 * (`extractFlowShape`, `extractRoutePlan`); the same flow written differently (dependency and key
 * order, explicit defaults, `.array` for `.step`, other runtime options) is still `verified`; and
 * every kind of change is a `mismatch` naming what changed, with nothing changed.
 *
 * Everything runs twice: in a database with the C collation (the test default) and in one whose
 * default collation is ICU `en-US` (hosted databases are usually linguistic, e.g. en_US.UTF-8), where
 * only an explicit `collate "C"` keeps SQL's dependency order equal to TypeScript's code-unit sort;
 * the stress slugs are checked to sort differently there.
 *
 * The seed is printed; replay one with `RELIABILITY_SEED=<seed> deno task test <this file>`.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import {
  type CompilableFlow,
  extractFlowShape,
  extractRoutePlan,
} from "../../src/compile/shape.ts";
import { Flow } from "../../src/dsl/flow.ts";
import type { WhenMode } from "../../src/dsl/options.ts";
import { routeFlow } from "../../src/routing/route_flow.ts";
import { withStepQueues } from "../../src/routing/with_step_queues.ts";
import { installPgmq } from "../../src/cli/db/pgmq.ts";
import { applyMigrations } from "../../local/db_push.ts";
import { serverUrl, testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";
import { withDatabase } from "../support/templates.ts";
import { rng, seedFromEnv } from "../reliability/harness.ts";

const db = testDatabase(import.meta.url);

const SEED = seedFromEnv();
console.log(`[shape round trip] seed ${SEED} (replay: RELIABILITY_SEED=${SEED})`);

/** Flows generated per database. */
const FLOWS = 30;
const MODES: readonly WhenMode[] = ["fail", "skip", "skip-cascade"];
const SHARED_QUEUES = ["shape_q_a", "shape_q_b", "shape_q_c"] as const;

/**
 * Slugs whose code-unit order (digits < upper case < `_` < lower case) differs from any
 * linguistic one: case, digits and underscores interleaved. Unique ignoring case, as step slugs
 * must be; `Run` is valid (only `run` is reserved).
 */
const STRESS_SLUGS = [
  "Zeta",
  "alpha",
  "Alpha_2",
  "a1",
  "a_1",
  "a_b",
  "aB9",
  "B",
  "b_0",
  "b0c",
  "Run",
  "x_Y_z",
  "X9",
  "m_10",
  "m_9",
  "m10",
  "M_2",
];

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Kind = "step" | "array" | "map";

interface StepSpec {
  slug: string;
  kind: Kind;
  /** For a map, at most one (its `array`). */
  deps: string[];
  if?: Json;
  ifNot?: Json;
  whenUnmet?: WhenMode;
  whenExhausted?: WhenMode;
  options: Record<string, number>;
}

interface FlowSpec {
  slug: string;
  mode: "flow" | "step" | "routed";
  steps: StepSpec[];
  /** Routed mode: step slug → shared queue. */
  queues: Record<string, string>;
  options: Record<string, number>;
}

type Rand = () => number;
const int = (r: Rand, min: number, max: number) => min + Math.floor(r() * (max - min + 1));
const pick = <T>(r: Rand, items: readonly T[]): T => items[Math.floor(r() * items.length)];
const chance = (r: Rand, p: number) => r() < p;
function shuffle<T>(r: Rand, items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

const LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const ALNUM = LETTERS + "0123456789";

/** A valid slug: letters and digits in groups joined by single underscores, a letter first. */
function slugOf(r: Rand, maxLength: number, first = pick(r, [...LETTERS])): string {
  const target = chance(r, 0.1) ? maxLength : int(r, 1, Math.min(maxLength, 14));
  let slug = first;
  while (slug.length < target) {
    const c = slug.length < target - 1 && !slug.endsWith("_") && chance(r, 0.2)
      ? "_"
      : pick(r, [...ALNUM]);
    slug += c;
  }
  return slug.replace(/_+$/, "") || first;
}

function stepSlug(r: Rand, taken: Set<string>): string {
  for (;;) {
    const slug = chance(r, 0.3) ? pick(r, STRESS_SLUGS) : slugOf(r, 128);
    if (slug !== "run" && !taken.has(slug.toLowerCase())) {
      taken.add(slug.toLowerCase());
      return slug;
    }
  }
}

/** Keys a careless copy (`copy[key] = value`) would lose or misread. */
const ODD_KEYS = ["__proto__", "constructor", "toString", "hasOwnProperty"];
const KEY_CHARS = " aZ_09\"\\/.-{}[]:,'\t";
const STRINGS = ["", " ", "x", "Zz", 'q"uote', "back\\slash", "tab\there", "{}", "[1]", "null"];
const NUMBERS = [0, -0, 1, -1, 2.5, -3.75, 1e21, 1.5e-7, 2 ** 53 - 1, 0.1];

/** A random JSON pattern (ASCII only), up to `depth` levels of objects and arrays. */
function jsonOf(r: Rand, depth: number): Json {
  const roll = r();
  if (depth > 0 && roll < 0.4) {
    const o: { [key: string]: Json } = {};
    for (let i = int(r, 0, 3); i > 0; i--) {
      let key = chance(r, 0.05) ? pick(r, ODD_KEYS) : "";
      for (let k = key ? 0 : int(r, 0, 4); k > 0; k--) key += pick(r, [...KEY_CHARS]);
      o[key] = jsonOf(r, depth - 1);
    }
    return o;
  }
  if (depth > 0 && roll < 0.55) {
    return Array.from({ length: int(r, 0, 3) }, () => jsonOf(r, depth - 1));
  }
  if (roll < 0.7) return pick(r, STRINGS);
  if (roll < 0.85) return pick(r, NUMBERS);
  return pick(r, [true, false, null]);
}

function runtimeOptions(r: Rand, step: boolean): Record<string, number> {
  const o: Record<string, number> = {};
  if (chance(r, 0.3)) o.maxAttempts = int(r, 1, 9);
  if (chance(r, 0.3)) o.baseDelay = int(r, 1, 60);
  if (chance(r, 0.3)) o.timeout = int(r, 3, 600);
  if (step && chance(r, 0.2)) o.startDelay = int(r, 0, 30);
  return o;
}

function stepOf(r: Rand, earlier: readonly StepSpec[], slug: string): StepSpec {
  const kind: Kind = pick(r, ["step", "step", "array", "map"]);
  let deps: string[];
  if (kind === "map") {
    deps = earlier.length > 0 && chance(r, 0.7) ? [pick(r, earlier).slug] : [];
  } else if (earlier.length > 0 && chance(r, 0.25)) {
    deps = shuffle(r, earlier.map((s) => s.slug)); // many dependencies: all of them
  } else {
    deps = shuffle(r, earlier.map((s) => s.slug)).slice(0, int(r, 0, Math.min(4, earlier.length)));
  }
  const step: StepSpec = { slug, kind, deps, options: runtimeOptions(r, true) };
  if (chance(r, 0.35)) step.if = jsonOf(r, 3);
  if (chance(r, 0.25)) step.ifNot = jsonOf(r, 3);
  if ((step.if !== undefined || step.ifNot !== undefined) && chance(r, 0.7)) {
    step.whenUnmet = pick(r, MODES);
  }
  if (chance(r, 0.5)) step.whenExhausted = pick(r, MODES);
  return step;
}

function flowOf(r: Rand, n: number): FlowSpec {
  const mode = pick(r, ["flow", "step", "routed"] as const);
  // The flow queue is lower(slug), and private step queues need room for "__<index>".
  const max = mode === "routed" ? 128 : mode === "step" ? 40 : 47;
  const slug = `F${n}_${slugOf(r, max - `F${n}_`.length)}`;
  const taken = new Set<string>();
  const steps: StepSpec[] = [];
  for (let i = int(r, 1, 10); i > 0; i--) steps.push(stepOf(r, steps, stepSlug(r, taken)));
  const queues: Record<string, string> = {};
  for (const s of steps) queues[s.slug] = pick(r, SHARED_QUEUES);
  return { slug, mode, steps, queues, options: runtimeOptions(r, false) };
}

/**
 * A flow with every feature and every stress slug: roots, an array, maps (root and dependent),
 * conditions with every mode, and a step depending on every stress slug.
 */
function stressFlow(slug: string): FlowSpec {
  const steps: StepSpec[] = STRESS_SLUGS.map((s, i) => ({
    slug: s,
    kind: i % 5 === 1 ? "array" : "step",
    deps: [],
    options: {},
  }));
  steps.push(
    { slug: "mapRoot", kind: "map", deps: [], options: {}, if: [1, { a: "b" }] },
    {
      slug: "mapDep",
      kind: "map",
      deps: ["Alpha_2"],
      ifNot: { z: 1, a: [true, null] },
      whenUnmet: "skip-cascade",
      whenExhausted: "skip",
      options: {},
    },
    {
      slug: "Omega_all",
      kind: "step",
      deps: [...STRESS_SLUGS].reverse(),
      if: { Zeta: { k: 1 }, a1: "x" },
      ifNot: { B: null },
      whenUnmet: "fail",
      whenExhausted: "skip-cascade",
      options: { timeout: 30 },
    },
  );
  const queues: Record<string, string> = {};
  steps.forEach((s, i) => (queues[s.slug] = SHARED_QUEUES[i % SHARED_QUEUES.length]));
  return { slug, mode: "routed", steps, queues, options: {} };
}

/** Object keys in a random order, recursively (the same JSON value, written differently). */
function reorderKeys(r: Rand, value: Json): Json {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v) => reorderKeys(r, v));
  return Object.fromEntries(
    shuffle(r, Object.keys(value)).map((k) => [k, reorderKeys(r, value[k])]),
  );
}

interface LooseFlow {
  step(options: Record<string, unknown>, handler: () => unknown): LooseFlow;
  array(options: Record<string, unknown>, handler: () => unknown): LooseFlow;
  map(options: Record<string, unknown>, handler: () => unknown): LooseFlow;
}

/**
 * The flow of a spec through the public builder. With `rewrite`, the same definition written
 * differently: dependencies and pattern keys in another order, defaults spelled out, `.array`
 * and `.step` swapped, other runtime options and handlers. None of that is part of the shape.
 */
function build(spec: FlowSpec, rewrite?: Rand): CompilableFlow {
  const r = rewrite;
  const NewFlow = Flow as unknown as new (options: Record<string, unknown>) => LooseFlow;
  let flow = new NewFlow({ slug: spec.slug, ...(r ? runtimeOptions(r, false) : spec.options) });
  for (const s of spec.steps) {
    const o: Record<string, unknown> = {
      slug: s.slug,
      ...(r ? runtimeOptions(r, true) : s.options),
    };
    if (s.kind === "map") {
      if (s.deps.length > 0) o.array = s.deps[0];
    } else if (s.deps.length > 0 || (r && chance(r, 0.3))) {
      o.dependsOn = r ? shuffle(r, s.deps) : s.deps;
    }
    if (s.if !== undefined) o.if = r ? reorderKeys(r, s.if) : s.if;
    if (s.ifNot !== undefined) o.ifNot = r ? reorderKeys(r, s.ifNot) : s.ifNot;
    const conditional = s.if !== undefined || s.ifNot !== undefined;
    const unmet = s.whenUnmet ?? (r && conditional && chance(r, 0.5) ? "skip" : undefined);
    if (unmet !== undefined) o.whenUnmet = unmet;
    const exhausted = s.whenExhausted ?? (r && chance(r, 0.5) ? "fail" : undefined);
    if (exhausted !== undefined) o.whenExhausted = exhausted;
    const method = s.kind === "map"
      ? "map"
      : r && chance(r, 0.5)
      ? (s.kind === "step" ? "array" : "step")
      : s.kind;
    const output = r ? () => "rewritten" : () => null;
    flow = flow[method](o, output);
  }
  const built = flow as unknown as CompilableFlow;
  if (spec.mode === "step") {
    return (withStepQueues as unknown as (f: CompilableFlow) => CompilableFlow)(built);
  }
  if (spec.mode === "routed") {
    return (routeFlow as unknown as (f: CompilableFlow, o: unknown) => CompilableFlow)(built, {
      queues: spec.queues,
    });
  }
  return built;
}

/** Stable JSON text (keys sorted), to tell whether two patterns are the same JSON value. */
function jsonText(value: Json | undefined): string {
  if (value === undefined) return "undefined";
  return JSON.stringify(
    value,
    (_k, v) =>
      v !== null && typeof v === "object" && !Array.isArray(v)
        ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, v[k]]))
        : v,
  );
}

const clone = (spec: FlowSpec): FlowSpec => structuredClone(spec);

/** The kinds of change, each with the difference line it must produce. */
type Change = {
  kind: string;
  apply: (r: Rand, spec: FlowSpec) => RegExp | undefined;
};

const otherMode = (r: Rand, mode: WhenMode | undefined, fallback: WhenMode) =>
  pick(r, MODES.filter((m) => m !== (mode ?? fallback)));

const CHANGES: readonly Change[] = [
  {
    kind: "slug renamed",
    apply(r, spec) {
      const i = int(r, 0, spec.steps.length - 1);
      const old = spec.steps[i].slug;
      const taken = new Set(spec.steps.map((s) => s.slug.toLowerCase()));
      const slug = stepSlug(r, taken);
      spec.steps[i].slug = slug;
      for (const s of spec.steps) s.deps = s.deps.map((d) => (d === old ? slug : d));
      spec.queues[slug] = spec.queues[old];
      delete spec.queues[old];
      return new RegExp(`^step ${i}: slug `);
    },
  },
  {
    kind: "step added",
    apply(r, spec) {
      const taken = new Set(spec.steps.map((s) => s.slug.toLowerCase()));
      const step = stepOf(r, spec.steps, stepSlug(r, taken));
      spec.steps.push(step);
      spec.queues[step.slug] = pick(r, SHARED_QUEUES);
      return /^step count: /;
    },
  },
  {
    kind: "step removed",
    apply(_r, spec) {
      if (spec.steps.length < 2) return undefined;
      const gone = spec.steps.pop()!;
      delete spec.queues[gone.slug];
      return /^step count: /;
    },
  },
  {
    kind: "order swapped",
    apply(r, spec) {
      const candidates = spec.steps.map((_, i) => i).filter((i) =>
        i + 1 < spec.steps.length && !spec.steps[i + 1].deps.includes(spec.steps[i].slug)
      );
      if (candidates.length === 0) return undefined;
      const i = pick(r, candidates);
      [spec.steps[i], spec.steps[i + 1]] = [spec.steps[i + 1], spec.steps[i]];
      return new RegExp(`^step ${i}: slug `);
    },
  },
  {
    kind: "step type",
    apply(r, spec) {
      const candidates = spec.steps.map((_, i) => i).filter((i) => spec.steps[i].deps.length <= 1);
      if (candidates.length === 0) return undefined;
      const i = pick(r, candidates);
      const s = spec.steps[i];
      s.kind = s.kind === "map" ? pick(r, ["step", "array"] as const) : "map";
      return new RegExp(`^step ${i}: stepType `);
    },
  },
  {
    kind: "dependency added or removed",
    apply(r, spec) {
      const candidates = spec.steps.map((_, i) => i).filter((i) =>
        i > 0 && spec.steps[i].kind !== "map"
      );
      if (candidates.length === 0) return undefined;
      const i = pick(r, candidates);
      const s = spec.steps[i];
      const free = spec.steps.slice(0, i).map((e) => e.slug).filter((d) => !s.deps.includes(d));
      if (free.length > 0 && (s.deps.length === 0 || chance(r, 0.5))) {
        s.deps.splice(int(r, 0, s.deps.length), 0, pick(r, free));
      } else {
        s.deps.splice(int(r, 0, s.deps.length - 1), 1);
      }
      return new RegExp(`^step ${i}: dependencies `);
    },
  },
  {
    kind: "whenUnmet",
    apply(r, spec) {
      const candidates = spec.steps.map((_, i) => i).filter((i) =>
        spec.steps[i].if !== undefined || spec.steps[i].ifNot !== undefined
      );
      if (candidates.length === 0) return undefined;
      const i = pick(r, candidates);
      spec.steps[i].whenUnmet = otherMode(r, spec.steps[i].whenUnmet, "skip");
      return new RegExp(`^step ${i}: whenUnmet `);
    },
  },
  {
    kind: "whenExhausted",
    apply(r, spec) {
      const i = int(r, 0, spec.steps.length - 1);
      spec.steps[i].whenExhausted = otherMode(r, spec.steps[i].whenExhausted, "fail");
      return new RegExp(`^step ${i}: whenExhausted `);
    },
  },
  ...(["if", "ifNot"] as const).map((key): Change => ({
    kind: `${key} pattern`,
    apply(r, spec) {
      const i = int(r, 0, spec.steps.length - 1);
      const s = spec.steps[i];
      const before = jsonText(s[key]);
      if (s[key] !== undefined && chance(r, 0.3)) {
        delete s[key];
        if (s.if === undefined && s.ifNot === undefined) delete s.whenUnmet;
      } else {
        while (jsonText(s[key]) === before) s[key] = jsonOf(r, 3);
      }
      return new RegExp(
        `^step ${i}: ${key === "if" ? "requiredInputPattern" : "forbiddenInputPattern"} `,
      );
    },
  })),
  {
    kind: "route",
    apply(r, spec) {
      if (spec.mode !== "routed") {
        spec.mode = "routed";
        return /^queue mode: /;
      }
      const s = pick(r, spec.steps);
      spec.queues[s.slug] = pick(r, SHARED_QUEUES.filter((q) => q !== spec.queues[s.slug]));
      return new RegExp(`^route of step ${s.slug}: `);
    },
  },
];

/** assert.deepEqual, with where it happened (seed, database, flow) before the diff. */
function same(actual: unknown, expected: unknown, where: string): void {
  try {
    assert.deepEqual(actual, expected);
  } catch (error) {
    (error as Error).message = `${where}\n${(error as Error).message}`;
    throw error;
  }
}

interface Stored {
  shape: unknown;
  routes: unknown;
}

async function stored(sql: postgres.Sql, slug: string): Promise<Stored> {
  const [row] = await sql<Stored[]>`
    select pgflow._flow_shape(${slug}) as shape, pgflow._flow_route_plan(${slug}) as routes`;
  return row;
}

/** What TypeScript sends, as JSON carries it (so -0 is 0, as SQL receives it). */
function sent(target: CompilableFlow): Stored {
  return JSON.parse(JSON.stringify({
    shape: extractFlowShape(target),
    routes: extractRoutePlan(target),
  }));
}

/**
 * SQL stores exactly what TypeScript sent. Compared as jsonb in the database: JSON.parse in Deno
 * 2.9 (V8 15.0) can read an escaped one-character key back as another one (after parsing
 * `{"x":1,"\\":2}`, `{"x":1,"\t":2}` comes back with the key "\"; Node's V8 does not), so an
 * object-to-object comparison here could fail on what the runtime read rather than what was
 * stored. The objects are compared only to show the difference when the database says they
 * differ.
 */
async function storesWhatWasSent(
  sql: postgres.Sql,
  slug: string,
  target: CompilableFlow,
  where: string,
): Promise<void> {
  const [{ equal }] = await sql<{ equal: boolean }[]>`
    select pgflow._flow_shape(${slug}) = ${JSON.stringify(extractFlowShape(target))}::text::jsonb
       and pgflow._flow_route_plan(${slug}) = ${
    JSON.stringify(extractRoutePlan(target))
  }::text::jsonb
       as equal`;
  if (!equal) same(await stored(sql, slug), sent(target), where);
  assert.ok(equal, where);
}

/** Runs the property on one database; returns how often each kind of change was checked. */
async function roundTrip(sql: postgres.Sql, label: string): Promise<Map<string, number>> {
  const r = rng(SEED);
  const checked = new Map<string, number>(CHANGES.map((c) => [c.kind, 0]));
  const specs = [stressFlow(`Stress_${label}`)];
  for (let n = 1; n < FLOWS; n++) specs.push(flowOf(r, n));
  for (const spec of specs) {
    const where = `seed ${SEED}, ${label} database, flow ${spec.slug}`;
    const target = build(spec);
    const first = await compileFlow(sql, target);
    same(first, { status: "compiled", differences: [], optionDifferences: [] }, where);
    await storesWhatWasSent(sql, spec.slug, target, `${where}: SQL stores what TS sent`);
    same(await compileFlow(sql, target), {
      status: "verified",
      differences: [],
      optionDifferences: [],
    }, where);
    for (let k = 0; k < 2; k++) {
      const rewritten = build(spec, r);
      // Options may be rewritten too: they are reported (optionDifferences), never part of the shape.
      const { status, differences } = await compileFlow(sql, rewritten);
      same(
        { status, differences },
        { status: "verified", differences: [] },
        `${where}: written differently, the same shape: ${JSON.stringify(sent(rewritten))}`,
      );
    }
    for (const change of CHANGES) {
      const changed = clone(spec);
      const expected = change.apply(r, changed);
      if (expected === undefined) continue;
      const result = await compileFlow(sql, build(changed));
      assert.equal(
        result.status,
        "mismatch",
        `${where}: ${change.kind} is a mismatch: ${JSON.stringify(sent(build(changed)))}`,
      );
      assert.ok(
        result.differences.some((d) => expected.test(d)),
        `${where}: ${change.kind} reported as ${expected}, got ${
          JSON.stringify(result.differences)
        }`,
      );
      checked.set(change.kind, checked.get(change.kind)! + 1);
    }
    // Nothing a mismatch saw was stored.
    await storesWhatWasSent(sql, spec.slug, target, `${where}: unchanged by the mismatches`);
  }
  return checked;
}

function assertEveryKindChecked(checked: Map<string, number>): void {
  for (const [kind, n] of checked) {
    assert.ok(n > 0, `seed ${SEED}: no "${kind}" change was checked`);
  }
}

/** Code-unit order, as extractFlowShape sorts dependencies. */
const codeUnitSorted = (slugs: readonly string[]) =>
  [...slugs].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

async function sqlOrder(sql: postgres.Sql, collate: "C" | "default"): Promise<string[]> {
  const [{ sorted }] = collate === "C"
    ? await sql`select array_agg(s order by s collate "C") as sorted from unnest(${STRESS_SLUGS}::text[]) s`
    : await sql`select array_agg(s order by s) as sorted from unnest(${STRESS_SLUGS}::text[]) s`;
  return sorted;
}

db.test("round trip in a C-collation database: verified twice, TS and SQL agree, every change a mismatch", async ({ sql }) => {
  assert.deepEqual(await sqlOrder(sql, "C"), codeUnitSorted(STRESS_SLUGS));
  assertEveryKindChecked(await roundTrip(sql, "C"));
});

db.test("round trip in an ICU en-US database: dependency order is still code-unit order", async () => {
  const admin = postgres(serverUrl(), { max: 1, onnotice: () => {} });
  const name = `t_shape_icu_${crypto.randomUUID().slice(0, 8)}`;
  let sql: postgres.Sql | undefined;
  try {
    const icu = await admin`select 1 from pg_collation where collprovider = 'i' limit 1`;
    if (icu.length === 0) {
      console.warn("[shape round trip] this server has no ICU collations: ICU database skipped");
      return;
    }
    await admin.unsafe(`create database ${name} template template0 encoding 'UTF8'
      locale 'C.UTF-8' locale_provider icu icu_locale 'en-US'`);
    sql = postgres(withDatabase(serverUrl(), name), { max: 4, onnotice: () => {} });
    await installPgmq(sql);
    await applyMigrations(sql);
    // The database sorts linguistically, and these slugs tell the two orders apart.
    const linguistic = await sqlOrder(sql, "default");
    assert.notDeepEqual(linguistic, codeUnitSorted(STRESS_SLUGS), "the stress slugs stress it");
    assert.deepEqual(await sqlOrder(sql, "C"), codeUnitSorted(STRESS_SLUGS));
    assertEveryKindChecked(await roundTrip(sql, "ICU"));
  } finally {
    await sql?.end();
    await admin.unsafe(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
});
