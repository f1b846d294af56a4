/**
 * `pgflow plan <module>`: what deploying a module's flows would do (create, verified, refused with
 * the differences or the database's error, queues to create, collisions), without changing
 * anything, as text and JSON, with CI exit codes; a module that does not load or exports no flow
 * is a one-line error naming it; it works through PgBouncer in transaction mode.
 */
import assert from "node:assert/strict";
import { Flow, routeFlow } from "../../mod.ts";
import { startPgBouncer } from "../../local/pgbouncer.ts";
import { testDatabase } from "../support/db.ts";
import { databaseState, runCli, shown } from "./helpers.ts";
import { compileNow, flowsModule } from "./deploy_helpers.ts";
import { SECRET } from "../platform/bad_urls.ts";

const db = testDatabase(import.meta.url);

const MODULE = `
const v1 = new Flow({ slug: "pl_v1" }).step({ slug: "a" }, () => 1);
export const routedV1 = routeFlow(v1, { queues: { a: "pl_work" } });
export { v1 };
const v2 = new Flow({ slug: "pl_v2" }).step({ slug: "a" }, () => 1)
  .step({ slug: "b", dependsOn: ["a"] }, () => 2);
export const all = [routeFlow(v2, { queues: { a: "pl_work", b: "pl_new" } })];
export const plain = new Flow({ slug: "pl_plain" }).step({ slug: "a" }, () => 1);
export const clash = routeFlow(new Flow({ slug: "pl_clash" }).step({ slug: "a" }, () => 1),
  { queues: { a: "pl_external" } });
export const changed = new Flow({ slug: "pl_changed", timeout: 30 }).step({ slug: "a" }, () => 1)
  .step({ slug: "b", dependsOn: ["a"] }, () => 2);
export const drift = new Flow({ slug: "pl_drift", timeout: 90 }).step({ slug: "a" }, () => 1);
export const notAFlow = { slug: "nope" };
`;

async function prepare(sql: Parameters<typeof compileNow>[0]) {
  await compileNow(
    sql,
    routeFlow(new Flow({ slug: "pl_v1" }).step({ slug: "a" }, () => 1), {
      queues: { a: "pl_work" },
    }),
    new Flow({ slug: "pl_changed", timeout: 30 }).step({ slug: "a" }, () => 1),
    new Flow({ slug: "pl_drift", timeout: 60 }).step({ slug: "a" }, () => 1),
  );
  await sql`select pgmq.create('pl_external')`;
}

