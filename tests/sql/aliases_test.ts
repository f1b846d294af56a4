/**
 * Aliases: the first compile of a version creates its alias, later versions never move it, an
 * operator moves it with a compare-and-swap that checks coverage, start_flow starts its target and
 * records the alias; and fail_task's fail_run for an input that fails its schema.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { Flow } from "../../src/dsl/flow.ts";
import { routeFlow } from "../../src/routing/route_flow.ts";
import { extractFlowShape, extractRoutePlan } from "../../src/compile/shape.ts";
import { type Blocked, sendBlocked } from "../support/blocked.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

function version(slug: string, alias: string | undefined = "al_triage") {
  const flow = new Flow<{ n: number }>({ slug, ...(alias === undefined ? {} : { alias }) })
    .step({ slug: "classify" }, (i) => i.n)
    .step({ slug: "deliver", dependsOn: ["classify"] }, (d) => d.classify);
  return routeFlow(flow, { queues: { classify: "al_work", deliver: "al_slack" } });
}

async function alias(sql: Sql, name: string) {
  const rows = await sql`select a from pgflow.list_aliases() a where a ->> 'alias' = ${name}`;
  return rows[0]?.a;
}

db.test("the first version creates its alias, a later one never moves it; start_flow starts the target through the alias", async ({ sql }) => {
  assert.equal((await compileFlow(sql, version("al_v1"))).status, "compiled");
  assert.equal((await compileFlow(sql, version("al_v2"))).status, "compiled");
  const a = await alias(sql, "al_triage");
  assert.deepEqual([a.flow_slug, a.versions], ["al_v1", ["al_v1", "al_v2"]]);
  const [run] = await sql`select * from pgflow.start_flow('al_triage', '{"n": 1}')`;
  assert.deepEqual([run.flow_slug, run.started_as], ["al_v1", "al_triage"]);
  const [direct] = await sql`select * from pgflow.start_flow('al_v2', '{"n": 2}')`;
  assert.deepEqual([direct.flow_slug, direct.started_as], ["al_v2", null]);
  const [{ doc }] = await sql`select pgflow.get_run(${run.run_id}) as doc`;
  assert.equal(doc.started_as, "al_triage");
  // Idempotent starts behave as before.
  const id = crypto.randomUUID();
  await sql`select pgflow.start_flow('al_triage', '{}', ${id}::uuid)`;
  await assert.rejects(
    sql`select pgflow.start_flow('al_triage', '{}', ${id}::uuid)`,
    /already exists/,
  );
});

db.test("activate_alias: compare-and-swap, coverage checked (or forced), every activation recorded", async ({ sql }) => {
  await compileFlow(sql, version("ac_v1", "ac_triage"));
  await compileFlow(sql, version("ac_v2", "ac_triage"));
  await compileFlow(sql, version("ac_other", "ac_elsewhere"));
  // No worker serves v2: refused, naming the pairs, nothing changed.
  await assert.rejects(
    sql`select pgflow.activate_alias('ac_triage', 'ac_v1', 'ac_v2')`,
    (e: { code?: string; message: string }) =>
      e.code === "55000" &&
      /no live worker serves ac_v2\/deliver on al_slack, ac_v2\/classify on al_work of ac_v2/.test(
        e.message,
      ),
  );
  assert.equal((await alias(sql, "ac_triage")).flow_slug, "ac_v1");
  // Workers of v2 on both queues: it goes through.
  for (const [queue, step] of [["al_work", "classify"], ["al_slack", "deliver"]]) {
    await sql`select pgflow.register_worker(${crypto.randomUUID()}, ${queue}, 'fn',
                                            ${sql.json([["ac_v2", step]])})`;
  }
  const [{ moved }] =
    await sql`select pgflow.activate_alias('ac_triage', 'ac_v1', 'ac_v2') as moved`;
  assert.deepEqual(moved, {
    alias: "ac_triage",
    from: "ac_v1",
    to: "ac_v2",
    forced: false,
    uncovered: [],
  });
  const [run] = await sql`select * from pgflow.start_flow('ac_triage', '{"n": 1}')`;
  assert.equal(run.flow_slug, "ac_v2");
  // A stale expectation loses: 40001, nothing changed.
  await assert.rejects(
    sql`select pgflow.activate_alias('ac_triage', 'ac_v1', 'ac_v1', true)`,
    (e: { code?: string; message: string }) =>
      e.code === "40001" && /points at ac_v2, not ac_v1: another activation won/.test(e.message),
  );
  // Back to v1 (no worker serves it): only forced, recorded with what was not covered.
  const [{ back }] =
    await sql`select pgflow.activate_alias('ac_triage', 'ac_v2', 'ac_v1', true) as back`;
  assert.equal(back.forced, true);
  assert.equal(back.uncovered.length, 2);
  await assert.rejects(
    sql`select pgflow.activate_alias('ac_triage', 'ac_v1', 'ac_other')`,
    (e: { code?: string; message: string }) =>
      e.code === "22023" && /ac_other is not a compiled version of it/.test(e.message),
  );
  await assert.rejects(
    sql`select pgflow.activate_alias('nope', 'ac_v1', 'ac_v2')`,
    (e: { code?: string }) => e.code === "P0002",
  );
  const log =
    await sql`select from_slug, to_slug, forced, activated_by, jsonb_array_length(uncovered) as n
                        from pgflow.alias_activations where alias = 'ac_triage' order by activation_id`;
  assert.deepEqual(log.map((l) => [l.from_slug, l.to_slug, l.forced, l.n]), [
    ["ac_v1", "ac_v2", false, 0],
    ["ac_v2", "ac_v1", true, 2],
  ]);
  assert.equal(typeof log[0].activated_by, "string");
});

db.test("two activations racing from the same expectation: one wins, the other is told", async ({ sql, connect }) => {
  await compileFlow(sql, version("rc_v1", "rc_triage"));
  await compileFlow(sql, version("rc_v2", "rc_triage"));
  await compileFlow(sql, version("rc_v3", "rc_triage"));
  const a = connect({ max: 1 });
  const b = connect({ max: 1 });
  // Both calls are sent before either is awaited.
  const results = await Promise.allSettled([
    a`select pgflow.activate_alias('rc_triage', 'rc_v1', 'rc_v2', true) as r`.execute(),
    b`select pgflow.activate_alias('rc_triage', 'rc_v1', 'rc_v3', true) as r`.execute(),
  ]);
  const won = results.filter((r) => r.status === "fulfilled");
  const lost = results.filter((r) => r.status === "rejected") as PromiseRejectedResult[];
  assert.equal(won.length, 1);
  assert.equal(lost.length, 1);
  assert.equal(lost[0].reason.code, "40001");
  const target = (await alias(sql, "rc_triage")).flow_slug;
  assert.ok(["rc_v2", "rc_v3"].includes(target));
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.alias_activations where alias = 'rc_triage'`)[
      0
    ]
      .n,
    1,
  );
});

db.test("an alias is part of a version's definition, and no name is both an alias and another flow's slug", async ({ sql }) => {
  await compileFlow(sql, version("df_v1", "df_triage"));
  const changed = await compileFlow(sql, version("df_v1", "df_other"));
  assert.equal(changed.status, "mismatch");
  assert.deepEqual(changed.differences, ["alias: df_triage stored, df_other new"]);
  await compileFlow(sql, version("df_plain", undefined));
  await assert.rejects(
    compileFlow(sql, version("df_v2", "df_plain")),
    /alias df_plain is the slug of flow df_plain, which does not carry it/,
  );
  await assert.rejects(
    compileFlow(sql, version("df_triage", undefined)),
    /an alias of that name exists/,
  );
  // A flow may carry its own slug as its alias (a plain flow is its own alias).
  assert.equal((await compileFlow(sql, version("df_self", "df_self"))).status, "compiled");
  // A bad alias: the DSL refuses it, and so does SQL when a caller skips the DSL.
  assert.throws(
    () => version("df_v3", "Bad-Alias"),
    /alias of flow "df_v3" "Bad-Alias" is invalid/,
  );
  const good = version("df_v3", "df_fine");
  await assert.rejects(
    sql`select pgflow.ensure_flow_compiled('df_v3', ${sql.json(extractFlowShape(good) as never)},
          ${sql.json(extractRoutePlan(good) as never)}, '{}', 'Bad-Alias')`,
    /alias 'Bad-Alias' is not a valid slug/,
  );
});

db.test("fail_task with fail_run fails the run at once: no retry, no whenExhausted", async ({ sql }) => {
  await sql`select pgflow.create_flow('fr_flow', 3)`;
  await sql`select pgflow.add_step('fr_flow', 'a', when_exhausted => 'skip')`;
  const [run] = await sql`select run_id from pgflow.start_flow('fr_flow', '{"bad": true}')`;
  const worker = await registerWorker(sql, "fr_flow");
  const [t] = await readAndStart(sql, "fr_flow", worker, [["fr_flow", "a"]]);
  await sql`select pgflow.fail_task(${t.run_id}, 'a', 0, 'input failed its schema: n: Required',
                                    ${t.attempt}, null, true)`;
  const [r] = await sql`select status, error_message from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual({ ...r }, {
    status: "failed",
    error_message: "input failed its schema: n: Required",
  });
  const [task] =
    await sql`select status, attempts_count from pgflow.step_tasks where run_id = ${run.run_id}`;
  assert.deepEqual({ ...task }, { status: "failed", attempts_count: 1 });
  const [attempt] =
    await sql`select outcome from pgflow.task_attempts where run_id = ${run.run_id}`;
  assert.equal(attempt.outcome, "failed");
});

db.test("create_flow refuses a slug that is an alias's name, even racing the compile that creates the alias", async ({ sql, connect }) => {
  await compileFlow(sql, version("cn_v1", "cn_triage"));
  await assert.rejects(
    sql`select pgflow.create_flow('cn_triage')`,
    (e: { code?: string; message: string }) =>
      e.code === "23505" &&
      /flow cn_triage: an alias of that name exists \(alias cn_triage points at flow cn_v1\)/.test(
        e.message,
      ),
  );
  // A version may carry its own name as its alias.
  await sql`select pgflow.create_flow('cn_triage', alias => 'cn_triage')`;
  const [{ n }] =
    await sql`select count(*)::int as n from pgflow.flows where flow_slug = 'cn_triage'`;
  assert.equal(n, 1);
  const [run] = await sql`select * from pgflow.start_flow('cn_triage', '{"n": 1}')`;
  assert.equal(run.flow_slug, "cn_v1", "the alias still points at its first version");

  // A compile creating alias rc_name is open; create_flow('rc_name') waits for it, then refuses.
  let created: Blocked | undefined;
  await connect().begin(async (tx) => {
    await compileFlow(tx as unknown as Sql, version("rn_v1", "rn_name"));
    created = await sendBlocked(
      sql,
      connect(),
      (b) => b`select pgflow.create_flow('rn_name')`,
      "create_flow",
    );
  });
  assert.equal(await created!.outcome, "23505");
  assert.deepEqual(
    (await sql`select flow_slug from pgflow.flows where flow_slug like 'rn_%' order by 1`)
      .map((r) => r.flow_slug),
    ["rn_v1"],
  );
});

db.test("deleting an alias's target: refused while other versions carry the alias, the alias goes with its last version", async ({ sql, connect }) => {
  await compileFlow(sql, version("dl_v1", "dl_triage"));
  await compileFlow(sql, version("dl_v2", "dl_triage"));
  await assert.rejects(
    sql`select pgflow.delete_flow_and_data('dl_v1')`,
    (e: { code?: string; message: string; hint?: string }) =>
      e.code === "55000" &&
      e.message ===
        "flow dl_v1 is the target of alias dl_triage, which starts it; it was not deleted" &&
      (e.hint ?? "").includes("select pgflow.activate_alias('dl_triage', 'dl_v1', 'dl_v2')"),
  );
  // Another version is not the target: it goes, the alias stays.
  await sql`select pgflow.delete_flow_and_data('dl_v2')`;
  assert.deepEqual((await alias(sql, "dl_triage")).versions, ["dl_v1"]);
  // The last version takes the alias with it: a flow compiled later under its slug, without the
  // alias, is never started through it.
  await sql`select pgflow.delete_flow_and_data('dl_v1')`;
  assert.equal(await alias(sql, "dl_triage"), undefined);
  await compileFlow(sql, version("dl_v1", undefined));
  await assert.rejects(
    sql`select pgflow.start_flow('dl_triage', '{"n": 1}')`,
    /flow 'dl_triage' does not exist/,
  );

  // An activation onto a version is open; deleting that version waits for it and is then refused.
  await compileFlow(sql, version("dr_v1", "dr_triage"));
  await compileFlow(sql, version("dr_v2", "dr_triage"));
  let deleted: Blocked | undefined;
  await connect().begin(async (tx) => {
    await tx`select pgflow.activate_alias('dr_triage', 'dr_v1', 'dr_v2', true)`;
    deleted = await sendBlocked(
      sql,
      connect(),
      (b) => b`select pgflow.delete_flow_and_data('dr_v2')`,
      "the deletion",
    );
  });
  assert.equal(await deleted!.outcome, "55000");
  assert.equal((await alias(sql, "dr_triage")).flow_slug, "dr_v2");
});

db.test("local development: a recompile keeps an alias it still carries, and drops one it no longer carries as a deletion would", async ({ sql }) => {
  await sql`select pgflow.set_local_development(true)`;
  try {
    const changed = (slug: string, aliasName: string | undefined) => {
      const flow = new Flow<{ n: number }>({
        slug,
        ...(aliasName === undefined ? {} : { alias: aliasName }),
      }).step({ slug: "classify" }, (i) => i.n);
      return routeFlow(flow, { queues: { classify: "al_work" } });
    };
    await compileFlow(sql, version("lr_v1", "lr_triage"));
    assert.equal((await compileFlow(sql, changed("lr_v1", "lr_triage"))).status, "recompiled");
    assert.equal((await alias(sql, "lr_triage")).flow_slug, "lr_v1");
    assert.equal((await compileFlow(sql, changed("lr_v1", undefined))).status, "recompiled");
    assert.equal(await alias(sql, "lr_triage"), undefined);

    await compileFlow(sql, version("lt_v1", "lt_triage"));
    await compileFlow(sql, version("lt_v2", "lt_triage"));
    await assert.rejects(
      compileFlow(sql, changed("lt_v1", undefined)),
      /flow lt_v1 is the target of alias lt_triage/,
    );
    assert.equal((await alias(sql, "lt_triage")).flow_slug, "lt_v1");
  } finally {
    await sql`select pgflow.set_local_development(false)`;
  }
});

db.test("retry and resume start the source's concrete flow, even a version named like its alias after the alias moved", async ({ sql }) => {
  // rv_triage is a version carrying its own name as its alias; rv_v2 is the next version.
  await compileFlow(sql, version("rv_triage", "rv_triage"));
  await compileFlow(sql, version("rv_v2", "rv_triage"));
  const [src] = await sql`select run_id, flow_slug from pgflow.start_flow('rv_triage', '{"n": 1}')`;
  assert.equal(src.flow_slug, "rv_triage");
  await sql`select * from pgflow.cancel_run(${src.run_id})`;
  await sql`select pgflow.activate_alias('rv_triage', 'rv_triage', 'rv_v2', true)`;
  for (const fn of ["retry_run", "resume_run"]) {
    const [made] = await sql.unsafe(
      `select flow_slug, started_as from pgflow.${fn}($1)`,
      [src.run_id],
    );
    assert.deepEqual([made.flow_slug, made.started_as], ["rv_triage", null], fn);
  }
});
