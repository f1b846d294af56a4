/**
 * The migration tasks (docs/upgrade.md, "Writing the next migration"):
 *
 * - `deno task migration:baseline`: rewrites the baseline, the one migration of 0.1.0, from every
 *   schema file in order, and records its checksum as released. Only while it is the only
 *   migration and 0.1.0 is unpublished: after that it may have run on someone's database.
 * - `deno task migration:new NAME`: writes `supabase/migrations/<version>_NAME.sql`, an unreleased
 *   draft: the schema files that change a database built from the migrations, copied whole, and a
 *   list (with line diffs) of what is left to write by hand. Edit it, run the tests, commit it.
 * - `deno task migration:release`: records every draft in `supabase/migrations.sha256`, after
 *   which it never changes (tests/sql/released_migrations_test.ts). Run it when the version ships.
 *
 * Options: `--schemas DIR`, `--migrations DIR`, `--manifest FILE` (default: this repository's);
 * `--server URL`, a server where scratch databases may be created and dropped (default: a
 * throw-away local Postgres started for the run; `DATABASE_URL` is never used).
 *
 * @module
 */
import { startLocalPostgres } from "../src/cli/db/launcher.ts";
import { SCHEMAS_DIR } from "./drift.ts";
import {
  checkReleasedMigrations,
  MANIFEST_PATH,
  releaseDrafts,
  writeBaseline,
} from "./manifest.ts";
import { listMigrations, MIGRATIONS_DIR } from "./db_push.ts";
import { baselineText, nextMigration, withHeader } from "./migration_writer.ts";

const USAGE =
  `usage: deno task migration:new <lowercase_name> [--server URL] [--schemas DIR] [--migrations DIR]
       deno task migration:baseline [--schemas DIR] [--migrations DIR] [--manifest FILE]
       deno task migration:release [--migrations DIR] [--manifest FILE]`;

/** The next version: now (UTC, yyyymmddhhmmss), or one minute after the newest when that is later. */
export function nextVersion(existing: string[], now: Date = new Date()): string {
  const stamp = (d: Date) => d.toISOString().replace(/\D/g, "").slice(0, 14);
  const newest = [...existing].sort().at(-1);
  const candidate = stamp(now);
  if (!newest || candidate > newest) return candidate;
  const m = /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})$/.exec(newest);
  if (!m) return (BigInt(newest) + 1n).toString();
  const [, y, mo, d, h, mi, s] = m.map(Number);
  return stamp(new Date(Date.UTC(y, mo - 1, d, h, mi + 1, s)));
}

interface Args {
  command: "new" | "baseline" | "release";
  name?: string;
  server?: string;
  schemas: string;
  migrations: string;
  manifest: string;
}

function parseArgs(argv: string[]): Args | string {
  const args: Args = {
    command: "new",
    schemas: SCHEMAS_DIR,
    migrations: MIGRATIONS_DIR,
    manifest: MANIFEST_PATH,
  };
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === "--release") args.command = "release";
    else if (a === "--baseline") args.command = "baseline";
    else if (a === "--server") args.server = value();
    else if (a === "--schemas") args.schemas = value();
    else if (a === "--migrations") args.migrations = value();
    else if (a === "--manifest") args.manifest = value();
    else if (a.startsWith("--")) return `unknown option ${a}`;
    else positional.push(a);
  }
  if (args.command !== "new") return positional.length ? `${args.command} takes no name` : args;
  if (positional.length !== 1 || !/^[a-z0-9_]+$/.test(positional[0])) {
    return "give one name of lowercase letters, digits and _";
  }
  args.name = positional[0];
  return args;
}

async function baseline(args: Args): Promise<number> {
  const existing = await listMigrations(args.migrations);
  // One migration: it is the baseline, whatever its name; none: a new one, named for today.
  const file = existing.length
    ? `${existing[0].version}_${existing[0].name}.sql`
    : `${nextVersion([])}_pgflow_base.sql`;
  const text = await baselineText(args.schemas, file.slice(0, -4));
  const changed = await writeBaseline(args.migrations, args.manifest, file, text);
  console.log(
    `${changed ? "wrote" : "up to date"}: ${args.migrations.replace(/\/$/, "")}/${file} ` +
      `(released: its checksum is in ${
        args.manifest === MANIFEST_PATH ? "supabase/migrations.sha256" : args.manifest
      })`,
  );
  return 0;
}

async function next(args: Args): Promise<number> {
  const existing = await listMigrations(args.migrations);
  if (!existing.length) {
    console.error("no migration yet: write the baseline first (deno task migration:baseline)");
    return 1;
  }
  const server = args.server ? undefined : await startLocalPostgres();
  let result;
  try {
    result = await nextMigration({
      serverUrl: args.server ?? server!.url,
      schemasDir: args.schemas,
      migrationsDir: args.migrations,
    });
  } finally {
    await server?.destroy();
  }
  const { body, changes, byHand } = result;
  if (!body && !byHand.length) {
    console.log("nothing to write: the schema files and the migrations give the same catalog");
    return 0;
  }
  const version = nextVersion(existing.map((m) => m.version));
  const out = `${args.migrations.replace(/\/$/, "")}/${version}_${args.name}.sql`;
  await Deno.writeTextFile(
    out,
    withHeader(args.name!, body, changes, byHand, `${version}_${args.name}`),
  );
  console.log(out);
  for (const c of changes) console.log(`  ${c}`);
  if (byHand.length) {
    console.error(
      `\nwrite these by hand in ${out} (the drift check fails until they are there):\n` +
        byHand.join("\n"),
    );
    return 1;
  }
  console.log(
    "\nan unreleased draft: say at its top what it does and why, run deno task test, commit it; " +
      "deno task migration:release records it when the version is released",
  );
  return 0;
}

async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv);
  if (typeof args === "string") {
    console.error(`${args}\n${USAGE}`);
    return 2;
  }
  if (args.command === "baseline") return await baseline(args);
  const check = await checkReleasedMigrations(args.migrations, args.manifest);
  if (check.problems.length) {
    console.error(`released migrations are wrong; fix this first:\n${check.problems.join("\n")}`);
    return 1;
  }
  if (args.command === "new") return await next(args);
  const released = await releaseDrafts(args.migrations, args.manifest);
  if (!released.length) console.log("no unreleased migration: nothing to record");
  for (const f of released) console.log(`released ${f} (recorded in ${args.manifest})`);
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (err) {
    console.error(`migration: ${err instanceof Error ? err.message : String(err)}`);
    Deno.exit(1);
  }
}