db.test("plan: create, verified, refused, queues and collisions; changes nothing; exit 1 when refused", async ({ sql, url }) => {
  await prepare(sql);
  const module = await flowsModule(MODULE);
  const before = await databaseState(url);

  const text = await runCli(["plan", module, "--database-url", url]);
  assert.equal(text.code, 1, shown(text));
  const out = text.stdout;
  assert.match(out, /^plan for .*flows\.ts on postgres:\/\/.* \(direct\); nothing was changed$/m);
  assert.match(
    out,
    /^ {2}verified\s+pl_v1\s+routed\s+export routedV1\s+queues: pl_work \(reuse\)$/m,
  );
  assert.match(
    out,
    /^ {2}create\s+pl_v2\s+routed\s+export all\[0\]\s+queues: pl_work \(reuse\), pl_new \(create\)$/m,
  );
  assert.match(out, /^ {2}create\s+pl_plain\s+flow\s+export plain\s+queues: pl_plain \(create\)$/m);
  assert.match(
    out,
    /^ {2}REFUSED\s+pl_clash\s+routed\s+export clash\s+queues: pl_external \(collision\)$/m,
  );
  assert.match(out, /^ {6}flow pl_clash: queue pl_external is an external queue .*\[55000\]$/m);
  assert.match(
    out,
    /^ {2}REFUSED\s+pl_changed\s+flow\s+export changed\s+queues:|^ {2}REFUSED\s+pl_changed\s+flow\s+export changed$/m,
  );
  assert.match(out, /^ {6}changed under an existing slug; deploy it as a new slug/m);
  assert.match(out, /^ {8}.*\bb\b/m, "the difference names the added step");
  assert.match(out, /^ {2}verified\s+pl_drift\s+flow\s+export drift/m);
  assert.match(out, /^ {6}flow timeout: stored 60, supplied 90; the stored value stays/m);
  assert.match(out, /^shared queues to create\s+pl_new$/m);
  assert.match(out, /^queues to create\s+pl_plain$/m);
  assert.match(out, /^collisions\s+pl_external \(wanted by pl_clash\)$/m);
  assert.match(
    out,
    /^result\s+2 to create, 2 verified, 2 refused: a deploy would be refused \(exit 1\)$/m,
  );
  assert.doesNotMatch(out, /nope|notAFlow/);
  assert.doesNotMatch(
    out,
    /export v1\b/,
    "the plain flow of a routed export is not a second definition",
  );
  assert.deepEqual(await databaseState(url), before, "plan changes nothing");

  const json = await runCli(["plan", module, "--database-url", url, "--json"]);
  assert.equal(json.code, 1, shown(json));
  const found = JSON.parse(json.stdout);
  assert.deepEqual(found.counts, { create: 2, verified: 2, refused: 2, recompile: 0 });
  assert.deepEqual(found.sharedQueuesToCreate, ["pl_new"]);
  assert.deepEqual(found.queuesToCreate, ["pl_plain"]);
  assert.equal(found.collisions[0].queue, "pl_external");
  assert.equal(found.exitCode, 1);
  const changed = found.flows.find((f: { slug: string }) => f.slug === "pl_changed");
  assert.equal(changed.verdict, "refused");
  assert.ok(changed.differences.length > 0, json.stdout);
  assert.deepEqual(await databaseState(url), before, "plan --json changes nothing");

  // Only additions and verifications: exit 0 (--flow takes slugs and export names).
  const additions = await runCli([
    "plan",
    module,
    "--database-url",
    url,
    "--flow",
    "pl_v1",
    "--flow",
    "all[0]",
    "--flow",
    "plain",
  ]);
  assert.equal(additions.code, 0, shown(additions));
  assert.match(
    additions.stdout,
    /^result\s+2 to create, 1 verified, 0 refused: a deploy would only add or verify \(exit 0\)$/m,
  );
  assert.deepEqual(await databaseState(url), before);
});

