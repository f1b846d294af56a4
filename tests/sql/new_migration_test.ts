/**
 * `deno task migration:new`: the next migration written from changed schema files. Each test edits
 * a temporary copy of `supabase/schemas/`, writes the migration, applies it on top of the
 * migrations, and runs the drift check on the result.
 */
import assert from "node:assert/strict";
import { readManifest } from "../../local/manifest.ts";
import { applyMigrations, applySchemaFiles, MIGRATIONS_DIR } from "../../local/migrate.ts";
import { generateMigration, withHeader } from "../../local/migration_writer.ts";
import { nextVersion } from "../../local/new_migration.ts";
import { withScratchDatabase } from "../../local/scratch_db.ts";
import { splitStatements } from "../../local/sql_statements.ts";
import { type CatalogSnapshot, catalogSnapshot, diffCatalogs } from "../../local/catalog.ts";
import { serverUrl } from "../support/db.ts";
import { TEMPLATES } from "../support/templates.ts";

const SCHEMAS_DIR = new URL("../../supabase/schemas/", import.meta.url).pathname;
const NEW_MIGRATION = new URL("../../local/new_migration.ts", import.meta.url).pathname;

/** A copy of the schema folder; `edits` maps a file name to its new text (from the old one). */
async function schemasCopy(edits: Record<string, (text: string) => string>): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-schemas-" });
  for await (const e of Deno.readDir(SCHEMAS_DIR)) {
    if (e.isFile) await Deno.copyFile(`${SCHEMAS_DIR}${e.name}`, `${dir}/${e.name}`);
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

/** A copy of the migrations folder, plus `extra` files. */
async function migrationsCopy(extra: Record<string, string> = {}): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-migrations-" });
  for await (const e of Deno.readDir(MIGRATIONS_DIR)) {
    if (e.isFile) await Deno.copyFile(`${MIGRATIONS_DIR}${e.name}`, `${dir}/${e.name}`);
  }
  for (const [name, text] of Object.entries(extra)) {
    await Deno.writeTextFile(`${dir}/${name}`, text);
  }
  return dir;
}

function replaceOnce(text: string, from: string, to: string): string {
  assert.ok(text.includes(from), `expected ${JSON.stringify(from)} in the schema file`);
  return text.replace(from, () => to);
}

function catalogOf(apply: (sql: import("postgres").Sql) => Promise<unknown>) {
  return withScratchDatabase(serverUrl(), async (sql) => {
    await apply(sql);
    return await catalogSnapshot(sql, "pgflow");
  }, { template: TEMPLATES.pgmq });
}

