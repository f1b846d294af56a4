/**
 * `pgflow compile <module> [--flow NAME]... [--database-url URL] [--json]`: compiles the flows a
 * module exports into a database, as a starting worker would, without starting one. All or
 * nothing: if any flow is refused, nothing is changed.
 *
 * @module
 */
import type { LogFields, Logger } from "../platform/logger.ts";
import type { Sql } from "../platform/types.ts";
import { compileDefinitions } from "../worker/compile_at_start.ts";
import { WorkerStartupError } from "../worker/errors.ts";
import { redact } from "./connect.ts";
import { extractRoutePlan } from "../compile/shape.ts";
import { type Lookalike, lookalikes, lookalikeWarning } from "./deploy/lookalikes.ts";
import { deployCommand, listQueueNames, openEngine } from "./deploy/session.ts";
import { CliError, progress, result } from "./output.ts";

/** The help text of `pgflow compile`. */
export const COMPILE_HELP = `pgflow compile <module> [--flow NAME]... [--database-url URL] [--json]

Compiles the flows <module> exports into a database, exactly as a starting worker does, without
starting one: a new flow is created (with its queues and alias), an identical one is verified, a
changed one is refused. All or nothing, in one transaction (so it works through a transaction
pooler too): if any flow is refused, nothing is changed. To see first what it would do, run
pgflow plan with the same arguments.

<module> is a path or URL of a module that exports your flows: every exported Flow,
routeFlow(...) and withStepQueues(...) value, and lists of them. Import it without starting a
worker (keep EdgeWorker.start in the function's index.ts, the flows in a module of their own).

  --flow NAME          only this flow (a slug or an export name); repeat for more
  --database-url URL   the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --json               one JSON object on stdout: {"flows": [{"slug", "status"}], ...}

A new shared queue whose name is one letter from a queue that exists is a warning on stderr (a
typo in a route map?); the compile goes through.

Exit codes: 0 compiled or verified, 1 refused (nothing was changed), 2 usage error.`;

/**
 * Runs `pgflow compile`; returns the exit code.
 *
 * @example
 * ```ts
 * import { compile } from "./compile.ts";
 *
 * // Deno.exit(await compile(["./flows.ts", "--database-url", "postgres://postgres@127.0.0.1:54330/postgres"]));
 * ```
 */
export async function compile(argv: readonly string[]): Promise<number> {
  const cmd = await deployCommand(argv, "pgflow compile");
  if (cmd.help) {
    result(COMPILE_HELP);
    return 0;
  }
  const sql = await openEngine(cmd.url);
  const statuses = new Map<string, string>();
  const log = cliLogger((event, fields) => {
    if (event === "flow compiled" && typeof fields.flow === "string") {
      statuses.set(fields.flow, String(fields.status));
    }
    if (event.startsWith("flow recompiled") && typeof fields.flow === "string") {
      statuses.set(fields.flow, "recompiled");
    }
  });
  // Routed flows' queues are the names people type: a new one like an existing one is a warning.
  const shared = new Set(
    cmd.flows.flatMap((f) => {
      const plan = extractRoutePlan(f.definition);
      return plan.mode === "routed" ? Object.values(plan.queues) : [];
    }),
  );
  let similar: Lookalike[] = [];
  try {
    await sql.begin(async (tx) => {
      const before = await listQueueNames(tx as unknown as Sql);
      await compileDefinitions(tx as unknown as Sql, cmd.flows.map((f) => f.definition), log);
      const after = await listQueueNames(tx as unknown as Sql);
      const created = after.filter((q) => !before.includes(q) && shared.has(q));
      similar = lookalikes(created, after);
    });
  } catch (error) {
    if (!(error instanceof WorkerStartupError)) throw error;
    const message = `${error.message}\nnothing was changed (pgflow compile is all or nothing)`;
    if (!cmd.json) throw new CliError(message);
    result(JSON.stringify({ ok: false, error: error.message, differences: error.differences }));
    return 1;
  } finally {
    await sql.end({ timeout: 5 });
  }
  const flows = cmd.flows.map((f) => ({ slug: f.slug, status: statuses.get(f.slug) ?? "unknown" }));
  for (const l of similar) progress(`warning: ${lookalikeWarning(l)}`);
  if (cmd.json) {
    result(
      JSON.stringify({
        ok: true,
        module: cmd.module,
        database: redact(cmd.url),
        flows,
        lookalikes: similar,
      }),
    );
  } else {
    const width = Math.max(...flows.map((f) => f.status.length));
    for (const f of flows) result(`${f.status.padEnd(width)}  ${f.slug}`);
  }
  return 0;
}

/**
 * The worker's compile logs its verdicts; here each one is seen by `observe`, and warnings go to
 * stderr with the action they carry.
 */
function cliLogger(observe: (event: string, fields: LogFields) => void): Logger {
  const make = (base: LogFields): Logger => {
    const emit = (warn: boolean) => (event: string, fields: LogFields = {}) => {
      const all = { ...base, ...fields };
      observe(event, all);
      if (warn) {
        progress(
          `warning: ${all.flow ? `${all.flow}: ` : ""}${event}${
            typeof all.action === "string" ? `: ${all.action}` : ""
          }`,
        );
      }
    };
    return {
      error: emit(true),
      warn: emit(true),
      info: emit(false),
      debug: emit(false),
      with: (fields) => make({ ...base, ...fields }),
    };
  };
  return make({});
}
