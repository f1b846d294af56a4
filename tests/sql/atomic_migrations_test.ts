/**
 * Migrations that cannot half-apply (issue 16, item 2): every file in supabase/migrations/ is one
 * transaction, and applies whole or changes nothing however it is run: `psql -f` without `-1` and
 * with ON_ERROR_STOP unset, as `supabase db push` runs a file (its text and the history insert in
 * one transaction, `psql -1`, or one implicit transaction, a single simple query), and by
 * `pgflow migrate` (tests/cli/migrate_test.ts). A copy of each file with an error injected halfway
 * leaves nothing behind each of those ways.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { migrationBody } from "../../src/cli/shipped_migrations.ts";
import { ENGINE_VERSION } from "../../src/util/version.ts";
import { applyMigrations } from "../../local/db_push.ts";
import { withScratchDatabase } from "../../local/scratch_db.ts";
import { catalogSnapshot, diffCatalogs } from "../../local/catalog.ts";
import { databaseState } from "../cli/helpers.ts";
import { pgmqSource, serverUrl, testDatabase } from "../support/db.ts";
import { TEMPLATES } from "../support/templates.ts";

const MIGRATIONS = new URL("../../supabase/migrations/", import.meta.url).pathname;
const FILES = [...Deno.readDirSync(MIGRATIONS)].map((e) => e.name).filter((n) => n.endsWith(".sql"))
  .sort();

const pgmqOnly = testDatabase(import.meta.url, { template: "pgmq" });
const empty = testDatabase(import.meta.url, { template: "empty" });
const migratedDb = testDatabase(import.meta.url, { template: "pgflow" });

/** Runs psql on `url` with `args` (never -1 unless given, ON_ERROR_STOP unset, no psqlrc). */
async function psql(url: string, args: string[]): Promise<{ code: number; output: string }> {
  const out = await new Deno.Command("psql", {
    args: ["-X", "-q", "-d", url, ...args],
    env: { PGOPTIONS: "--client-min-messages=warning" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, output: decode(out.stdout) + decode(out.stderr) };
}

/**
 * A copy of `text` with a failing statement put before the first top-level statement in its second
 * half, so statements that change things come before it.
 */
function withInjectedFailure(text: string): string {
  const lines = text.split("\n");
  let inBody = false;
  const starts: number[] = [];
  lines.forEach((line, i) => {
    if (
      !inBody &&
      /^(create|alter|insert|do|grant|revoke|comment|lock|update|delete|commit)\b/i.test(line)
    ) {
      starts.push(i);
    }
    const quotes = line.match(/\$[A-Za-z_]*\$/g)?.length ?? 0;
    if (quotes % 2 === 1) inBody = !inBody;
  });
  const changing = starts.filter((i) => !/^(do|commit)\b/i.test(lines[i]));
  const after = (i: number) => changing.some((c) => c < i);
  const at = starts.find((i) => i >= lines.length / 2 && after(i)) ?? starts.find(after);
  assert.ok(at !== undefined, "a changing statement comes before the failure");
  lines.splice(at, 0, "do $$ begin raise exception 'injected failure'; end $$;");
  return lines.join("\n");
}

async function tempFile(text: string): Promise<string> {
  const path = await Deno.makeTempFile({ suffix: ".sql" });
  await Deno.writeTextFile(path, text);
  return path;
}

const SUPABASE_HISTORY = `create schema if not exists supabase_migrations;
  create table if not exists supabase_migrations.schema_migrations (
    version text primary key, statements text[], name text)`;

function historyInsert(file: string): string {
  const [, version, name] = /^(\d+)_(.+)\.sql$/.exec(file)!;
  return `insert into supabase_migrations.schema_migrations (version, name) values ('${version}', '${name}');`;
}

/** Runs `text` as one simple query (the server runs it as one implicit transaction block). */
async function simpleQuery(url: string, text: string): Promise<string> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(text).simple();
    return "";
  } catch (error) {
    return (error as Error).message;
  } finally {
    await sql.end();
  }
}

/** The ways a file is applied, each given the file's text, its name and the database. */
const WAYS: Record<string, (url: string, text: string, file: string) => Promise<string>> = {
  "psql -f (no -1, ON_ERROR_STOP unset)": async (url, text) => {
    const path = await tempFile(text);
    try {
      return (await psql(url, ["-f", path])).output;
    } finally {
      await Deno.remove(path);
    }
  },
  "psql -1 -f (ON_ERROR_STOP unset)": async (url, text) => {
    const path = await tempFile(text);
    try {
      return (await psql(url, ["-1", "-f", path])).output;
    } finally {
      await Deno.remove(path);
    }
  },
  "supabase db push, implicit transaction (file and history insert as one query)": (
    url,
    text,
    file,
  ) => simpleQuery(url, `${text}\n${historyInsert(file)}`),
  "supabase db push, explicit transaction (begin, file, history insert, commit as one query)": (
    url,
    text,
    file,
  ) => simpleQuery(url, `begin;\n${text}\n${historyInsert(file)}\ncommit;`),
  "the local runner (file text in sql.begin, recorded like the Supabase CLI)": async (
    url,
    text,
    file,
  ) => {
    const dir = await Deno.makeTempDir();
    await Deno.writeTextFile(`${dir}/${file}`, text);
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      await applyMigrations(sql, dir);
      return "";
    } catch (error) {
      return (error as Error).message;
    } finally {
      await sql.end();
      await Deno.remove(dir, { recursive: true });
    }
  },
};