/** The drift between the schema copy and the migrations with `generated` applied after them. */
async function driftAfter(schemasDir: string, generated: string): Promise<string[]> {
  const dir = await migrationsCopy({ "29990101000000_generated.sql": generated });
  try {
    const [declared, migrated]: CatalogSnapshot[] = await Promise.all([
      catalogOf((sql) => applySchemaFiles(sql, schemasDir)),
      catalogOf((sql) => applyMigrations(sql, dir)),
    ]);
    return diffCatalogs(declared, migrated, "schemas", "migrations");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const generate = (schemasDir: string) =>
  generateMigration({
    serverUrl: serverUrl(),
    schemasDir,
    migrationsDir: MIGRATIONS_DIR,
    pgmqTemplate: TEMPLATES.pgmq,
  });

Deno.test("a changed function becomes its create or replace, copied from its schema file", async () => {
  const dir = await schemasCopy({
    "0610_worker_retention.sql": (t) => replaceOnce(t, "interval '7 days')", "interval '14 days')"),
  });
  try {
    const before = await driftAfter(dir, "select 1;");
    assert.deepEqual(before.map((d) => d.split(":")[0]), ["function pgflow.worker_retention()"]);
    const { body, changes, byHand } = await generate(dir);
    assert.deepEqual(changes, ["replace function pgflow.worker_retention()"]);
    assert.deepEqual(byHand, []);
    assert.match(
      body,
      /^-- ---- schemas\/0610_worker_retention\.sql: pgflow\.worker_retention\(\)$/m,
    );
    assert.match(body, /^create or replace function pgflow\.worker_retention\(\)$/m);
    assert.match(body, /interval '14 days'/);
    assert.equal(splitStatements(body).length, 1, "one statement, nothing else");
    const name = "20991231000000_pgflow_longer_retention";
    const text = withHeader("pgflow_longer_retention", body, changes, byHand, name);
    assert.match(text, /^begin;\n\n-- Runs once:/m);
    assert.match(text, new RegExp(`where m\\.name = '${name}'\\) then\\n    raise exception`));
    assert.match(text, /^set local lock_timeout = '5s';$/m);
    assert.match(
      text,
      new RegExp(
        `insert into pgflow\\.migrations \\(name\\) values \\('${name}'\\) on conflict \\(name\\) do nothing;\\n\\ncommit;\\n$`,
      ),
    );
    assert.deepEqual(await driftAfter(dir, text), [], "the drift check passes with it");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("new tables, functions, signatures, privileges, row security, policies and comments are written", async () => {
  const dir = await schemasCopy({
    // A new parameter: the old function is dropped, the new one created (and revoked from PUBLIC).
    "0610_worker_retention.sql": (t) =>
      replaceOnce(
        replaceOnce(
          replaceOnce(
            t,
            "function pgflow.worker_retention()",
            "function pgflow.worker_retention(p_default interval default interval '7 days')",
          ),
          "interval '7 days')\n$$;",
          "p_default)\n$$;",
        ),
        "create or replace function pgflow.set_worker_retention(retention interval)\nreturns interval",
        // A new return type: create or replace cannot, so it is dropped first.
        "create or replace function pgflow.set_worker_retention(retention interval)\nreturns text",
      ),
    "0615_audit.sql": () =>
      `-- Audit notes (a new table, its index, a function that writes it).
create table if not exists pgflow.audit (
  id bigint generated always as identity primary key,
  note text not null check (length(note) < 100),
  at timestamptz not null default now()
);
create index if not exists audit_at_idx on pgflow.audit (at);

-- Records a note.
create function pgflow.audit_note(note text)
returns bigint language sql volatile set search_path = '' as $$
  insert into pgflow.audit (note) values (note) returning id
$$;

alter table pgflow.audit enable row level security;
create policy audit_read on pgflow.audit for select to service_role using (at > now() - interval '1 day');
comment on table pgflow.audit is 'notes, one per event';
comment on column pgflow.audit.note is 'what happened';
comment on function pgflow.audit_note(text) is 'adds a note';
comment on schema pgflow is 'the workflow engine';
`,
    "0900_privileges.sql": (t) =>
      replaceOnce(
        t,
        "grant usage on schema pgflow to service_role;",
        "grant usage on schema pgflow to service_role;\n    grant select on pgflow.audit to service_role;\n" +
          "    grant execute on function pgflow.audit_note(text) to service_role;",
      ),
  });
  try {
    const { body, changes, byHand } = await generate(dir);
    assert.deepEqual(byHand, [], body);
    for (
      const change of [
        "drop function pgflow.worker_retention()",
        "create function pgflow.worker_retention(p_default interval)",
        "replace function pgflow.set_worker_retention(retention interval) (dropped and created again)",
        "create table pgflow.audit",
        "create index pgflow.audit_at_idx",
        "create function pgflow.audit_note(note text)",
        "row security pgflow.audit: enabled",
        "create policy pgflow.audit.audit_read",
        "privileges on table pgflow.audit",
        "privileges on function pgflow.audit_note(note text)",
        "privileges on function pgflow.worker_retention(p_default interval)",
        "comment on table pgflow.audit",
        "comment on column pgflow.audit.note",
        "comment on function pgflow.audit_note(note text)",
        "comment on schema pgflow",
      ]
    ) assert.ok(changes.includes(change), `${change} in:\n${changes.join("\n")}`);
    // Copied as written, in schema-file order: the table before the function that inserts into it.
    assert.match(body, /^-- Audit notes \(a new table, its index, a function that writes it\)\.$/m);
    assert.match(body, /^create or replace function pgflow\.audit_note\(note text\)$/m);
    assert.ok(
      body.indexOf("create table if not exists pgflow.audit") <
        body.indexOf("pgflow.audit_note(note text)\nreturns"),
    );
    assert.match(body, /revoke all on function pgflow\.audit_note\(note text\) from public;/);
    assert.match(
      body,
      /if exists \(select 1 from pg_roles where rolname = 'service_role'\) then\n\s+grant select on table pgflow\.audit to service_role;/,
    );
    const text = withHeader("pgflow_audit", body, changes, byHand);
    assert.deepEqual(await driftAfter(dir, text), [], "the drift check passes with it");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("what cannot be written safely is named, and the rest is written", async () => {
  const dir = await schemasCopy({
    "0060_deploy_fences.sql": (t) =>
      replaceOnce(
        t,
        "  note text,\n",
        "  note varchar(200),\n  reason text not null,\n  label text default 'manual',\n",
      ),
    // A renamed parameter needs a drop, but table checks depend on the function.
    "0020_names.sql": (t) =>
      replaceOnce(
        replaceOnce(t, "pgflow.is_valid_slug(slug text)", "pgflow.is_valid_slug(candidate text)"),
        "  select slug is not null\n    and length(slug) <= 128\n    and slug ~ '^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*$'\n    and slug <> 'run'",
        "  select candidate is not null\n    and length(candidate) <= 128\n    and candidate ~ '^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*$'\n    and candidate <> 'run'",
      ),
  });
  try {
    const { body, changes, byHand } = await generate(dir);
    assert.deepEqual(changes, ["add column pgflow.deploy_fences.label"]);
    assert.match(
      body,
      /alter table pgflow\.deploy_fences add column label text default 'manual'::text;/,
    );
    const named = byHand.map((b) => b.split(":")[0]).sort();
    assert.deepEqual(named, [
      "column pgflow.deploy_fences.note",
      "column pgflow.deploy_fences.reason",
      "function pgflow.is_valid_slug(candidate text)",
      "function pgflow.is_valid_slug(slug text)",
    ], byHand.join("\n"));
    assert.match(
      byHand.join("\n"),
      /deploy_fences\.note: type, .*\(text -> character varying\(200\)\)/,
    );
    assert.match(
      byHand.join("\n"),
      /deploy_fences\.reason: a new NOT NULL column without a default/,
    );
    assert.match(
      byHand.join("\n"),
      /drop function pgflow\.is_valid_slug\(slug text\) failed \(cannot drop function/,
    );
    const text = withHeader("pgflow_fences", body, changes, byHand);
    assert.match(text, /^-- TO WRITE BY HAND .*\n-- - column pgflow\.deploy_fences\.note/m);
    const left = (await driftAfter(dir, text)).map((d) => d.split(":")[0]).sort();
    // Exactly what was named is left (and the privileges of the functions named).
    assert.deepEqual(left, [
      ...named,
      "grant function pgflow.is_valid_slug(candidate text)",
      "grant function pgflow.is_valid_slug(slug text)",
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the task writes a draft after the newest migration, and release records it", async () => {
  const schemas = await schemasCopy({
    "0610_worker_retention.sql": (t) => replaceOnce(t, "interval '7 days')", "interval '10 days')"),
  });
  const migrations = await migrationsCopy();
  const manifest = `${migrations}/../${migrations.split("/").pop()}.sha256`;
  const run = async (...args: string[]) => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        NEW_MIGRATION,
        ...args,
        "--server",
        serverUrl(),
        "--schemas",
        schemas,
        "--migrations",
        migrations,
        "--manifest",
        manifest,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const dec = new TextDecoder();
    return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
  };
  try {
    // Every file there now counts as released (this copy's own manifest).
    const released = await run("--release");
    assert.equal(released.code, 0, released.stderr);
    const before = [...Deno.readDirSync(migrations)].map((e) => e.name).sort();
    assert.equal((await readManifest(manifest)).length, before.length);

    assert.equal((await run("Bad-Name")).code, 2);
    const made = await run("pgflow_retention");
    assert.equal(made.code, 0, made.stderr);
    const file = made.stdout.split("\n")[0];
    const name = file.split("/").pop()!;
    assert.match(name, /^\d{14}_pgflow_retention\.sql$/);
    assert.ok(name > before.at(-1)!, `${name} sorts after ${before.at(-1)}`);
    assert.match(made.stdout, /replace function pgflow\.worker_retention\(\)/);
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

Deno.test("with no migration yet, the task writes the first release: every schema file", async () => {
  const migrations = await Deno.makeTempDir({ prefix: "pgflow-migrations-" });
  try {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        NEW_MIGRATION,
        "pgflow_base",
        "--migrations",
        migrations,
        "--manifest",
        `${migrations}/none.sha256`,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    const file = new TextDecoder().decode(out.stdout).trim();
    const text = await Deno.readTextFile(file);
    for await (const e of Deno.readDir(SCHEMAS_DIR)) {
      if (e.name.endsWith(".sql")) assert.ok(text.includes(`-- ---- schemas/${e.name}\n`), e.name);
    }
    assert.match(text, /^begin;$/m);
    const [declared, migrated] = await Promise.all([
      catalogOf((sql) => applySchemaFiles(sql, SCHEMAS_DIR)),
      catalogOf((sql) => applyMigrations(sql, migrations)),
    ]);
    assert.deepEqual(diffCatalogs(declared, migrated, "schemas", "migrations"), []);
  } finally {
    await Deno.remove(migrations, { recursive: true });
  }
});

Deno.test("versions: now, or after the newest when that is later", () => {
  const now = new Date(Date.UTC(2026, 11, 3, 7, 0, 0));
  assert.equal(nextVersion([], now), "20261203070000");
  assert.equal(nextVersion(["20261202163423"], now), "20261203070000");
  assert.equal(nextVersion(["20261203120000", "20261203100000"], now), "20261203120100");
  assert.equal(nextVersion(["20261231235930"], now), "20270101000030");
});

Deno.test("statements are split outside strings, identifiers, comments and dollar quotes", () => {
  const s = splitStatements(`-- file header

-- about f
create function f() returns text language sql as $body$ select 'a;b' $body$;
select ';' as "x;y", E'\\';' /* ; */; -- trailing
select $$;$$`);
  assert.deepEqual(s.map((x) => x.text), [
    "create function f() returns text language sql as $body$ select 'a;b' $body$;",
    `select ';' as "x;y", E'\\';' /* ; */;`,
    "select $$;$$",
  ]);
  assert.equal(s[0].comment, "-- file header\n\n-- about f");
  assert.equal(s[2].comment, "-- trailing");
});
