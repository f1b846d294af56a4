/**
 * `deno task migration:new NAME`: writes `supabase/migrations/<version>_NAME.sql`, the next
 * migration, from the schema files that differ from the migrations (see
 * `local/migration_writer.ts` for what it writes and what it leaves to a person). The file is an
 * unreleased draft: edit it (say what it does and why), run the tests, commit it.
 *
 * `deno task migration:release`: records every draft in `supabase/migrations.sha256`, after which
 * it never changes (tests/sql/released_migrations_test.ts). Run it when the version is released.
 *
 * With no migration at all, `migration:new` writes the first release: every schema file in order.
 *
 * Options: `--schemas DIR`, `--migrations DIR`, `--manifest FILE` (default: this repository's);
 * `--server URL`, a server where scratch databases may be created and dropped (default: a
 * throw-away local Postgres started for the run; `DATABASE_URL` is never used).
 *
 * @module
 */
import { startLocalPostgres } from "./launcher.ts";
import { checkReleasedMigrations, MANIFEST_PATH, releaseDrafts } from "./manifest.ts";
import { listMigrations, MIGRATIONS_DIR } from "./migrate.ts";
import { generateMigration, withHeader } from "./migration_writer.ts";

const USAGE =
  `usage: deno task migration:new <lowercase_name> [--server URL] [--schemas DIR] [--migrations DIR]
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
  command: "new" | "release";
  name?: string;
  server?: string;
  schemas: string;
  migrations: string;
  manifest: string;
}

function parseArgs(argv: string[]): Args | string {
  const args: Args = {
    command: "new",
    schemas: new URL("../supabase/schemas/", import.meta.url).pathname,
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
    else if (a === "--server") args.server = value();
    else if (a === "--schemas") args.schemas = value();
    else if (a === "--migrations") args.migrations = value();
    else if (a === "--manifest") args.manifest = value();
    else if (a.startsWith("--")) return `unknown option ${a}`;
    else positional.push(a);
  }
  if (args.command === "release") return positional.length ? "release takes no name" : args;
  if (positional.length !== 1 || !/^[a-z0-9_]+$/.test(positional[0])) {
    return "give one name of lowercase letters, digits and _";
  }
  args.name = positional[0];
  return args;
}

function firstRelease(schemasDir: string): string {
  const files = [...Deno.readDirSync(schemasDir)].map((e) => e.name).filter((n) =>
    n.endsWith(".sql")
  ).sort();
  const parts = files.map((f) =>
    `-- ---- schemas/${f}\n${Deno.readTextFileSync(`${schemasDir.replace(/\/$/, "")}/${f}`)}`
  );
  return `-- Generated from supabase/schemas/ by local/new_migration.ts.\n-- One transaction: applied whole or not at all.\nbegin;\n\n${
    parts.join("\n")
  }\ncommit;\n`;
}

async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv);
  if (typeof args === "string") {
    console.error(`${args}\n${USAGE}`);
    return 2;
  }
  const check = await checkReleasedMigrations(args.migrations, args.manifest);
  if (check.problems.length) {
    console.error(`released migrations are wrong; fix this first:\n${check.problems.join("\n")}`);
    return 1;
  }
  if (args.command === "release") {
    const released = await releaseDrafts(args.migrations, args.manifest);
    if (!released.length) console.log("no unreleased migration: nothing to record");
    for (const f of released) console.log(`released ${f} (recorded in ${args.manifest})`);
    return 0;
  }
  const existing = await listMigrations(args.migrations);
  const version = nextVersion(existing.map((m) => m.version));
  const out = `${args.migrations.replace(/\/$/, "")}/${version}_${args.name}.sql`;
  if (!existing.length) {
    await Deno.writeTextFile(out, firstRelease(args.schemas));
    console.log(out);
    return 0;
  }
  const server = args.server ? undefined : await startLocalPostgres();
  let result;
  try {
    result = await generateMigration({
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
  await Deno.writeTextFile(
    out,
    withHeader(args.name!, body, changes, byHand, `${version}_${args.name}`),
  );
  console.log(out);
  for (const c of changes) console.log(`  ${c}`);
  if (check.drafts.length) {
    console.log(`on top of the unreleased draft(s) ${check.drafts.join(", ")}`);
  }
  if (byHand.length) {
    console.error(
      `\nwrite these by hand in ${out} (the drift check, tests/sql/schema_first_test.ts, fails until ` +
        `they are there):\n${byHand.map((b) => `  - ${b}`).join("\n")}`,
    );
    return 1;
  }
  console.log(
    "\nan unreleased draft: say at its top what it does and why, run deno task test, commit it; " +
      "deno task migration:release records it when the version is released",
  );
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (err) {
    console.error(`migration:new: ${err instanceof Error ? err.message : String(err)}`);
    Deno.exit(1);
  }
}
