/**
 * What a deploy of some definitions would do, found by doing it: every definition goes to
 * `pgflow.ensure_flow_compiled` (the worker's compile, so the verdicts are the database's own)
 * inside one transaction that is always rolled back. A definition that fails is rolled back to
 * its savepoint and reported; the others go on. One transaction on one connection: it works the
 * same through a transaction pooler.
 *
 * @module
 */
import { type CompilableFlow, extractAlias, extractRoutePlan } from "../../compile/shape.ts";
import { pgMessage } from "../../platform/pg_message.ts";
import type { Sql } from "../../platform/types.ts";
import type postgres from "npm:postgres@3.4.7";
import {
  type CompileResult,
  ensureFlowCompiled,
  type OptionDifference,
} from "../../compile/ensure.ts";
import type { LoadedFlow } from "./load.ts";

/** What a deploy would do with one definition. */
export type Verdict = "create" | "verified" | "refused" | "recompile";

/** One queue a definition routes to, and what a deploy would do with it. */
export interface QueuePlan {
  /** The queue name. */
  readonly queue: string;
  /** `shared` (routeFlow) or `own` (a flow's default queue, a private step queue). */
  readonly kind: "shared" | "own";
  /** `create` it, `reuse` it, or `collision`: the name is taken and the compile refuses it. */
  readonly action: "create" | "reuse" | "collision";
}

/** The alias a definition carries, and what a deploy would do with it. */
export interface AliasPlan {
  /** The alias. */
  readonly alias: string;
  /**
   * `create`: the first version with this alias, the alias would point at it; `exists`: the alias
   * is there and stays where it points (a deploy never moves it: `pgflow.activate_alias` does).
   */
  readonly action: "create" | "exists";
  /** Where the alias would point after the deploy. */
  readonly target: string;
}

/** One definition's line of the plan. */
export interface FlowPlan {
  /** The concrete slug. */
  readonly slug: string;
  /** The export it came from. */
  readonly exportName: string;
  /** Its queue mode. */
  readonly mode: "flow" | "step" | "routed";
  /** What a deploy would do. */
  readonly verdict: Verdict;
  /** Under `refused` (a changed definition) and `recompile`: each difference, one line each. */
  readonly differences: readonly string[];
  /** Under `refused` when the database raised an error: its SQLSTATE and text (with any hint). */
  readonly error: { readonly code: string; readonly message: string } | null;
  /** Under `verified`: options that differ from the stored ones (the stored ones stay). */
  readonly optionDifferences: readonly OptionDifference[];
  /** Its queues (none listed for a changed definition: nothing about them would change). */
  readonly queues: readonly QueuePlan[];
  /** Its alias, if it carries one (none listed for a refused flow whose alias does not exist). */
  readonly alias: AliasPlan | null;
  /** Under `recompile` (local development): runs and tasks that would be deleted. */
  readonly deletedRuns?: number;
  /** Under `recompile`: tasks that would be deleted. */
  readonly deletedTasks?: number;
}

/** The whole plan. */
export interface DeployPlan {
  /** One entry per definition, in the order of the module's export names. */
  readonly flows: readonly FlowPlan[];
  /** Shared queues a deploy would create (and declare). */
  readonly sharedQueuesToCreate: readonly string[];
  /** Flow and private queues a deploy would create. */
  readonly queuesToCreate: readonly string[];
  /** Queue names that are taken, with the flow that wants them and the database's refusal. */
  readonly collisions: readonly { queue: string; flow: string; message: string }[];
  /** Each alias the definitions carry: its action and target, and the versions of it deployed. */
  readonly aliases: readonly (AliasPlan & { readonly flows: readonly string[] })[];
  /** How many definitions get each verdict. */
  readonly counts: Readonly<Record<Verdict, number>>;
}

/** Thrown inside the transaction to roll it back; never escapes {@link simulateDeploy}. */
class Rollback extends Error {}

/** SQLSTATEs that say the database could not answer now, not that it refuses the definition. */
const NOT_A_VERDICT = new Set(["57014", "55P03", "40P01", "40001", "53300", "57P01"]);

/**
 * Compiles each definition in one transaction that is rolled back, and says what happened to each
 * definition and queue. Nothing is changed; a database failure that is no verdict (a timeout, a
 * lost connection) is thrown.
 *
 * @example
 * ```ts
 * import { simulateDeploy } from "./simulate.ts";
 *
 * // const plan = await simulateDeploy(sql, await loadFlows("./flows.ts"));
 * ```
 */
export async function simulateDeploy(sql: Sql, flows: readonly LoadedFlow[]): Promise<DeployPlan> {
  const plans: FlowPlan[] = [];
  try {
    await sql.begin(async (tx) => {
      for (const flow of flows) plans.push(await simulateOne(tx, flow));
      throw new Rollback();
    });
  } catch (error) {
    if (!(error instanceof Rollback)) throw error;
  }
  return summarise(plans);
}

