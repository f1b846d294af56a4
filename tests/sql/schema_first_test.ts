/**
 * The declarative schema (`supabase/schemas/`) is the source of truth: the released migrations,
 * applied in order, must produce exactly the same catalog, privileges and comments included. Every
 * test builds what it compares itself; none depends on another having run.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { applySchemaFiles, MIGRATIONS_DIR } from "../../local/migrate.ts";
import { withScratchDatabase } from "../../local/scratch_db.ts";
import { type CatalogSnapshot, catalogSnapshot, diffCatalogs } from "../../local/catalog.ts";
import { serverUrl, testDatabase } from "../support/db.ts";
import { TEMPLATES } from "../support/templates.ts";

const SCHEMAS_DIR = new URL("../../supabase/schemas/", import.meta.url).pathname;
const pgmqOnly = testDatabase(import.meta.url, { template: "pgmq" });

/** The catalog the schema files in `dir` produce, applied in order on a fresh PGMQ database. */
function catalogOfSchemas(dir: string): Promise<CatalogSnapshot> {
  return withScratchDatabase(serverUrl(), async (sql) => {
    await applySchemaFiles(sql, dir);
    return await catalogSnapshot(sql, "pgflow");
  }, { template: TEMPLATES.pgmq });
}

/** The catalog every migration produces (the `pgflow` template is built from `MIGRATIONS_DIR`). */
function catalogOfMigrations(): Promise<CatalogSnapshot> {
  return withScratchDatabase(
    serverUrl(),
    (sql) => catalogSnapshot(sql, "pgflow"),
    { template: TEMPLATES.pgflow },
  );
}

/** A copy of the schema folder with one more file, applied after all the others. */
async function schemasWith(extra: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-schemas-" });
  for await (const entry of Deno.readDir(SCHEMAS_DIR)) {
    if (entry.isFile) await Deno.copyFile(`${SCHEMAS_DIR}${entry.name}`, `${dir}/${entry.name}`);
  }
  await Deno.writeTextFile(`${dir}/9999_drift.sql`, extra);
  return dir;
}

