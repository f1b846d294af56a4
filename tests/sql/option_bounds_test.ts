/**
 * SQL bounds every numeric option by the one shared table, tests/fixtures/option_bounds.json (the
 * DSL is tested against the same table in tests/dsl/option_bounds_test.ts), in create_flow,
 * add_step, the compiler and the table checks; a value that could break a claim or stalled
 * recovery for other flows cannot be stored (issue 14, item 6).
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface Bounds {
  readonly min: number;
  readonly max: number;
}
const fixture: {
  readonly bounds: Readonly<Record<string, Bounds>>;
  readonly cases: readonly { option: string; value: number; accepted: boolean }[];
} = JSON.parse(
  await Deno.readTextFile(new URL("../fixtures/option_bounds.json", import.meta.url)),
);
const SQL_NAMES: Record<string, string> = {
  maxAttempts: "max_attempts",
  baseDelay: "base_delay",
  timeout: "timeout",
  startDelay: "start_delay",
};

function cases(): { option: string; value: number; accepted: boolean }[] {
  const all = [...fixture.cases];
  for (const [option, { min, max }] of Object.entries(fixture.bounds)) {
    all.push(
      { option, value: min - 1, accepted: false },
      { option, value: min, accepted: true },
      { option, value: max, accepted: true },
      { option, value: max + 1, accepted: false },
    );
  }
  return all;
}

let n = 0;
async function outcome(call: () => Promise<unknown>): Promise<boolean | string> {
  try {
    await call();
    return true;
  } catch (error) {
    return String(error);
  }
}

/** A step-shaped definition for ensure_flow_compiled. */
function compileCall(sql: Sql, slug: string, options: unknown) {
  const shape = {
    steps: [{
      slug: "a",
      index: 0,
      stepType: "single",
      dependencies: [],
      whenUnmet: "skip",
      whenExhausted: "fail",
      requiredInputPattern: { defined: false },
      forbiddenInputPattern: { defined: false },
    }],
  };
  const plan = { mode: "routed", queues: { a: "bounds_q" } };
  return sql`select pgflow.ensure_flow_compiled(${slug}, ${sql.json(shape)}, ${sql.json(plan)}, ${
    sql.json(options as never)
  })`;
}

db.test("SQL's bounds are the shared table", async ({ sql }) => {
  const [{ bounds }] = await sql`select pgflow.option_bounds() as bounds`;
  assert.deepEqual(bounds, fixture.bounds);
});

db.test("create_flow, add_step and the compiler accept exactly the bounds", async ({ sql }) => {
  for (const c of cases()) {
    const sqlName = SQL_NAMES[c.option];
    const where = `${c.option}=${c.value}`;
    const { min, max } = fixture.bounds[c.option];
    const message = new RegExp(
      `${c.option} \\(${sqlName}\\) must be an integer between ${min} and ${max}, got ${c.value}`,
    );
    // add_step, on a routed flow (no queue is touched before the check).
    const flow = `bounds_${n++}`;
    await sql`select pgflow.create_flow(${flow}, 3, 1, 60, 'routed')`;
    const step = await outcome(() =>
      sql.unsafe(
        `select pgflow.add_step($1, 'a', queue_name => 'bounds_q', ${sqlName} => $2::integer)`,
        [flow, c.value],
      )
    );
    if (c.accepted) assert.equal(step, true, `add_step ${where}: ${step}`);
    else assert.match(String(step), message, `add_step ${where}`);
    // create_flow (it has no start delay).
    if (c.option !== "startDelay") {
      const created = await outcome(() =>
        sql.unsafe(
          `select pgflow.create_flow($1, queue_mode => 'routed', ${sqlName} => $2::integer)`,
          [`bounds_${n++}`, c.value],
        )
      );
      if (c.accepted) assert.equal(created, true, `create_flow ${where}: ${created}`);
      else assert.match(String(created), message, `create_flow ${where}`);
    }
    // The compiler reports it with the other problems, before anything is created.
    const options = c.option === "startDelay"
      ? { flow: {}, steps: { a: { [c.option]: c.value } } }
      : { flow: { [c.option]: c.value }, steps: { a: { [c.option]: c.value } } };
    const compiled = await outcome(() => compileCall(sql, `bounds_${n++}`, options));
    if (c.accepted) assert.equal(compiled, true, `compile ${where}: ${compiled}`);
    else {
      assert.match(
        String(compiled),
        new RegExp(
          `step a: ${c.option} must be an integer between ${min} and ${max}, got ${c.value}`,
        ),
        `compile ${where}`,
      );
    }
  }
  // JSON that is not an integer is a problem too, not a failed cast halfway through.
  for (const bad of ["60", 1.5, true, [1], 1e20]) {
    assert.match(
      String(await outcome(() => compileCall(sql, `bounds_${n++}`, { flow: { timeout: bad } }))),
      /invalid definition: flow: timeout must be an integer between 3 and 31536000/,
      JSON.stringify(bad),
    );
  }
});

db.test("the table checks hold every stored option to the same bounds", async ({ sql }) => {
  await defineFlow(sql, "bounds_stored", [{ slug: "a", queue: "bounds_q" }], { mode: "routed" });
  for (const c of cases()) {
    const column = `opt_${SQL_NAMES[c.option]}`;
    for (const table of c.option === "startDelay" ? ["steps"] : ["flows", "steps"]) {
      const result = await outcome(() =>
        sql.begin(async (tx) => {
          await tx.unsafe(
            `update pgflow.${table} set ${column} = $1::integer where flow_slug = 'bounds_stored'`,
            [c.value],
          );
          throw new Error("rolled back");
        })
      );
      if (c.accepted) assert.match(String(result), /rolled back/, `${table}.${column}=${c.value}`);
      else {assert.match(
          String(result),
          /violates check constraint/,
          `${table}.${column}=${c.value}`,
        );}
    }
  }
});

db.test("the largest timeout leaves claims and stalled recovery working for every flow", async ({ sql }) => {
  const { max } = fixture.bounds.timeout;
  await defineFlow(sql, "bounds_long", [{ slug: "a", queue: "bounds_shared", timeout: max }], {
    mode: "routed",
    timeout: max,
  });
  await defineFlow(sql, "bounds_short", [{ slug: "a", queue: "bounds_shared" }], {
    mode: "routed",
  });
  await sql`select pgflow.start_flow('bounds_long', '{}')`;
  await sql`select pgflow.start_flow('bounds_short', '{}')`;
  const worker = await registerWorker(sql, "bounds_shared");
  const rows = await readAndStart(sql, "bounds_shared", worker, [["bounds_long", "a"], [
    "bounds_short",
    "a",
  ]]);
  assert.deepEqual(rows.map((r) => r.disposition), ["claimed", "claimed"]);
  const batch =
    await sql`select * from pgflow.read_and_claim('bounds_shared', ${worker}, 5, 10, 0)`;
  assert.equal(batch.length, 0, "nothing left to read, and the read did not fail");
  await sql`update pgflow.step_tasks set started_at = now() - interval '400 days'
            where flow_slug in ('bounds_long', 'bounds_short')`;
  assert.equal((await sql`select pgflow.requeue_stalled_tasks() as n`)[0].n, 2);
});