async function simulateOne(tx: postgres.TransactionSql, flow: LoadedFlow): Promise<FlowPlan> {
  const definition: CompilableFlow = flow.definition;
  const routes = extractRoutePlan(definition);
  const names = [...new Set(Object.values(routes.queues))];
  const kind = routes.mode === "routed" ? "shared" : "own";
  const base = {
    slug: flow.slug,
    exportName: flow.exportName,
    mode: routes.mode,
    differences: [] as string[],
    error: null,
    optionDifferences: [] as OptionDifference[],
    queues: [] as QueuePlan[],
  };
  const alias = extractAlias(definition);
  const aliasBefore = alias === null ? null : await aliasTarget(tx, alias);
  const aliasPlan = (after: string | null): AliasPlan | null =>
    alias === null
      ? null
      : aliasBefore !== null
      ? { alias, action: "exists", target: aliasBefore }
      : after !== null
      ? { alias, action: "create", target: after }
      : null;
  const before = await listedQueues(tx);
  let result: CompileResult;
  try {
    result = await tx.savepoint(async (sp) => {
      return await ensureFlowCompiled(sp as unknown as Sql, definition);
    });
  } catch (error) {
    const e = error as { name?: string; code?: string };
    if (e?.name !== "PostgresError" || typeof e.code !== "string" || NOT_A_VERDICT.has(e.code)) {
      throw error;
    }
    const message = pgMessage(error);
    const named = e.code === "55000"
      ? names.filter((q) => before.has(q) && mentions(message, q))
      : [];
    return {
      ...base,
      verdict: "refused",
      error: { code: e.code, message },
      alias: aliasPlan(null),
      queues: named.map((queue) => ({ queue, kind, action: "collision" })),
    };
  }
  if (result.status === "mismatch") {
    return {
      ...base,
      verdict: "refused",
      differences: result.differences,
      alias: aliasPlan(null),
    };
  }
  const after = await listedQueues(tx);
  const aliased = aliasPlan(alias === null ? null : await aliasTarget(tx, alias));
  const queues: QueuePlan[] = names.map((queue) => ({
    queue,
    kind,
    action: after.has(queue) && !before.has(queue) ? "create" : "reuse",
  }));
  if (result.status === "verified") {
    return {
      ...base,
      verdict: "verified",
      optionDifferences: result.optionDifferences ?? [],
      queues,
      alias: aliased,
    };
  }
  if (result.status === "recompiled") {
    return {
      ...base,
      verdict: "recompile",
      differences: result.differences,
      queues,
      alias: aliased,
      deletedRuns: result.deletedRuns ?? 0,
      deletedTasks: result.deletedTasks ?? 0,
    };
  }
  return { ...base, verdict: "create", queues, alias: aliased };
}

/** The queue names PGMQ lists now (in this transaction), lowercased as pgflow compares them. */
async function listedQueues(tx: postgres.TransactionSql): Promise<Set<string>> {
  const rows = await tx<
    { name: string }[]
  >`select queue_name::text as name from pgmq.list_queues()`;
  return new Set(rows.map((r) => r.name.toLowerCase()));
}

/** Where `alias` points now (in this transaction), or `null` when there is no such alias. */
async function aliasTarget(tx: postgres.TransactionSql, alias: string): Promise<string | null> {
  const [row] = await tx<{ target: string }[]>`
    select flow_slug as target from pgflow.aliases where alias = ${alias}`;
  return row?.target ?? null;
}

/** Whether `message` names `queue` as a whole word (not inside a longer slug). */
function mentions(message: string, queue: string): boolean {
  const lower = message.toLowerCase();
  let at = lower.indexOf(queue);
  while (at >= 0) {
    const before = lower[at - 1] ?? " ";
    const after = lower[at + queue.length] ?? " ";
    if (!/[a-z0-9_]/.test(before) && !/[a-z0-9_]/.test(after)) return true;
    at = lower.indexOf(queue, at + 1);
  }
  return false;
}

function summarise(flows: readonly FlowPlan[]): DeployPlan {
  const counts: Record<Verdict, number> = { create: 0, verified: 0, refused: 0, recompile: 0 };
  for (const f of flows) counts[f.verdict]++;
  const created = (kind: "shared" | "own") => [
    ...new Set(
      flows.flatMap((f) =>
        f.queues.filter((q) => q.kind === kind && q.action === "create").map((q) => q.queue)
      ),
    ),
  ];
  return {
    flows,
    sharedQueuesToCreate: created("shared"),
    queuesToCreate: created("own"),
    collisions: flows.flatMap((f) =>
      f.queues.filter((q) => q.action === "collision").map((q) => ({
        queue: q.queue,
        flow: f.slug,
        message: f.error?.message ?? "",
      }))
    ),
    aliases: aliasesOf(flows),
    counts,
  };
}

/** One entry per alias: where it would point (its first deployment creates it), and its versions. */
function aliasesOf(flows: readonly FlowPlan[]): DeployPlan["aliases"] {
  const byAlias = new Map<string, AliasPlan & { flows: string[] }>();
  for (const f of flows) {
    if (f.alias === null) continue;
    const seen = byAlias.get(f.alias.alias);
    if (seen === undefined) byAlias.set(f.alias.alias, { ...f.alias, flows: [f.slug] });
    else seen.flows.push(f.slug);
  }
  return [...byAlias.values()];
}