db.test("plan: a module that is missing, does not load or exports no flow is a one-line error", async ({ url }) => {
  const none = await runCli(["plan", "--database-url", url]);
  assert.equal(none.code, 2, shown(none));
  assert.match(none.stderr, /^pgflow: error: pgflow plan needs the module that exports your flows/);

  for (const command of ["plan", "compile"]) {
    const badUrl = await runCli([
      command,
      "./x.ts",
      "--database-url",
      "postgres://u:PLAN_SECRET@h:port/d",
    ]);
    assert.equal(badUrl.code, 2, shown(badUrl));
    assert.match(badUrl.stderr, /^pgflow: error: --database-url [^\n]*\n$/, shown(badUrl));
    assert.doesNotMatch(badUrl.stderr + badUrl.stdout, /PLAN_SECRET/);
  }

  const missing = await runCli(["plan", "./no/such/flows.ts", "--database-url", url]);
  assert.equal(missing.code, 2, shown(missing));
  assert.match(missing.stderr, /^pgflow: error: module \.\/no\/such\/flows\.ts not found/);

  const broken = await flowsModule(`throw new Error("no FLOW_SECRET here\\nsecond line");`);
  const thrown = await runCli(["plan", broken, "--database-url", url]);
  assert.equal(thrown.code, 1, shown(thrown));
  assert.equal(thrown.stderr.trim().split("\n").length, 1, shown(thrown));
  assert.match(thrown.stderr, /module .*flows\.ts does not load: .*no FLOW_SECRET here$/m);

  // A module that fails on a malformed database URL: Deno's error echoes it, password and all
  // (with a space or an "@" in it, too, and in the error's cause); none is printed.
  for (
    const body of [
      `new URL("postgres://deployer:s3cret-pw@db.example.com:99999/app");`,
      `new URL("postgres://deployer:s3cr et@db.example.com:99999/app");`,
      `new URL("postgres://deployer:s3cr@t@db.example.com:99999/app");`,
      `try { new URL("postgres://deployer:s3cr et@db:99999/app"); } catch (e) {
         throw new Error("could not open the database", { cause: e });
       }`,
      `throw "bad url postgres://deployer:s3cret@db:99999/app";`,
    ]
  ) {
    const module = await flowsModule(body);
    for (const command of ["plan", "compile"]) {
      const run = await runCli([command, module, "--database-url", url]);
      assert.equal(run.code, 1, shown(run));
      assert.match(
        run.stderr,
        /^pgflow: error: module .*flows\.ts does not load: .*postgres:\/\/deployer:\*\*\*@db/m,
        shown(run),
      );
      assert.doesNotMatch(run.stderr + run.stdout, SECRET, `${command}: ${body}`);
    }
  }

  const empty = await flowsModule(`export const x = 1;`);
  const noFlow = await runCli(["plan", empty, "--database-url", url]);
  assert.equal(noFlow.code, 1, shown(noFlow));
  assert.match(
    noFlow.stderr,
    /^pgflow: error: module .*flows\.ts exports no flow: export each Flow/,
  );

  const twice = await flowsModule(`
    export const a = new Flow({ slug: "pl_twice" }).step({ slug: "a" }, () => 1);
    export const b = new Flow({ slug: "pl_twice" }).step({ slug: "b" }, () => 1);`);
  const dup = await runCli(["plan", twice, "--database-url", url]);
  assert.equal(dup.code, 1, shown(dup));
  assert.match(dup.stderr, /exports different definitions of flow pl_twice \(export a, export b\)/);
  const picked = await runCli(["plan", twice, "--database-url", url, "--flow", "b"]);
  assert.equal(picked.code, 0, shown(picked));

  const unknown = await runCli(["plan", twice, "--database-url", url, "--flow", "zzz"]);
  assert.equal(unknown.code, 2, shown(unknown));
  assert.match(
    unknown.stderr,
    /--flow "zzz" is not a flow of .*; its flows are pl_twice \(export a\)/,
  );
});

db.test("plan and compile work through PgBouncer in transaction mode", async ({ sql, url }) => {
  const bouncer = await startPgBouncer({
    serverPort: Number(new URL(url).port),
    mode: "transaction",
  });
  try {
    const pooled = bouncer.via(url);
    const module = await flowsModule(`
      export const one = routeFlow(new Flow({ slug: "pb_one" }).step({ slug: "a" }, () => 1),
        { queues: { a: "pb_work" } });
      export const two = new Flow({ slug: "pb_two" }).step({ slug: "a" }, () => 1);`);
    const before = await databaseState(url);
    const planned = await runCli(["plan", module, "--database-url", pooled]);
    assert.equal(planned.code, 0, shown(planned));
    assert.match(
      planned.stdout,
      /^ {2}create\s+pb_one\s+routed\s+export one\s+queues: pb_work \(create\)$/m,
    );
    assert.match(
      planned.stdout,
      /^ {2}create\s+pb_two\s+flow\s+export two\s+queues: pb_two \(create\)$/m,
    );
    assert.deepEqual(await databaseState(url), before, "plan through the pooler changes nothing");

    const compiled = await runCli(["compile", module, "--database-url", pooled]);
    assert.equal(compiled.code, 0, shown(compiled));
    assert.match(compiled.stdout, /^compiled\s+pb_one$/m);
    const [{ n }] = await sql<{ n: number }[]>`
      select count(*)::int as n from pgflow.flows where flow_slug in ('pb_one', 'pb_two')`;
    assert.equal(n, 2);

    const again = await runCli(["plan", module, "--database-url", pooled, "--json"]);
    assert.equal(again.code, 0, shown(again));
    assert.deepEqual(JSON.parse(again.stdout).counts, {
      create: 0,
      verified: 2,
      refused: 0,
      recompile: 0,
    });
  } finally {
    await bouncer.destroy();
  }
});

