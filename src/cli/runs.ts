/**
 * `pgflow runs list|show|start|watch|cancel|retry|resume`: find runs, read one in full, start one,
 * follow one's events, and act on them, one by id (or the start of one) or many by filters (those
 * print what they would do and act only with `--yes`).
 *
 * @module
 */
import { createClient, type PgflowClient } from "../client/client.ts";
import type { RunStatus } from "../client/types.ts";
import type { FlowCarrier } from "../dsl/extract.ts";
import { type FlagSpec, parseArgs, type ParsedArgs } from "./args.ts";
import { databaseUrl, openDatabase } from "./connect.ts";
import { loadFlows } from "./deploy/load.ts";
import { describeError } from "./migration_runner.ts";
import { CliError, result, UsageError } from "./output.ts";
import { act, type Action, ACTIONS, type Selection } from "./runs/act.ts";
import { formatRun, formatRunList, runJson } from "./runs/format.ts";
import { INPUT_FLAGS, readInput } from "./runs/input.ts";
import { parseIdPrefix, parseLimit, parseRunId, parseSince, parseStatus } from "./runs/parse.ts";
import { describeRef, parseRunRef, resolveRunRef, type RunRef } from "./runs/resolve.ts";
import { startRun, startRuns } from "./runs/start.ts";
import { watchRunEvents } from "./runs/watch.ts";

/** Exit codes of `pgflow runs`, for scripts. */
export const RUNS_EXIT = Object.freeze({
  /** Done: everything selected was acted on (or already as asked), or something was listed. */
  ok: 0,
  /** Something failed: an action was refused for at least one run, or the database failed. */
  failed: 1,
  /** A usage error: a bad flag or value. Nothing was done. */
  usage: 2,
  /** Nothing matched the filters, or no run has that id. Nothing was done. */
  none: 3,
  /** A bulk form without `--yes`: the plan was printed, nothing was done. */
  unconfirmed: 4,
});

/** The help text of `pgflow runs`. */
export const RUNS_HELP = `pgflow runs <list|show|start|watch|cancel|retry|resume> [flags]

  list                          runs, newest first
         [--flow NAME] [--status STATUS] [--since WHEN] [--id-prefix HEX] [--limit N] [--json]
  show RUN                      one run: its steps, why it ended, every failed attempt [--json]
  start NAME --input JSON       start a run of a flow (a slug) or of an alias's current version
         [--input-file PATH] [--flows MODULE] [--run-id UUID] [--watch] [--json]
  start NAME --many --input JSON_ARRAY
                                start one run per element of the array, in one call [--flows]
  watch RUN                     print the run's events as they happen, until it ends [--json]
  cancel RUN [--reason TEXT]    end a started run as cancelled; a run that ended is left as it is
  retry RUN [--input JSON]      start a new run of the same flow with the same input, or with
                                this one (a corrected input; --input-file, --flows as for start)
  resume RUN                    start a new run that reuses every task that completed
  cancel|retry|resume --flow NAME [--status STATUS] [--since WHEN] [--id-prefix HEX] [--limit N]
                                many runs: prints them; acts only with --yes

RUN is a run id or its start (the 8 characters the dashboard shows), when one run's id starts so.
NAME is a flow slug or an alias (for list and bulk actions: the runs of every version carrying it).

  --database-url URL  the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --status STATUS     started, completed, failed or cancelled (bulk default: started for cancel,
                      failed for retry and resume)
  --since WHEN        runs started since: how long ago (30m, 1h, 2d, 1w) or an ISO time
                      (2026-12-01T08:00:00Z)
  --limit N           at most N runs, 1 to 1000 (default 50 for list, 100 for bulk actions; a bulk
                      action refuses when more match: narrow the filters or raise it)
  --input JSON        the run's input, one JSON value (quote it for the shell)
  --input-file PATH   the run's input from a file holding one JSON value
  --flows MODULE      a module exporting the flows (as for pgflow compile): the input is checked
                      by the schema of the flow it starts (an alias: the version it points at now)
  --run-id UUID       start: the run's id; starting again with it returns the same run
  --many              start: the input is an array, one run per element (at most 100,000)
  --watch             start: then print its events until it ends (exit code as for watch)
  --yes               do a bulk action (without it, only print what it would do)
  --again             retry or resume runs that were retried or resumed before (without it they
                      are left as they are, and the output names the run made from each)
  --json              one JSON object on stdout (watch: one per event, without inputs or outputs)

Retry and resume take failed or cancelled runs and never change them; each starts one new run,
once per run: a run retried or resumed before is skipped unless --again (so a bulk retry given
twice retries each run once). list and show name the runs made from a run ("retried as …").
Cancel is idempotent.

Exit codes: 0 done (watch: the run completed), 1 an action or start was refused, the database
failed (watch: the run failed or was cancelled), 2 usage error (an ambiguous RUN too), 3 nothing
matched / no such run, 4 a bulk action without --yes (nothing done).`;

