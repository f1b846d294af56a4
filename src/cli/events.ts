/**
 * `pgflow events send`: sends an event to a waiting step (`pgflow.send_event`), addressed to one
 * run or by correlation key, and prints what it did to each wait (docs/waiting.md). The payload is
 * never printed.
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";
import type { ParsedArgs } from "./args.ts";
import { CliError, result, UsageError } from "./output.ts";
import { runSubcommand } from "./subcommands.ts";

/** The help text of `pgflow events`. */
export const EVENTS_HELP =
  `pgflow events send EVENT (--run RUN_ID [--step STEP] | --key KEY) [flags]

  send EVENT        send EVENT to the step waiting for it (.waitForEvent({ event })) in one run,
                    or in every run whose key path (key: "$.orderId") gives KEY

An event that finds no wait yet (the step has not started waiting) is kept for --keep and
delivered when it does; the first event of a wait wins, a later one is ignored. Each wait reached
is printed: delivered, kept (until when) or ignored (why). Sending needs service_role or the
owner (docs/permissions.md).

  --run RUN_ID        the run
  --step STEP         the step, when the run's flow has several waiting for EVENT
  --key KEY           every run waiting for EVENT with this correlation key
  --payload JSON      the payload, the step's output (default null)
  --keep SECONDS      how long an early event is kept (default 86400, a day; at most 30 days)
  --database-url URL  the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --json              one JSON object on stdout

Exit codes: 0 delivered or kept, 1 failed, 2 usage error, 3 ignored (nothing delivered or kept).`;

/**
 * Runs `pgflow events …`; returns the exit code.
 *
 * @example
 * ```ts
 * import { events } from "./events.ts";
 *
 * // Deno.exit(await events(["send", "approved", "--key", "A-17", "--payload", '{"ok": true}']));
 * ```
 */
export function events(argv: readonly string[]): Promise<number> {
  return runSubcommand("events", EVENTS_HELP, {
    send: {
      flags: {
        "run": "string",
        "step": "string",
        "key": "string",
        "payload": "string",
        "keep": "string",
      },
      arguments: 1,
      usage: "pgflow events send needs the event's name: pgflow events send approved --run RUN_ID",
      run: send,
    },
  }, argv);
}

interface Delivery {
  run_id: string | null;
  step_slug: string | null;
  status: "delivered" | "kept" | "ignored";
  reason?: string;
  keep_until?: string;
}

async function send(sql: Sql, args: ParsedArgs): Promise<number> {
  const [event] = args.positionals;
  const runId = args.strings["run"];
  const key = args.strings["key"];
  if ((runId === undefined) === (key === undefined)) {
    throw new UsageError("pgflow events send needs exactly one of --run RUN_ID and --key KEY");
  }
  if (args.strings["step"] !== undefined && runId === undefined) {
    throw new UsageError("pgflow events send: --step goes with --run");
  }
  const payload = args.strings["payload"] ?? "null";
  try {
    JSON.parse(payload);
  } catch {
    throw new UsageError(
      `pgflow events send: --payload is not JSON; quote it for your shell, e.g. --payload '{"ok": true}'`,
    );
  }
  const keep = Number(args.strings["keep"] ?? 86400);
  if (!Number.isInteger(keep) || keep < 0 || keep > 2_592_000) {
    throw new UsageError(
      `pgflow events send: --keep ${args.strings["keep"]} must be whole seconds from 0 to 2592000`,
    );
  }
  let doc: { event: string; results: Delivery[] };
  try {
    [{ doc }] = await sql<{ doc: { event: string; results: Delivery[] } }[]>`
      select pgflow.send_event(${event}, ${payload}::text::jsonb, run_id => ${runId ?? null}::uuid,
        step_slug => ${args.strings["step"] ?? null}::text, key => ${key ?? null}::text,
        keep => make_interval(secs => ${keep})) as doc`;
  } catch (error) {
    const e = error as { message?: string; hint?: string; code?: string };
    if (e.code === "22023" || e.code === "22P02") {
      throw new CliError(`${e.message}${e.hint ? ` (${e.hint})` : ""}`);
    }
    throw error;
  }
  const reached = doc.results.some((r) => r.status === "delivered" || r.status === "kept");
  if (args.booleans.has("json")) {
    result(JSON.stringify(doc));
  } else {
    for (const r of doc.results) {
      const where = r.run_id === null ? `key ${key}` : `run ${r.run_id} step ${r.step_slug}`;
      result(
        `${where}: ${r.status}${r.reason ? ` (${r.reason})` : ""}${
          r.keep_until ? ` until ${r.keep_until}` : ""
        }`,
      );
    }
  }
  return reached ? 0 : 3;
}
