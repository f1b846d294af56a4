/**
 * The migration tasks: `migration:baseline` writes the 0.1.0 baseline from the schema files (and
 * the committed one is exactly that), `migration:new` writes the next migration by copying the
 * schema files that change the catalog and names, with a line diff, what copying cannot write.
 * Each test works on temporary copies of `supabase/schemas/` and `supabase/migrations/`.
 */
import assert from "node:assert/strict";
import { schemaDrift } from "../../local/drift.ts";
import { readManifest } from "../../local/manifest.ts";
import { MIGRATIONS_DIR } from "../../local/db_push.ts";
import { baselineText, nextMigration, withHeader } from "../../local/migration_writer.ts";
import { nextVersion } from "../../local/new_migration.ts";
import { serverUrl } from "../support/db.ts";
import { TEMPLATES } from "../support/templates.ts";

const SCHEMAS_DIR = new URL("../../supabase/schemas/", import.meta.url).pathname;
const NEW_MIGRATION = new URL("../../local/new_migration.ts", import.meta.url).pathname;

/** A copy of a folder; `edits` maps a file name to its new text (from the old one). */
async function folderCopy(
  from: string,
  edits: Record<string, (text: string) => string> = {},
): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-copy-" });
  for await (const e of Deno.readDir(from)) {
    if (e.isFile) await Deno.copyFile(`${from}${e.name}`, `${dir}/${e.name}`);
  }
  for (const [file, edit] of Object.entries(edits)) {
    const path = `${dir}/${file}`;
    const before = await Deno.readTextFile(path).catch(() => "");
    const after = edit(before);
    assert.notEqual(after, before, `the edit of ${file} changes it`);
    await Deno.writeTextFile(path, after);
  }
  return dir;
}

function replaceOnce(text: string, from: string, to: string): string {
  assert.ok(text.includes(from), `expected ${JSON.stringify(from)} in the schema file`);
  return text.replace(from, () => to);
}

const longerRetention = (t: string) => replaceOnce(t, "interval '7 days')", "interval '14 days')");

