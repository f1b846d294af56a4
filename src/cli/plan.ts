/**
 * `pgflow plan <module> [--flow NAME]... [--database-url URL] [--json]`: what deploying the flows a
 * module exports would do to a database, without changing it: flows to create, verified or
 * refused (with the differences), queues to create, names that collide, aliases and their
 * targets. For CI.
 *
 * @module
 */
import { describeConnection } from "../platform/connection_kind.ts";
import { redact } from "./connect.ts";
import { type DeployPlan, type FlowPlan, simulateDeploy } from "./deploy/simulate.ts";
import { type Lookalike, lookalikes, lookalikeWarning } from "./deploy/lookalikes.ts";
import { deployCommand, listQueueNames, openEngine } from "./deploy/session.ts";
import { result } from "./output.ts";

/** The help text of `pgflow plan`. */
export const PLAN_HELP = `pgflow plan <module> [--flow NAME]... [--database-url URL] [--json]

Shows what deploying the flows <module> exports would do to a database, and changes nothing:
each flow is compiled as a starting worker would compile it, inside a transaction that is rolled
back (so it works through a transaction pooler too). It lists the flows to create, those already
compiled identically (verified), those refused (with the differences or the database's error),
the shared and own queues to create, queue names that collide, and aliases and their targets.

<module> is a path or URL of a module that exports your flows: every exported Flow,
routeFlow(...) and withStepQueues(...) value, and lists of them. Import it without starting a
worker (keep EdgeWorker.start in the function's index.ts, the flows in a module of their own).

  --flow NAME          only this flow (a slug or an export name); repeat for more
  --database-url URL   the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --json               one JSON object on stdout

A new shared queue whose name is one letter from a queue that exists (thread_procesing beside
thread_processing) is a warning line: a typo in a route map makes a queue nobody reads.

Exit codes: 0 nothing to do or only additions, 1 a flow would be refused (or recompiled in place
on a local development database, deleting its runs), 2 usage error.`;

/**
 * Runs `pgflow plan`; returns the exit code.
 *
 * @example
 * ```ts
 * import { plan } from "./plan.ts";
 *
 * // Deno.exit(await plan(["./flows.ts", "--database-url", "postgres://postgres@127.0.0.1:54330/postgres"]));
 * ```
 */
export async function plan(argv: readonly string[]): Promise<number> {
  const cmd = await deployCommand(argv, "pgflow plan");
  if (cmd.help) {
    result(PLAN_HELP);
    return 0;
  }
  const sql = await openEngine(cmd.url);
  try {
    const connection = await describeConnection(sql, cmd.url);
    const existing = await listQueueNames(sql);
    const found = await simulateDeploy(sql, cmd.flows);
    const similar = lookalikes(found.sharedQueuesToCreate, [
      ...existing,
      ...found.queuesToCreate,
      ...found.sharedQueuesToCreate,
    ]);
    const code = planExitCode(found);
    if (cmd.json) {
      result(JSON.stringify({
        module: cmd.module,
        database: redact(cmd.url),
        connection: connection.kind,
        ...found,
        lookalikes: similar,
        exitCode: code,
      }));
    } else {
      result(
        formatPlan(found, `${cmd.module} on ${redact(cmd.url)} (${connection.kind})`, similar)
          .join("\n"),
      );
    }
    return code;
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/**
 * The exit code a plan means: 1 when a flow would be refused or recompiled in place, else 0.
 *
 * @example
 * ```ts
 * import { planExitCode } from "./plan.ts";
 *
 * // if (planExitCode(found) !== 0) …
 * ```
 */
export function planExitCode(found: DeployPlan): 0 | 1 {
  return found.counts.refused > 0 || found.counts.recompile > 0 ? 1 : 0;
}

/**
 * The plan as lines of text.
 *
 * @example
 * ```ts
 * import { formatPlan } from "./plan.ts";
 *
 * // console.log(formatPlan(found, "./flows.ts on postgres://…").join("\n"));
 * ```
 */
export function formatPlan(
  found: DeployPlan,
  target: string,
  similar: readonly Lookalike[] = [],
): string[] {
  const out: string[] = [`plan for ${target}; nothing was changed`];
  const row = (label: string, value: string) => out.push(`${label.padEnd(24)}  ${value}`);
  const width = Math.max(...found.flows.map((f) => f.slug.length));
  const exportWidth = Math.max(...found.flows.map((f) => f.exportName.length));
  out.push("flows");
  for (const f of found.flows) {
    out.push(
      `  ${VERDICT[f.verdict].padEnd(10)} ${f.slug.padEnd(width)}  ${f.mode.padEnd(6)}  ` +
        `export ${f.exportName.padEnd(exportWidth)}${queuesText(f)}`.trimEnd(),
    );
    for (const line of detail(f)) out.push(`      ${line}`);
  }
  row("shared queues to create", found.sharedQueuesToCreate.join(", ") || "none");
  row("queues to create", found.queuesToCreate.join(", ") || "none");
  row(
    "aliases",
    found.aliases.map((a) =>
      a.action === "create"
        ? `${a.alias} → ${a.target} (create)`
        : `${a.alias} → ${a.target} (exists; a deploy never moves it: pgflow.activate_alias does` +
          `${a.flows.some((f) => f !== a.target) ? `; versions here: ${a.flows.join(", ")}` : ""})`
    ).join("; ") || "none",
  );
  row(
    "collisions",
    found.collisions.map((c) => `${c.queue} (wanted by ${c.flow})`).join(", ") || "none",
  );
  // Only when there is one: a typo is the exception, and the line says what to look at.
  for (const l of similar) row("warning", lookalikeWarning(l));
  const c = found.counts;
  const tally = `${c.create} to create, ${c.verified} verified, ${c.refused} refused` +
    (c.recompile > 0 ? `, ${c.recompile} recompiled in place` : "");
  row(
    "result",
    planExitCode(found) === 0
      ? `${tally}: a deploy would only add or verify (exit 0)`
      : `${tally}: a deploy would ${
        c.refused > 0 ? "be refused" : "delete runs (local development)"
      } (exit 1)`,
  );
  return out;
}

const VERDICT: Record<FlowPlan["verdict"], string> = {
  create: "create",
  verified: "verified",
  refused: "REFUSED",
  recompile: "RECOMPILE",
};

function queuesText(f: FlowPlan): string {
  const alias = f.alias === null ? "" : `  alias: ${f.alias.alias} (${f.alias.action})`;
  if (f.queues.length === 0) return alias;
  return `  queues: ${f.queues.map((q) => `${q.queue} (${q.action})`).join(", ")}${alias}`;
}

function detail(f: FlowPlan): string[] {
  const lines: string[] = [];
  if (f.error) lines.push(`${f.error.message} [${f.error.code}]`);
  if (f.verdict === "refused" && f.differences.length > 0) {
    lines.push(
      "changed under an existing slug; deploy it as a new slug (e.g. a _v2):",
      ...f.differences.map((d) => `  ${d}`),
    );
  }
  if (f.verdict === "recompile") {
    lines.push(
      `local development would replace it, deleting ${f.deletedRuns} run(s) and ` +
        `${f.deletedTasks} task(s):`,
      ...f.differences.map((d) => `  ${d}`),
    );
  }
  for (const d of f.optionDifferences) {
    lines.push(
      `${d.step === null ? "flow" : `step ${d.step}`} ${d.option}: stored ${
        d.stored ?? "inherited"
      }, supplied ${d.supplied ?? "inherited"}; the stored value stays (options of a slug ` +
        "never change in place)",
    );
  }
  return lines;
}