db.test("plan shows the aliases a deploy would create and where existing ones stay", async ({ sql, url }) => {
  await compileNow(
    sql,
    new Flow({ slug: "al_v1", alias: "al_triage" }).step({ slug: "a" }, () => 1),
  );
  const module = await flowsModule(`
    export const v1 = new Flow({ slug: "al_v1", alias: "al_triage" }).step({ slug: "a" }, () => 1);
    export const v2 = new Flow({ slug: "al_v2", alias: "al_triage" }).step({ slug: "a" }, () => 1)
      .step({ slug: "b", dependsOn: ["a"] }, () => 2);
    export const fresh = routeFlow(
      new Flow({ slug: "al_fresh_v1", alias: "al_fresh" }).step({ slug: "a" }, () => 1),
      { queues: { a: "al_work" } });
    export const plain = new Flow({ slug: "al_plain" }).step({ slug: "a" }, () => 1);`);
  const before = await databaseState(url);
  const text = await runCli(["plan", module, "--database-url", url]);
  assert.equal(text.code, 0, shown(text));
  assert.match(
    text.stdout,
    /^ {2}create\s+al_v2\s+flow\s+export v2\s+queues: al_v2 \(create\)\s+alias: al_triage \(exists\)$/m,
  );
  assert.match(text.stdout, /^ {2}verified\s+al_v1\s+.*alias: al_triage \(exists\)$/m);
  assert.match(text.stdout, /^ {2}create\s+al_fresh_v1\s+.*alias: al_fresh \(create\)$/m);
  assert.match(
    text.stdout,
    /^ {2}create\s+al_plain\s+flow\s+export plain\s+queues: al_plain \(create\)$/m,
  );
  assert.match(
    text.stdout,
    /^aliases\s+al_fresh → al_fresh_v1 \(create\); al_triage → al_v1 \(exists; a deploy never moves it: pgflow\.activate_alias does; versions here: al_v1, al_v2\)$/m,
  );
  const json = JSON.parse((await runCli(["plan", module, "--database-url", url, "--json"])).stdout);
  assert.deepEqual(json.aliases, [
    { alias: "al_fresh", action: "create", target: "al_fresh_v1", flows: ["al_fresh_v1"] },
    { alias: "al_triage", action: "exists", target: "al_v1", flows: ["al_v1", "al_v2"] },
  ]);
  assert.deepEqual(await databaseState(url), before, "plan changes nothing");

  // A compiled flow given another alias is refused, naming both (the SQL's words).
  const moved = await flowsModule(`
    export const v1 = new Flow({ slug: "al_v1", alias: "al_other" }).step({ slug: "a" }, () => 1);`);
  const refused = await runCli(["plan", moved, "--database-url", url]);
  assert.equal(refused.code, 1, shown(refused));
  assert.match(refused.stdout, /^ {2}REFUSED\s+al_v1\b/m);
  assert.match(refused.stdout, /al_triage/);
  assert.match(refused.stdout, /al_other/);

  const compiled = await runCli(["compile", module, "--database-url", url]);
  assert.equal(compiled.code, 0, shown(compiled));
  const aliases = await sql<{ alias: string; flow_slug: string }[]>`
    select alias, flow_slug from pgflow.aliases order by alias`;
  assert.deepEqual(aliases.map((a) => [a.alias, a.flow_slug]), [
    ["al_fresh", "al_fresh_v1"],
    ["al_triage", "al_v1"],
  ]);
});
