/**
 * `pgflow status`: one screen with the engine version, queues with depth and live workers, runs by
 * status and the coverage verdict; exit 1 when the schema is missing or another version, or a
 * (flow, step) pair has no live worker. Bad flags and a role without privileges say what to do.
 */
import assert from "node:assert/strict";
import { ENGINE_VERSION } from "../../src/util/version.ts";
import { defineFlow } from "../support/engine.ts";
import { testDatabase } from "../support/db.ts";
import { databaseState, runCli, shown } from "./helpers.ts";
import { compileNow } from "./deploy_helpers.ts";
import { Flow } from "../../mod.ts";
import { limitedFlow } from "../support/flow_control.ts";

const db = testDatabase(import.meta.url);
const empty = testDatabase(import.meta.url, { template: "empty" });

db.test("status shows queues, workers, runs and coverage; exit 1 until every pair is served", async ({ sql, url }) => {
  await defineFlow(sql, "status_v1", [
    { slug: "classify", queue: "status_work" },
    { slug: "deliver", deps: ["classify"], queue: "status_delivery" },
  ], { mode: "routed" });
  for (let i = 0; i < 3; i++) {
    await sql`select pgflow.start_flow('status_v1', ${sql.json({ i })})`;
  }
  const before = await databaseState(url);
  const first = await runCli(["status", "--database-url", url]);
  assert.equal(first.code, 1, shown(first));
  const out = first.stdout;
  assert.match(
    out,
    new RegExp(
      `^engine\\s+${ENGINE_VERSION} \\(\\d+ migrations; this CLI: ${ENGINE_VERSION}\\); local development: off$`,
      "m",
    ),
  );
  assert.match(out, /^queues\s+queue\s+messages\s+visible\s+oldest\s+live workers$/m);
  assert.match(out, /^\s+status_delivery\s+0\s+0\s+-\s+0$/m);
  assert.match(out, /^\s+status_work\s+3\s+3\s+\d+ s\s+0$/m);
  assert.match(out, /^runs\s+started 3$/m);
  assert.match(
    out,
    /^coverage\s+INCOMPLETE: work is waiting with no live worker for 1 of 2 pair\(s\) \(status_work: status_v1\.classify\); 0 ok, 1 idle, 0 PARTIAL, 0 STALE, 1 MISSING; see `pgflow coverage`/m,
  );
  assert.deepEqual(await databaseState(url), before, "status changes nothing");

  for (const [queue, step] of [["status_work", "classify"], ["status_delivery", "deliver"]]) {
    await sql`select pgflow.register_worker(${crypto.randomUUID()}::uuid, ${queue}, 'status_fn',
                                            ${JSON.stringify([["status_v1", step]])}::text::jsonb)`;
  }
  const served = await runCli(["status"], { env: { DATABASE_URL: url } });
  assert.equal(served.code, 0, shown(served));
  assert.match(served.stdout, /^\s+status_work\s+3\s+3\s+\d+ s\s+1$/m);
  assert.match(
    served.stdout,
    /^coverage\s+complete: no work waits without a live worker \(2 ok, 0 idle, 0 PARTIAL, 0 STALE, 0 MISSING\)$/m,
  );

  const coverage = await runCli(["coverage", "--database-url", url, "--queue", "status_work"]);
  assert.equal(coverage.code, 0, shown(coverage));
  assert.match(coverage.stdout, /status_work\s+status_v1\s+classify\s+yes\s+3\s+0\s+0\s+1\s+ok/);

  // A second worker on status_work without the classify handler: the pair is PARTIAL, named.
  await sql`select pgflow.register_worker(${crypto.randomUUID()}::uuid, 'status_work', 'other_fn',
                                          '[]'::jsonb)`;
  const mixed = await runCli(["status", "--database-url", url]);
  assert.equal(mixed.code, 0, shown(mixed));
  assert.match(
    mixed.stdout,
    /^coverage\s+complete: .*\(1 ok, 0 idle, 1 PARTIAL, 0 STALE, 0 MISSING\); PARTIAL: status_work: status_v1\.classify \(not every live worker on the queue serves it/m,
  );
  const partial = await runCli(["coverage", "--database-url", url]);
  assert.equal(partial.code, 0, shown(partial));
  assert.match(
    partial.stdout,
    /status_work\s+status_v1\s+classify\s+yes\s+3\s+0\s+0\s+1\s+PARTIAL/,
  );
  assert.match(
    partial.stdout,
    /1 pair\(s\) PARTIAL: .*\(status_work: status_v1\.classify \(1 live worker\(s\) serve it\)\).*same handlers/,
  );
});

db.test("status lists tasks waiting for a concurrency limit per queue and key, with the oldest's wait and why; coverage counts them as work", async ({ sql, url }) => {
  const quiet = await runCli(["status", "--database-url", url]);
  assert.match(quiet.stdout, /^waiting\s+none \(no task waits for a concurrency limit\)$/m);
  await limitedFlow(sql, "status_cc", "status_cc_q", 1);
  for (const channel of ["C042", "C042", "C042", "C777"]) {
    await sql`select pgflow.start_flow('status_cc', ${sql.json({ channel })})`;
  }
  await sql`update pgflow.step_tasks set queued_at = queued_at - interval '90 seconds'
            where flow_slug = 'status_cc' and status = 'waiting'`;
  const r = await runCli(["status", "--database-url", url]);
  assert.match(r.stdout, /^waiting\s+queue\s+scope\s+key\s+tasks\s+oldest\s+why$/m);
  assert.match(
    r.stdout,
    /^\s+status_cc_q\s+status_cc\/s\s+C042\s+2\s+9\d s\s+concurrency status_cc\/s key C042: 1 of 1 in flight$/m,
  );
  assert.doesNotMatch(r.stdout, /C777/, "a key with nothing waiting is not listed");
  // Two released messages on the queue, two tasks waiting: four tasks of work, no live worker.
  assert.match(r.stdout, /^\s+status_cc_q\s+2\s+2\s/m);
  assert.match(r.stdout, /^coverage\s+INCOMPLETE: .*status_cc_q: status_cc\.s/m);
  const coverage = await runCli(["coverage", "--database-url", url, "--queue", "status_cc_q"]);
  assert.match(coverage.stdout, /status_cc_q\s+status_cc\s+s\s+yes\s+4\s+0\s+0\s+0\s+MISSING/);
});

db.test(
  "another engine version is a mismatch, exit 1, naming both and the fix",
  async ({ sql, url }) => {
    await sql`create or replace function pgflow.engine_version() returns text language sql as $$ select '0.0.9' $$`;
    const r = await runCli(["status", "--database-url", url]);
    assert.equal(r.code, 1, shown(r));
    assert.match(
      r.stdout,
      new RegExp(
        `engine\\s+0\\.0\\.9 \\(\\d+ migrations; this CLI: ${ENGINE_VERSION} — MISMATCH\\)`,
      ),
    );
    assert.match(r.stdout, /older than this code's engine .* Apply the migrations of/);
  },
  { fresh: true },
);

empty.test("a database without the engine: exit 1 with the commands to install it", async ({ url }) => {
  const r = await runCli(["status", "--database-url", url]);
  assert.equal(r.code, 1, shown(r));
  assert.match(r.stdout, /^engine\s+not installed — this database has no pgflow schema/m);
  assert.match(r.stdout, /cli install` then `supabase db push`/);
});

db.test("bad flags are usage errors; a role without privileges is told what to do", async ({ sql, url }) => {
  for (
    const [args, message] of [
      [["--stale-after", "0"], /--stale-after must be whole seconds from 1 to 86400, got "0"/],
      [["--stale-after", "soon"], /--stale-after must be whole seconds/],
      [["--queue", "x"], /unknown flag "--queue" for pgflow status/],
      [["--database-url"], /--database-url needs a value/],
    ] as const
  ) {
    const r = await runCli(["status", ...args], { env: { DATABASE_URL: url } });
    assert.equal(r.code, 2, shown(r));
    assert.match(r.stderr, message);
  }
  for (
    const [args, code, message] of [
      [["--verbose"], 2, /unknown flag "--verbose" for pgflow coverage/],
      [["--stale-after", "-1"], 2, /--stale-after must be whole seconds/],
      [["--database-url", "postgres://postgres@127.0.0.1:1/x"], 1, /connection refused/],
    ] as const
  ) {
    const r = await runCli(["coverage", ...args], { env: { DATABASE_URL: url } });
    assert.equal(r.code, code, shown(r));
    assert.match(r.stderr, message);
  }
  const refused = await runCli(["status", "--database-url", "postgres://postgres@127.0.0.1:1/x"]);
  assert.equal(refused.code, 1, shown(refused));
  assert.match(refused.stderr, /could not connect to 127\.0\.0\.1:1: connection refused/);
  const role = `t_nopriv_${crypto.randomUUID().slice(0, 8)}`;
  await sql.unsafe(`create role ${role} login`);
  try {
    const r = await runCli(["status", "--database-url", url.replace("//postgres@", `//${role}@`)]);
    assert.equal(r.code, 1, shown(r));
    assert.match(r.stderr, /could not read the status: permission denied for schema pgflow/);
    assert.match(r.stderr, /Connect as the role that owns the pgflow schema/);
  } finally {
    await sql.unsafe(`drop role ${role}`);
  }
});

Deno.test("every command has --help; an unknown command is a usage error", async () => {
  for (
    const command of [
      ["init"],
      ["install"],
      ["migrate"],
      ["db"],
      ["db", "start"],
      ["status"],
      ["coverage"],
      ["compile"],
      ["plan"],
      ["runs"],
      ["aliases"],
      ["queues"],
    ]
  ) {
    const r = await runCli([...command, "--help"]);
    assert.equal(r.code, 0, shown(r));
    assert.match(r.stdout, new RegExp(`^pgflow ${command[0]}`), shown(r));
    assert.match(r.stdout, /Exit codes: 0/);
  }
  const top = await runCli(["--help"]);
  assert.equal(top.code, 0);
  assert.match(top.stdout, /commands:\n\s+init/);
  const none = await runCli([]);
  assert.equal(none.code, 2);
  const unknown = await runCli(["instal"]);
  assert.equal(unknown.code, 2, shown(unknown));
  assert.match(
    unknown.stderr,
    /unknown command "instal"; the commands are init, install, migrate, db, status, coverage/,
  );
});

db.test("status lists each alias, the version it starts and its other versions", async ({ sql, url }) => {
  const none = await runCli(["status", "--database-url", url]);
  assert.match(none.stdout, /^aliases\s+none$/m, shown(none));
  await compileNow(
    sql,
    new Flow({ slug: "st_triage_v1", alias: "st_triage" }).step({ slug: "a" }, () => 1),
    new Flow({ slug: "st_triage_v2", alias: "st_triage" }).step({ slug: "a" }, () => 1)
      .step({ slug: "b", dependsOn: ["a"] }, () => 2),
    new Flow({ slug: "st_billing_v1", alias: "st_billing" }).step({ slug: "a" }, () => 1),
  );
  const out = await runCli(["status", "--database-url", url]);
  assert.match(
    out.stdout,
    /^aliases\s+st_billing → st_billing_v1\n\s+st_triage → st_triage_v1 \(other versions: st_triage_v2\)$/m,
    shown(out),
  );
});
