/**
 * The declarative schema (`supabase/schemas/`) is the source of truth: the migrations, applied in
 * order, must produce exactly the same catalog, privileges and comments included, and a
 * difference is reported as a short line diff. The test run's template build refuses to start on
 * drift. Every test builds what it compares itself; none depends on another having run.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { type CatalogSnapshot, catalogSnapshot, diffCatalogs } from "../../local/catalog.ts";
import { driftReport, schemaDrift, SCHEMAS_DIR } from "../../local/drift.ts";
import { MIGRATIONS_DIR } from "../../local/db_push.ts";
import { serverUrl, testDatabase } from "../support/db.ts";
import { prepareTemplates, TEMPLATES } from "../support/templates.ts";

const pgmqOnly = testDatabase(import.meta.url, { template: "pgmq" });

/** A copy of the schema folder, `edit` applied to `file` (a new file when there is none). */
async function schemasCopy(file: string, edit: (text: string) => string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-schemas-" });
  for await (const entry of Deno.readDir(SCHEMAS_DIR)) {
    if (entry.isFile) await Deno.copyFile(`${SCHEMAS_DIR}${entry.name}`, `${dir}/${entry.name}`);
  }
  const before = await Deno.readTextFile(`${dir}/${file}`).catch(() => "");
  const after = edit(before);
  assert.notEqual(after, before, `the edit changes ${file}`);
  await Deno.writeTextFile(`${dir}/${file}`, after);
  return dir;
}

/** The drift between the real migrations (the test template) and an edited copy of the schemas. */
async function driftWith(file: string, edit: (text: string) => string): Promise<string[]> {
  const dir = await schemasCopy(file, edit);
  try {
    return await schemaDrift({
      serverUrl: serverUrl(),
      schemasDir: dir,
      pgmqTemplate: TEMPLATES.pgmq,
      migratedTemplate: TEMPLATES.pgflow,
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The drift between the real migrations and the schema files plus `extra`, applied last. */
const driftWithSchemaFile = (extra: string) => driftWith("9999_drift.sql", () => extra);

const retention = (text: string) => {
  assert.ok(text.includes("interval '7 days')"));
  return text.replace("interval '7 days')", "interval '14 days')");
};

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
  const drift = await schemaDrift({ serverUrl: serverUrl(), pgmqTemplate: TEMPLATES.pgmq });
  assert.deepEqual(drift, [], `schema drift:\n${drift.join("\n")}`);
});

Deno.test("a one-word change in a function is reported as a line diff of that line", async () => {
  const drift = await driftWith("0610_worker_retention.sql", retention);
  assert.equal(drift.length, 1, drift.join("\n"));
  const lines = drift[0].split("\n");
  assert.equal(lines[0], "function pgflow.worker_retention(): differs");
  assert.deepEqual(lines.slice(1, 3), ["  --- migrations", "  +++ schemas"]);
  assert.deepEqual(
    lines.filter((l) => /^ {2}[-+] /.test(l)).map((l) => l.replace(/\s+/g, " ").trim()),
    ["- interval '7 days')", "+ interval '14 days')"],
  );
  assert.ok(lines.length <= 10, `short: ${lines.length} lines\n${drift[0]}`);
});

Deno.test("the template build refuses on drift, before any test, naming the command", async () => {
  const dir = await schemasCopy("0610_worker_retention.sql", retention);
  const id = crypto.randomUUID().slice(0, 8);
  const names = { pgmq: `t_tpl_drift_pgmq_${id}`, pgflow: `t_tpl_drift_${id}` };
  try {
    await assert.rejects(
      () => prepareTemplates(serverUrl(), { names, schemasDir: dir }),
      (err: Error) => {
        assert.match(
          err.message,
          /^no test ran: supabase\/schemas\/ and supabase\/migrations\/ build different databases \(1 object\(s\) differ\): run deno task migration:baseline/,
        );
        assert.match(err.message, /\n {2}\+ +interval '14 days'\)/);
        return true;
      },
    );
    // The same build from the schema files as they are succeeds.
    await prepareTemplates(serverUrl(), { names });
  } finally {
    await Deno.remove(dir, { recursive: true });
    const admin = postgres(serverUrl(), { max: 1, onnotice: () => {} });
    try {
      for (const name of [names.pgflow, names.pgmq]) {
        await admin.unsafe(`drop database if exists ${name} with (force)`);
      }
    } finally {
      await admin.end();
    }
  }
});

Deno.test("once later migrations exist, the drift report names migration:new", async () => {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-migrations-" });
  try {
    for (const e of Deno.readDirSync(MIGRATIONS_DIR)) {
      await Deno.copyFile(`${MIGRATIONS_DIR}${e.name}`, `${dir}/${e.name}`);
    }
    assert.match(await driftReport(["x: only in schemas"], dir), /migration:baseline/);
    await Deno.writeTextFile(`${dir}/29990101000000_pgflow_next.sql`, "select 1;\n");
    const report = await driftReport(["x: only in schemas"], dir);
    assert.match(report, /run deno task migration:new <name>/);
    assert.doesNotMatch(report, /migration:baseline/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
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
    revoke execute on function pgflow.start_flow(text, jsonb, uuid, integer, text) from service_role;
    alter table pgflow.steps enable row level security;
    alter table pgflow.deps force row level security;
    create policy runs_read on pgflow.runs for select to service_role using (true);
    alter default privileges in schema pgflow grant select on tables to service_role;
    comment on schema pgflow is 'workflows';
    comment on table pgflow.flows is 'flow definitions';
    comment on column pgflow.flows.flow_slug is 'the concrete slug';
    comment on function pgflow.start_flow(text, jsonb, uuid, integer, text) is 'starts a run';
    comment on constraint flows_pkey on pgflow.flows is 'one row per slug';
    comment on policy runs_read on pgflow.runs is 'service_role reads runs';
  `);
  const user = await currentUser();
  assert.deepEqual(drift.map(keyOf), [
    "comment column pgflow.flows.flow_slug",
    "comment constraint pgflow.flows.flows_pkey",
    "comment function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid, priority integer, traceparent text)",
    "comment policy pgflow.runs.runs_read",
    "comment schema pgflow",
    "comment table pgflow.flows",
    `default privileges in schema pgflow for role ${user} on tables`,
    "grant column pgflow.runs.status",
    "grant function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid, priority integer, traceparent text)",
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