const FILTERS: FlagSpec = {
  "flow": "string",
  "status": "string",
  "since": "string",
  "id-prefix": "string",
  "limit": "string",
};
const COMMON: FlagSpec = { "database-url": "string", "json": "boolean" };
const SPECS: Readonly<Record<string, FlagSpec>> = {
  list: { ...COMMON, ...FILTERS },
  show: COMMON,
  start: {
    ...COMMON,
    ...INPUT_FLAGS,
    "flows": "string",
    "run-id": "string",
    "watch": "boolean",
    "many": "boolean",
  },
  watch: COMMON,
  cancel: { ...COMMON, ...FILTERS, "reason": "string", "yes": "boolean" },
  retry: {
    ...COMMON,
    ...FILTERS,
    ...INPUT_FLAGS,
    "flows": "string",
    "yes": "boolean",
    "again": "boolean",
  },
  resume: { ...COMMON, ...FILTERS, "yes": "boolean", "again": "boolean" },
};

/**
 * Runs `pgflow runs …`; returns the exit code ({@link RUNS_EXIT}).
 *
 * @example
 * ```ts
 * import { runs } from "./runs.ts";
 *
 * // Deno.exit(await runs(["list", "--status", "failed", "--since", "1h"]));
 * ```
 */
export async function runs(argv: readonly string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === "--help" || sub === "-h" || sub === "help") {
    result(RUNS_HELP);
    return sub === undefined ? RUNS_EXIT.usage : RUNS_EXIT.ok;
  }
  if (!Object.hasOwn(SPECS, sub)) {
    throw new UsageError(
      `unknown subcommand ${JSON.stringify(sub)} of pgflow runs; use list, show, start, watch, ` +
        'cancel, retry or resume (run "pgflow runs --help")',
    );
  }
  const command = `pgflow runs ${sub}`;
  const args = parseArgs(rest, SPECS[sub], command, sub === "list" ? 0 : 1);
  if (args.help) {
    result(RUNS_HELP);
    return RUNS_EXIT.ok;
  }
  // Every value is checked, and a flows module loaded, before the database is opened.
  const step: Step = sub === "list"
    ? list(args, filterOf(args, null))
    : sub === "show"
    ? show(args, needRun(args, command))
    : sub === "watch"
    ? watch(args, needRun(args, command))
    : sub === "start"
    ? await start(args, command)
    : await action(sub as Action, args, selection(sub as Action, args, command));
  const flows = args.strings.flows === undefined
    ? []
    : (await loadFlows(args.strings.flows)).map((f) => f.definition as FlowCarrier);
  const { url } = databaseUrl(args.strings["database-url"], command);
  const sql = await openDatabase(url);
  const client = createClient({ sql, transport: "poll", flows });
  try {
    return await step(client);
  } catch (error) {
    if (error instanceof CliError) throw error;
    throw new CliError(
      `${command} failed: ${describeError(error)}. Is the engine installed and up to date ` +
        "(pgflow status), and may this role act on runs (service_role, or the schema's owner)?",
    );
  } finally {
    await client.close();
    await sql.end({ timeout: 5 });
  }
}

type Step = (client: PgflowClient) => Promise<number>;

function list(args: ParsedArgs, filter: Selection): Step {
  return async (client) => {
    const found = await client.listRuns(filter);
    if (args.booleans.has("json")) result(JSON.stringify({ runs: found }));
    else if (found.length === 0) result("no runs match");
    else result(formatRunList(found).join("\n"));
    return found.length === 0 ? RUNS_EXIT.none : RUNS_EXIT.ok;
  };
}

function show(args: ParsedArgs, ref: RunRef): Step {
  return async (client) => {
    const runId = await resolveRunRef(client, ref, "pgflow runs show");
    const run = runId === null ? null : await client.getRun(runId);
    if (run === null) {
      if (args.booleans.has("json")) result(JSON.stringify({ run: null }));
      console.error(`pgflow: ${describeRef(ref)}`);
      return RUNS_EXIT.none;
    }
    if (args.booleans.has("json")) result(JSON.stringify({ run: runJson(run) }));
    else result(formatRun(run).join("\n"));
    return RUNS_EXIT.ok;
  };
}

function watch(args: ParsedArgs, ref: RunRef): Step {
  return async (client) => {
    const runId = await resolveRunRef(client, ref, "pgflow runs watch");
    if (runId === null || await client.getRun(runId) === null) {
      console.error(`pgflow: ${describeRef(ref)}`);
      return RUNS_EXIT.none;
    }
    return await watchUntilEnd(client, runId, args.booleans.has("json"));
  };
}

/** Watches a run until it ends (or Ctrl-C); the exit code says how it ended. */
async function watchUntilEnd(client: PgflowClient, runId: string, json: boolean): Promise<number> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  try {
    const end = await watchRunEvents(client, runId, { json, signal: stop.signal });
    return end === "completed" ? RUNS_EXIT.ok : RUNS_EXIT.failed;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
  }
}

