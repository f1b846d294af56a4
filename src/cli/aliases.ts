/**
 * `pgflow aliases list|activate`: the aliases callers start, the version each points at, its other
 * versions; and moving one, as `pgflow.activate_alias` does: only if it still points where the
 * operator says (compare-and-swap), only to a compiled version carrying it, and only when a live
 * worker serves every step of that version (unless `--force`).
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";
import type { ParsedArgs } from "./args.ts";
import { CliError, command, result } from "./output.ts";
import { runSubcommand } from "./subcommands.ts";

/** The help text of `pgflow aliases`. */
export const ALIASES_HELP = `pgflow aliases <list | activate> [flags]

  list                          every alias, the version it starts, its other versions [--json]
  activate ALIAS VERSION        point ALIAS at VERSION (a compiled flow carrying the alias)
         [--from CURRENT] [--force] [--json]

activate is pgflow.activate_alias: a compare-and-swap. It moves the alias only if it still points
at CURRENT (default: where it points when the command reads it), so of two operators activating at
once one wins and the other is refused, changing nothing. It refuses, naming them, when no live
worker serves a step of VERSION (deploy its workers first; pgflow coverage shows them), unless
--force, which moves it anyway and records what was not covered. Every activation is recorded in
pgflow.alias_activations. Rolling back is an activation the other way.

  --from CURRENT      the version the alias must point at now, or nothing changes
  --force             move it even though no live worker serves some step of VERSION
  --database-url URL  the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --json              one JSON object on stdout

Exit codes: 0 listed, moved or already there, 1 refused (another activation won, not a version
of the alias, steps not served) or failed, 2 usage error, 3 no such alias (list: no alias).`;

/** One alias as `pgflow.list_aliases()` gives it. */
interface AliasRow {
  readonly alias: string;
  readonly flow_slug: string;
  readonly updated_at: string;
  readonly versions: readonly string[];
}

/**
 * Runs `pgflow aliases …`; returns the exit code.
 *
 * @example
 * ```ts
 * import { aliases } from "./aliases.ts";
 *
 * // Deno.exit(await aliases(["activate", "order", "order_v2", "--from", "order_v1"]));
 * ```
 */
export function aliases(argv: readonly string[]): Promise<number> {
  return runSubcommand("aliases", ALIASES_HELP, {
    list: { arguments: 0, run: list },
    activate: {
      flags: { "from": "string", "force": "boolean" },
      arguments: 2,
      usage: "pgflow aliases activate needs the alias and the version to point it at, e.g. " +
        "pgflow aliases activate order order_v2 --from order_v1",
      run: activate,
    },
  }, argv);
}

async function list(sql: Sql, args: ParsedArgs): Promise<number> {
  const rows = (await sql<{ a: AliasRow }[]>`select a from pgflow.list_aliases() as a`)
    .map((r) => r.a);
  if (args.booleans.has("json")) {
    result(JSON.stringify({
      aliases: rows.map((r) => ({
        alias: r.alias,
        target: r.flow_slug,
        versions: r.versions,
        updatedAt: r.updated_at,
      })),
    }));
  } else if (rows.length === 0) {
    result("no aliases: a flow gets one with new Flow({ slug, alias }), created by its compile");
  } else {
    const table = [
      ["alias", "starts", "other versions", "moved"],
      ...rows.map((r) => [
        r.alias,
        r.flow_slug,
        r.versions.filter((v) => v !== r.flow_slug).join(", ") || "-",
        r.updated_at,
      ]),
    ];
    const widths = table[0].map((_, i) => Math.max(...table.map((row) => row[i].length)));
    for (const row of table) {
      result(row.map((cell, i) => cell.padEnd(widths[i])).join("  ").trimEnd());
    }
  }
  return rows.length === 0 ? 3 : 0;
}

async function activate(sql: Sql, args: ParsedArgs): Promise<number> {
  const [alias, version] = args.positionals;
  const json = args.booleans.has("json");
  const [row] = await sql<{ target: string }[]>`
    select flow_slug as target from pgflow.aliases where alias = ${alias}`;
  if (row === undefined) {
    if (json) result(JSON.stringify({ alias, activated: false, error: "no such alias" }));
    console.error(
      `pgflow: there is no alias ${alias}; \`${command("aliases list")}\` lists the aliases`,
    );
    return 3;
  }
  const from = args.strings.from ?? row.target;
  if (args.strings.from === undefined && row.target === version) {
    if (json) result(JSON.stringify({ alias, from, to: version, activated: false }));
    else result(`${alias} points at ${version} already; nothing was changed`);
    return 0;
  }
  let moved: { from: string; to: string; forced: boolean; uncovered: unknown[] };
  try {
    [{ moved }] = await sql<{ moved: typeof moved }[]>`
      select pgflow.activate_alias(${alias}, ${from}, ${version}, ${args.booleans.has("force")})
        as moved`;
  } catch (error) {
    const e = error as { code?: string; message?: string; hint?: string };
    if (!["40001", "22023", "55000", "P0002"].includes(e.code ?? "")) throw error;
    const why = `${e.message}${e.hint ? `; ${e.hint}` : ""}`;
    if (json) result(JSON.stringify({ alias, from, to: version, activated: false, error: why }));
    throw new CliError(
      e.code === "55000"
        ? `${why.replace("force => true", "--force")}`
        : e.code === "40001"
        ? `${e.message}: nothing changed. \`${command("aliases list")}\` shows where it points`
        : why,
    );
  }
  if (json) {
    result(JSON.stringify({ alias, ...moved, activated: true }));
  } else {
    result(
      `${alias}: ${moved.from} → ${moved.to}` +
        (moved.forced ? ` (forced: no live worker serves ${describePairs(moved.uncovered)})` : ""),
    );
  }
  return 0;
}

function describePairs(pairs: readonly unknown[]): string {
  return (pairs as { queue: string; flow: string; step: string }[])
    .map((p) => `${p.flow}/${p.step} on ${p.queue}`).join(", ");
}