/** The drift between the real migrations and the schema files plus `extra`. */
async function driftWithSchemaFile(extra: string): Promise<string[]> {
  const dir = await schemasWith(extra);
  try {
    const [fromSchemas, fromMigrations] = await Promise.all([
      catalogOfSchemas(dir),
      catalogOfMigrations(),
    ]);
    return diffCatalogs(fromSchemas, fromMigrations, "schemas", "migrations");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The role scratch databases are used as (the one default privileges are recorded for). */
async function currentUser(): Promise<string> {
  const admin = postgres(serverUrl(), { max: 1, onnotice: () => {} });
  try {
    return (await admin<{ user: string }[]>`select current_user as user`)[0].user;
  } finally {
    await admin.end();
  }
}

const keyOf = (drift: string) => drift.slice(0, drift.indexOf(": "));

Deno.test("schemas and migrations produce the same pgflow catalog", async () => {
  const [fromSchemas, fromMigrations] = await Promise.all([
    catalogOfSchemas(SCHEMAS_DIR),
    catalogOfMigrations(),
  ]);
  assert.ok(fromMigrations.has("table pgflow.runs"), `migrations from ${MIGRATIONS_DIR}`);
  const drift = diffCatalogs(fromSchemas, fromMigrations, "schemas", "migrations");
  assert.deepEqual(drift, [], `schema drift:\n${drift.join("\n")}`);
});

Deno.test("a grant added only in a schema file is reported, naming the table", async () => {
  const drift = await driftWithSchemaFile("grant select on pgflow.runs to public;\n");
  assert.equal(drift.length, 1, drift.join("\n"));
  assert.ok(drift[0].startsWith("grant table pgflow.runs: differs"), drift[0]);
  assert.match(drift[0], /schemas: (.*,)?=r\//, "the schemas side lists PUBLIC's select");
});

Deno.test("privileges, row security, policies, default privileges and comments added only in a schema file are reported", async () => {
  const drift = await driftWithSchemaFile(`
    grant usage on sequence pgflow.deploy_fences_fence_id_seq to public;
    grant update (status) on pgflow.runs to service_role;
    grant usage on schema pgflow to public;
    revoke execute on function pgflow.start_flow(text, jsonb, uuid) from service_role;
    alter table pgflow.steps enable row level security;
    alter table pgflow.deps force row level security;
    create policy runs_read on pgflow.runs for select to service_role using (true);
    alter default privileges in schema pgflow grant select on tables to service_role;
    comment on schema pgflow is 'workflows';
    comment on table pgflow.flows is 'flow definitions';
    comment on column pgflow.flows.flow_slug is 'the concrete slug';
    comment on function pgflow.start_flow(text, jsonb, uuid) is 'starts a run';
    comment on constraint flows_pkey on pgflow.flows is 'one row per slug';
    comment on policy runs_read on pgflow.runs is 'service_role reads runs';
  `);
  const user = await currentUser();
  assert.deepEqual(drift.map(keyOf), [
    "comment column pgflow.flows.flow_slug",
    "comment constraint pgflow.flows.flows_pkey",
    "comment function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid)",
    "comment policy pgflow.runs.runs_read",
    "comment schema pgflow",
    "comment table pgflow.flows",
    `default privileges in schema pgflow for role ${user} on tables`,
    "grant column pgflow.runs.status",
    "grant function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid)",
    "grant schema pgflow",
    "grant sequence pgflow.deploy_fences_fence_id_seq",
    "policy pgflow.runs.runs_read",
    "row security pgflow.deps",
    "row security pgflow.steps",
  ], drift.join("\n"));
});

pgmqOnly.test("a drift is reported with the object's name", async ({ url }) => {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(`create schema drift_a; create schema drift_b;
      create table drift_a.t (id int primary key, note text);
      create table drift_b.t (id int primary key, note varchar(10));
      create function drift_a.f() returns int language sql as 'select 1';`).simple();
    const a = await catalogSnapshot(sql, "drift_a");
    const b = await catalogSnapshot(sql, "drift_b");
    const renamed = new Map([...b].map(([k, v]) => [k.replace("drift_b.", "drift_a."), v]));
    const drift = diffCatalogs(a, renamed, "schemas", "migrations");
    assert.ok(drift.some((d) => d.startsWith("column drift_a.t.note: differs")), drift.join("\n"));
    assert.ok(
      drift.some((d) => d.startsWith("function drift_a.f(): only in schemas")),
      drift.join("\n"),
    );
  } finally {
    await sql.end();
  }
});

// One kind of change at a time: two schemas built alike, the change made in one only; the drift
// must be exactly that one object, named. `S` stands for the schema's name.
const BASE = `
  create type S.e as enum ('a');
  create table S.t (id int generated by default as identity primary key, note text);
  create sequence S.seq;
  create function S.f() returns int language sql as 'select 1';
  create policy base on S.t for select using (true);`;

const KINDS: [string, string, string][] = [
  ["table grant", "grant select on S.t to public", "grant table A.t: differs"],
  ["sequence grant", "grant usage on sequence S.seq to public", "grant sequence A.seq: differs"],
  [
    "column grant",
    "grant update (note) on S.t to public",
    "grant column A.t.note: only in schemas",
  ],
  ["schema grant", "grant usage on schema S to public", "grant schema A: differs"],
  ["type grant", "revoke usage on type S.e from public", "grant type A.e: differs"],
  [
    "function grant",
    "revoke execute on function S.f() from public",
    "grant function A.f(): differs",
  ],
  ["row level security", "alter table S.t enable row level security", "row security A.t: differs"],
  ["forced row security", "alter table S.t force row level security", "row security A.t: differs"],
  [
    "policy",
    "create policy p on S.t for update to public using (id > 0)",
    "policy A.t.p: only in schemas",
  ],
  ["policy condition", "alter policy base on S.t using (id > 1)", "policy A.t.base: differs"],
  [
    "default privileges",
    "alter default privileges in schema S grant select on tables to public",
    "default privileges in schema A for role USER on tables: only in schemas",
  ],
  ["schema comment", "comment on schema S is 'x'", "comment schema A: only in schemas"],
  ["table comment", "comment on table S.t is 'x'", "comment table A.t: only in schemas"],
  [
    "column comment",
    "comment on column S.t.note is 'x'",
    "comment column A.t.note: only in schemas",
  ],
  [
    "function comment",
    "comment on function S.f() is 'x'",
    "comment function A.f(): only in schemas",
  ],
  [
    "sequence comment",
    "comment on sequence S.seq is 'x'",
    "comment sequence A.seq: only in schemas",
  ],
  ["type comment", "comment on type S.e is 'x'", "comment type A.e: only in schemas"],
  [
    "constraint comment",
    "comment on constraint t_pkey on S.t is 'x'",
    "comment constraint A.t.t_pkey: only in schemas",
  ],
  [
    "policy comment",
    "comment on policy base on S.t is 'x'",
    "comment policy A.t.base: only in schemas",
  ],
];

KINDS.forEach(([kind, change, expected], i) => {
  pgmqOnly.test(`a ${kind} made on one side only is reported with the object's name`, async ({ sql }) => {
    const a = `drift_kind_${i}_a`;
    const b = `drift_kind_${i}_b`;
    await sql.unsafe(`create schema ${a}; create schema ${b};
      ${BASE.replaceAll("S.", `${a}.`)}
      ${BASE.replaceAll("S.", `${b}.`)}`).simple();
    try {
      const [{ user }] = await sql<{ user: string }[]>`select current_user as user`;
      const before = diffCatalogs(
        await catalogSnapshot(sql, a),
        renamed(await catalogSnapshot(sql, b), b, a),
        "schemas",
        "migrations",
      );
      assert.deepEqual(before, [], "built alike, no drift");
      await sql.unsafe(change.replace(/\bS\b/, a)).simple();
      const drift = diffCatalogs(
        await catalogSnapshot(sql, a),
        renamed(await catalogSnapshot(sql, b), b, a),
        "schemas",
        "migrations",
      );
      assert.deepEqual(
        drift.map((d) => d.split("\n")[0]),
        [expected.replace(/\bA\b/, a).replace("USER", user)],
        drift.join("\n"),
      );
    } finally {
      await sql.unsafe(`drop schema ${a} cascade; drop schema ${b} cascade`).simple();
    }
  });
});

/** `snapshot` with schema name `from` replaced by `to` in keys and definitions. */
function renamed(snapshot: CatalogSnapshot, from: string, to: string): CatalogSnapshot {
  const re = new RegExp(`\\b${from}\\b`, "g");
  return new Map([...snapshot].map(([k, v]) => [k.replace(re, to), v.replace(re, to)]));
}