async function start(args: ParsedArgs, command: string): Promise<Step> {
  const [name] = args.positionals;
  if (name === undefined) {
    throw new UsageError(
      `${command} needs a flow slug or alias, e.g. ${command} order --input '{"orderId": 7}'`,
    );
  }
  const input = await readInput(args, command);
  if (input === undefined) {
    throw new UsageError(
      `${command} needs the run's input: --input JSON (e.g. --input '{}') or --input-file PATH`,
    );
  }
  const json = args.booleans.has("json");
  if (args.booleans.has("many")) {
    if (args.strings["run-id"] !== undefined || args.booleans.has("watch")) {
      throw new UsageError(
        `${command} --many starts runs with new ids and does not watch them: leave out --run-id ` +
          "and --watch",
      );
    }
    if (!Array.isArray(input)) {
      throw new UsageError(
        `${command} --many needs an array as the input, one element per run ` +
          `(e.g. --input '[{"orderId": 7}, {"orderId": 8}]')`,
      );
    }
    return async (client) => {
      await startRuns(client, { name, inputs: input, json });
      return RUNS_EXIT.ok;
    };
  }
  const runId = args.strings["run-id"] === undefined
    ? undefined
    : parseRunId(args.strings["run-id"], `${command} --run-id`);
  return async (client) => {
    const started = await startRun(client, { name, input, runId, json });
    if (!args.booleans.has("watch")) return RUNS_EXIT.ok;
    return await watchUntilEnd(client, started.runId, json);
  };
}

async function action(
  name: Action,
  args: ParsedArgs,
  selected: RunRef | Selection,
): Promise<Step> {
  const input = name === "retry" ? await readInput(args, "pgflow runs retry") : undefined;
  if (input !== undefined && !isRef(selected)) {
    throw new UsageError(
      "pgflow runs retry --input takes one run (its id), not filters: a corrected input is for " +
        "one run",
    );
  }
  if (args.strings.flows !== undefined && input === undefined) {
    throw new UsageError("--flows checks a new input: give it with --input or --input-file");
  }
  return async (client) => {
    let target: string | Selection;
    if (isRef(selected)) {
      const id = await resolveRunRef(client, selected, `pgflow runs ${name}`);
      if (id === null) {
        console.error(`pgflow: ${describeRef(selected)}`);
        return RUNS_EXIT.none;
      }
      target = id;
    } else {
      target = selected;
    }
    return await act(client, name, target, {
      reason: args.strings.reason ?? null,
      yes: args.booleans.has("yes"),
      json: args.booleans.has("json"),
      again: args.booleans.has("again"),
      input,
    });
  };
}

function isRef(selected: RunRef | Selection): selected is RunRef {
  return "id" in selected || "prefix" in selected;
}

/** The run of `show` and `watch` (required): an id or the start of one. */
function needRun(args: ParsedArgs, command: string): RunRef {
  const [id] = args.positionals;
  if (id === undefined) throw new UsageError(`${command} needs a run id; run "pgflow runs list"`);
  return parseRunRef(id, command);
}

/** One run by id (or its start), or the filters of a bulk action (never both, never neither). */
function selection(name: Action, args: ParsedArgs, command: string): RunRef | Selection {
  const [id] = args.positionals;
  const filtered = Object.keys(FILTERS).some((f) => f in args.strings);
  if (id !== undefined) {
    if (filtered) {
      throw new UsageError(
        `${command} takes a run id or filters, not both; drop the run id or the --flow, ` +
          "--status, --since, --id-prefix and --limit flags",
      );
    }
    return parseRunRef(id, command);
  }
  if (!filtered || !["flow", "status", "since", "id-prefix"].some((f) => f in args.strings)) {
    throw new UsageError(
      `${command} needs a run id, or filters for many runs (--flow, --status, --since, ` +
        `--id-prefix); e.g. ${command} --flow my_flow --status ${ACTIONS[name].statuses[0]} ` +
        "--since 1h",
    );
  }
  const filter = filterOf(args, ACTIONS[name].statuses[0]);
  if (!ACTIONS[name].statuses.includes(filter.status!)) {
    throw new UsageError(
      `${command} acts on ${ACTIONS[name].statuses.join(" or ")} runs; --status ${filter.status} ` +
        `selects none it could ${name}`,
    );
  }
  return filter;
}

/** The filters given, checked; `defaultStatus` when `--status` is not given. */
function filterOf(args: ParsedArgs, defaultStatus: RunStatus | null): Selection {
  const s = args.strings;
  return {
    flow: s.flow,
    status: s.status === undefined ? defaultStatus ?? undefined : parseStatus(s.status),
    since: s.since === undefined ? undefined : parseSince(s.since),
    runIdPrefix: s["id-prefix"] === undefined ? undefined : parseIdPrefix(s["id-prefix"]),
    limit: s.limit === undefined ? (defaultStatus === null ? 50 : 100) : parseLimit(s.limit),
  };
}