/** Runs the task with `args`, on the test server. */
async function task(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", NEW_MIGRATION, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** The drift between a schema folder and a migrations folder. */
const driftBetween = (schemasDir: string, migrationsDir: string) =>
  schemaDrift({ serverUrl: serverUrl(), schemasDir, migrationsDir, pgmqTemplate: TEMPLATES.pgmq });

Deno.test("the committed baseline is exactly what migration:baseline writes from the schema files", async () => {
  const files = [...Deno.readDirSync(MIGRATIONS_DIR)].map((e) => e.name).sort();
  assert.equal(files.length, 1, `one migration, the baseline: ${files.join(", ")}`);
  const text = await Deno.readTextFile(`${MIGRATIONS_DIR}${files[0]}`);
  assert.ok(
    text === await baselineText(SCHEMAS_DIR, files[0].slice(0, -4)),
    `${files[0]} is not what the schema files give: run deno task migration:baseline`,
  );
  for (const e of Deno.readDirSync(SCHEMAS_DIR)) {
    assert.ok(text.includes(`\n-- ---- schemas/${e.name}\n`), `${e.name} is in the baseline`);
  }
});

Deno.test("migration:baseline writes the baseline and its checksum, rewrites it in place, and refuses once it is built on", async () => {
  const schemas = await folderCopy(SCHEMAS_DIR);
  const migrations = await Deno.makeTempDir({ prefix: "pgflow-migrations-" });
  const manifest = `${migrations}.sha256`;
  const baseline = (...extra: string[]) =>
    task(
      "--baseline",
      "--schemas",
      schemas,
      "--migrations",
      migrations,
      "--manifest",
      manifest,
      ...extra,
    );
  try {
    const first = await baseline();
    assert.equal(first.code, 0, first.stderr);
    const [file] = [...Deno.readDirSync(migrations)].map((e) => e.name);
    assert.match(file, /^\d{14}_pgflow_base\.sql$/);
    assert.match(first.stdout, new RegExp(`^wrote: .*${file} \\(released`));
    const released = await readManifest(manifest);
    assert.deepEqual(released.map((e) => e.file), [file]);
    assert.deepEqual(await driftBetween(schemas, migrations), []);

    const again = await baseline();
    assert.match(again.stdout, /^up to date: /);
    assert.deepEqual(await readManifest(manifest), released, "nothing changed");

    // A changed schema file: the drift is there until the baseline is written again, in place.
    await Deno.writeTextFile(
      `${schemas}/0610_worker_retention.sql`,
      longerRetention(await Deno.readTextFile(`${schemas}/0610_worker_retention.sql`)),
    );
    assert.equal((await driftBetween(schemas, migrations)).length, 1);
    assert.match((await baseline()).stdout, /^wrote: /);
    assert.deepEqual([...Deno.readDirSync(migrations)].map((e) => e.name), [file]);
    assert.notEqual((await readManifest(manifest))[0].sha256, released[0].sha256);
    assert.deepEqual(await driftBetween(schemas, migrations), []);

    // Built on: refused, nothing written.
    await Deno.writeTextFile(`${migrations}/29990101000000_pgflow_next.sql`, "select 1;\n");
    const text = await Deno.readTextFile(`${migrations}/${file}`);
    await Deno.writeTextFile(`${schemas}/0999_more.sql`, "select 1;\n");
    const refused = await baseline();
    assert.equal(refused.code, 1);
    assert.match(
      refused.stderr,
      /the baseline is frozen: other migrations exist \(29990101000000_pgflow_next\.sql\); write the next one instead: deno task migration:new <name>/,
    );
    assert.equal(await Deno.readTextFile(`${migrations}/${file}`), text);
    assert.equal((await baseline("x")).code, 2, "no name is taken");
  } finally {
    await Deno.remove(schemas, { recursive: true });
    await Deno.remove(migrations, { recursive: true });
    await Deno.remove(manifest).catch(() => {});
  }
});

Deno.test("the next migration copies each schema file that changes the catalog, whole, and closes the drift", async () => {
  const schemas = await folderCopy(SCHEMAS_DIR, { "0610_worker_retention.sql": longerRetention });
  const migrations = await folderCopy(MIGRATIONS_DIR);
  try {
    const { body, changes, byHand } = await nextMigration({
      serverUrl: serverUrl(),
      schemasDir: schemas,
      migrationsDir: migrations,
      pgmqTemplate: TEMPLATES.pgmq,
    });
    assert.deepEqual(byHand, []);
    assert.deepEqual(changes, [
      "schemas/0610_worker_retention.sql: function pgflow.worker_retention()",
    ]);
    const file = await Deno.readTextFile(`${schemas}/0610_worker_retention.sql`);
    assert.equal(body, `-- ---- schemas/0610_worker_retention.sql\n${file.trimEnd()}\n`);
    const name = "29990101000000_pgflow_retention";
    const text = withHeader("pgflow_retention", body, changes, byHand, name);
    assert.match(text, /^begin;\n\n-- Runs once:/m);
    assert.match(text, /^set local lock_timeout = '5s';$/m);
    assert.ok(
      text.endsWith(
        `insert into pgflow.migrations (name) values ('${name}') on conflict (name) do nothing;\n\ncommit;\n`,
      ),
    );
    await Deno.writeTextFile(`${migrations}/${name}.sql`, text);
    assert.deepEqual(await driftBetween(schemas, migrations), [], "the drift check passes with it");
  } finally {
    await Deno.remove(schemas, { recursive: true });
    await Deno.remove(migrations, { recursive: true });
  }
});

Deno.test("what copying the schema files cannot write is named", async () => {
  const schemas = await folderCopy(SCHEMAS_DIR, {
    // A column added to an existing table: `create table if not exists` does not add it.
    "0060_deploy_fences.sql": (t) =>
      replaceOnce(t, "  note text,\n", "  note text,\n  label text,\n"),
    // A changed return type: `create or replace` refuses it.
    "0610_worker_retention.sql": (t) =>
      replaceOnce(
        t,
        "create or replace function pgflow.set_worker_retention(retention interval)\nreturns interval",
        "create or replace function pgflow.set_worker_retention(retention interval)\nreturns text",
      ),
  });
  const migrations = await folderCopy(MIGRATIONS_DIR);
  try {
    const { body, byHand } = await nextMigration({
      serverUrl: serverUrl(),
      schemasDir: schemas,
      migrationsDir: migrations,
      pgmqTemplate: TEMPLATES.pgmq,
    });
    assert.match(body, /^-- ---- schemas\/0610_worker_retention\.sql$/m, "copied, to be fixed");
    assert.equal(byHand.length, 1, byHand.join("\n"));
    assert.match(
      byHand[0],
      /^schemas\/0610_worker_retention\.sql fails on a database with the migrations \(cannot change return type of existing function\): write what it needs before its copy/,
    );

    // Fixed by hand (the drop), what is left is named.
    const fixed = withHeader(
      "pgflow_fences",
      `drop function pgflow.set_worker_retention(interval);\n${body}`,
      [],
      [],
    );
    await Deno.writeTextFile(`${migrations}/29990101000000_pgflow_fences.sql`, fixed);
    // (The function created again is executable by PUBLIC until schemas/0900_privileges.sql runs
    // again: per-schema default privileges cannot take PUBLIC's execute away.)
    const left = await driftBetween(schemas, migrations);
    assert.deepEqual(left, [
      "column pgflow.deploy_fences.label: only in schemas",
      "grant function pgflow.set_worker_retention(retention interval): differs\n" +
      "  schemas: postgres=X/postgres\n  migrations: =X/postgres,postgres=X/postgres",
    ]);

    // The task writes the draft anyway, lists what is left, and exits with 1.
    await Deno.remove(`${migrations}/29990101000000_pgflow_fences.sql`);
    const run = await task(
      "pgflow_fences",
      "--server",
      serverUrl(),
      "--schemas",
      schemas,
      "--migrations",
      migrations,
      "--manifest",
      `${migrations}/none.sha256`,
    );
    assert.equal(run.code, 1, run.stderr);
    const written = run.stdout.split("\n")[0];
    assert.match(written, /_pgflow_fences\.sql$/);
    assert.match(await Deno.readTextFile(written), /^-- TO WRITE BY HAND /m);
    assert.match(run.stderr, /write these by hand in .*pgflow_fences\.sql/);
  } finally {
    await Deno.remove(schemas, { recursive: true });
    await Deno.remove(migrations, { recursive: true });
  }
});

Deno.test("the task writes a draft after the newest migration, and release records it", async () => {
  const schemas = await folderCopy(SCHEMAS_DIR, {
    "0610_worker_retention.sql": (t) => replaceOnce(t, "interval '7 days')", "interval '10 days')"),
  });
  const migrations = await folderCopy(MIGRATIONS_DIR);
  const manifest = `${migrations}.sha256`;
  const run = (...args: string[]) =>
    task(
      ...args,
      "--server",
      serverUrl(),
      "--schemas",
      schemas,
      "--migrations",
      migrations,
      "--manifest",
      manifest,
    );
  try {
    // Every file there now counts as released (this copy's own manifest).
    const released = await run("--release");
    assert.equal(released.code, 0, released.stderr);
    const before = [...Deno.readDirSync(migrations)].map((e) => e.name).sort();

    assert.equal((await run("Bad-Name")).code, 2);
    const made = await run("pgflow_retention");
    assert.equal(made.code, 0, made.stderr);
    const file = made.stdout.split("\n")[0];
    const name = file.split("/").pop()!;
    assert.match(name, /^\d{14}_pgflow_retention\.sql$/);
    assert.ok(name > before.at(-1)!, `${name} sorts after ${before.at(-1)}`);
    assert.match(
      made.stdout,
      /schemas\/0610_worker_retention\.sql: function pgflow\.worker_retention/,
    );
    assert.match(made.stdout, /an unreleased draft/);
    assert.match(await Deno.readTextFile(file), /interval '10 days'/);

    const again = await run("pgflow_again");
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /nothing to write/);

    const rel = await run("--release");
    assert.match(rel.stdout, new RegExp(`released ${name}`));
    await Deno.writeTextFile(file, "\n-- edited\n", { append: true });
    const refused = await run("pgflow_more");
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, new RegExp(`${name} is released and was changed`));
  } finally {
    await Deno.remove(schemas, { recursive: true });
    await Deno.remove(migrations, { recursive: true });
    await Deno.remove(manifest).catch(() => {});
  }
});

Deno.test("versions: now, or after the newest when that is later", () => {
  const now = new Date(Date.UTC(2026, 11, 3, 7, 0, 0));
  assert.equal(nextVersion([], now), "20261203070000");
  assert.equal(nextVersion(["20261202163423"], now), "20261203070000");
  assert.equal(nextVersion(["20261203120000", "20261203100000"], now), "20261203120100");
  assert.equal(nextVersion(["20261231235930"], now), "20270101000030");
});