Deno.test("every migration is one transaction: begin; first, commit; last, nothing else", async () => {
  const wrong: string[] = [];
  for (const file of FILES) {
    const text = await Deno.readTextFile(`${MIGRATIONS}${file}`);
    const code = text.split("\n").filter((l) => l.trim() !== "" && !l.trimStart().startsWith("--"));
    if (code[0] !== "begin;" || code.at(-1) !== "commit;") {
      wrong.push(
        `${file}: first statement ${JSON.stringify(code[0])}, last ${JSON.stringify(code.at(-1))}`,
      );
      continue;
    }
    try {
      migrationBody(text, file);
    } catch (error) {
      wrong.push((error as Error).message);
    }
  }
  assert.deepEqual(wrong, [], `wrap each in "begin;" ... "commit;":\n${wrong.join("\n")}`);
});

Deno.test("every migration records itself as its last statement", () => {
  const missing = FILES.filter((file) => {
    const code = Deno.readTextFileSync(`${MIGRATIONS}${file}`).trimEnd().split("\n")
      .filter((l) => l.trim() !== "" && !l.trimStart().startsWith("--"));
    return code.at(-2) !==
      `insert into pgflow.migrations (name) values ('${
        file.slice(0, -4)
      }') on conflict (name) do nothing;`;
  });
  assert.deepEqual(
    missing,
    [],
    "end each of these (before commit;) with insert into pgflow.migrations (name) values " +
      "('<file name without .sql>') on conflict (name) do nothing;",
  );
});

/** The pgflow catalog of the test template (built by the local runner from every migration). */
function templateCatalog(): Promise<Map<string, string>> {
  return withScratchDatabase(serverUrl(), (sql) => catalogSnapshot(sql, "pgflow"), {
    template: TEMPLATES.pgflow,
  });
}

for (const [way, apply] of Object.entries(WAYS)) {
  pgmqOnly.test(
    `${way}, file after file, builds the same schema as the migrations do`,
    async ({ url }) => {
      const sql = postgres(url, { max: 1, onnotice: () => {} });
      try {
        await sql.unsafe(SUPABASE_HISTORY).simple();
        for (const file of FILES) {
          const output = await apply(url, await Deno.readTextFile(`${MIGRATIONS}${file}`), file);
          assert.doesNotMatch(output, /ERROR|failed/, `${file}:\n${output}`);
        }
        const drift = diffCatalogs(
          await catalogSnapshot(sql, "pgflow"),
          await templateCatalog(),
          way,
          "template",
        );
        assert.deepEqual(drift, [], drift.join("\n"));
        const [{ version }] = await sql`select pgflow.engine_version() as version`;
        assert.equal(version, ENGINE_VERSION);
        const recorded = await sql`select name from pgflow.migrations order by name`;
        assert.deepEqual(recorded.map((r) => r.name), FILES.map((f) => f.slice(0, -4)));
      } finally {
        await sql.end();
      }
    },
    { fresh: true },
  );
}

pgmqOnly.test(
  "a file that fails halfway changes nothing, each way it is applied",
  async ({ url }) => {
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      await sql.unsafe(SUPABASE_HISTORY).simple();
    } finally {
      await sql.end();
    }
    for (const file of FILES) {
      const text = await Deno.readTextFile(`${MIGRATIONS}${file}`);
      const broken = withInjectedFailure(text);
      const before = await databaseState(url);
      for (const [way, apply] of Object.entries(WAYS)) {
        const output = await apply(url, broken, file);
        assert.match(
          output,
          /injected failure/,
          `${way} on ${file} reports the failure:\n${output}`,
        );
        const drift = diffCatalogs(await databaseState(url), before, "after", "before");
        assert.deepEqual(drift, [], `${way} left part of ${file} behind:\n${drift.join("\n")}`);
      }
      // Then the real file, so the next one finds what it needs.
      const { output } = await psql(url, ["-f", `${MIGRATIONS}${file}`]);
      assert.doesNotMatch(output, /ERROR/, output);
    }
  },
  { fresh: true },
);

empty.test(
  "without PGMQ, the first migration creates the extension or, where there is none, nothing",
  async ({ url }) => {
    const { output } = await psql(url, ["-f", `${MIGRATIONS}${FILES[0]}`]);
    const after = await databaseState(url);
    if (pgmqSource() === "extension") {
      assert.doesNotMatch(output, /ERROR/, output);
      assert.match(after.get("extensions")!, /\bpgmq\b/);
      assert.ok(after.has("pgflow: table pgflow.runs"));
    } else {
      assert.match(output, /extension "pgmq" is not available/);
      assert.doesNotMatch(after.get("schemas")!, /pgflow|pgmq/, "no schema left behind");
      assert.ok(![...after.keys()].some((k) => k.startsWith("pgflow:")));
    }
  },
  { fresh: true },
);

migratedDb.test(
  "a migration applied again is refused whole, so later migrations are never undone",
  async ({ url }) => {
    const before = await databaseState(url);
    const unguarded: string[] = [];
    for (const file of FILES) {
      const text = await Deno.readTextFile(`${MIGRATIONS}${file}`);
      for (const [way, apply] of Object.entries(WAYS)) {
        if (way.startsWith("the local runner")) continue; // it skips what it recorded
        const output = await apply(url, text, file);
        if (!output.includes(`pgflow migration ${file.slice(0, -4)} is already applied`)) {
          unguarded.push(`${file} (${way}): ${output.slice(0, 200)}`);
        }
        const drift = diffCatalogs(await databaseState(url), before, "after", "before");
        assert.deepEqual(drift, [], `${way} applied ${file} again:\n${drift.join("\n")}`);
      }
    }
    assert.deepEqual(
      unguarded,
      [],
      "begin each of these (after begin;) with the guard that refuses a recorded migration (see " +
        "docs/upgrade.md, Writing the next migration):\n" + unguarded.join("\n"),
    );
  },
  { fresh: true },
);
