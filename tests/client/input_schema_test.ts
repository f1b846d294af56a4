/**
 * The client checks a run's input against the flow's schema before starting it (zod here, through
 * Standard Schema): a bad input is an `InputValidationError` listing the issues without the values,
 * and no run is made; a good one is stored as the schema's value (after its transforms). A start by
 * slug carries no schema: the worker's check fails that run instead.
 */
import assert from "node:assert/strict";
import { z } from "npm:zod@3.24.2";
import {
  createClient,
  Flow,
  type FlowWorker,
  InputValidationError,
  routeFlow,
  RunFailedError,
  type StandardSchemaV1,
  StartFlowError,
} from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";

const db = testDatabase(import.meta.url);

const Signup = z.object({
  email: z.string().email().transform((s) => s.toLowerCase()),
  plan: z.enum(["free", "pro"]).default("free"),
  apiKey: z.string().startsWith("sk_"),
});

const seen: unknown[] = [];
const signup = new Flow({ slug: "cl_signup", input: Signup })
  .step({ slug: "welcome" }, (input) => {
    seen.push(input);
    return `${input.email} on ${input.plan}`;
  });

db.test("startFlow checks the input first: issues without values, no run; the schema's value is stored", async ({ url, sql }) => {
  const client = createClient({ connectionString: url });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, signup, { connectionString: url });
    const bad = { email: "not-an-email", plan: "gold", apiKey: "pk_live_SECRET" };
    for (const carrier of [signup, routeFlow(signup, { queues: { welcome: "cl_signup_q" } })]) {
      await assert.rejects(
        client.startFlow(carrier, bad as never),
        (e: unknown) => {
          assert.ok(e instanceof InputValidationError && e instanceof StartFlowError);
          assert.equal(e.flowSlug, "cl_signup");
          assert.deepEqual(e.issues.map((i) => i.path), [["email"], ["plan"], ["apiKey"]]);
          assert.match(
            e.message,
            /^cannot start flow cl_signup: input failed its schema: email: Invalid email; plan: /,
          );
          assert.doesNotMatch(
            e.message + JSON.stringify(e.issues),
            /not-an-email|gold|SECRET/,
            "no value of the input is quoted",
          );
          return true;
        },
      );
    }
    const [{ n }] =
      await sql`select count(*)::int as n from pgflow.runs where flow_slug = ${"cl_signup"}`;
    assert.equal(n, 0, "no run was made");

    const run = await client.startFlow(
      signup,
      { email: "Ada@Example.COM", apiKey: "sk_1" } as never,
    );
    const output = await run.waitFor("completed", { timeoutMs: 60_000 });
    const stored = { email: "ada@example.com", plan: "free", apiKey: "sk_1" };
    assert.deepEqual((await client.getRun(run.runId))?.input, stored);
    assert.deepEqual(seen, [stored], "the handler sees the schema's value");
    assert.deepEqual(output, { welcome: "ada@example.com on free" });

    // By slug there is no schema to check with: the run is made, and the worker fails it.
    const bySlug = await client.startFlow("cl_signup", bad);
    await assert.rejects(
      bySlug.waitFor("completed", { timeoutMs: 60_000 }),
      (e: unknown) =>
        e instanceof RunFailedError && /^input failed its schema: email: /.test(e.stepError) &&
        !/SECRET/.test(e.message),
    );
    assert.equal(seen.length, 1, "no handler saw the bad input");
  } finally {
    await stopAll(workers);
    await client.close();
  }
});

db.test("a schema that throws refuses the start with its error; no run is made", async ({ url, sql }) => {
  const client = createClient({ connectionString: url });
  try {
    const throwing = new Flow({
      slug: "cl_throwing",
      input: {
        "~standard": {
          version: 1,
          vendor: "test",
          validate: (): { value: number } => {
            throw new Error("schema bug");
          },
        },
      },
    }).step({ slug: "a" }, (n) => n);
    await assert.rejects(
      client.startFlow(throwing, 1),
      (e: unknown) =>
        e instanceof StartFlowError && !(e instanceof InputValidationError) &&
        /cannot start flow cl_throwing: the input schema threw: schema bug/.test(e.message),
    );
    const [{ n }] =
      await sql`select count(*)::int as n from pgflow.runs where flow_slug = ${"cl_throwing"}`;
    assert.equal(n, 0);
  } finally {
    await client.close();
  }
});

/** A hand-written schema printing as valibot does: `received 4111111111111111`, `received true`. */
const cardSchema: StandardSchemaV1<unknown, { card: string; holder: string }> = {
  "~standard": {
    version: 1,
    vendor: "valibot-like",
    validate(value) {
      const v = value as { card?: unknown; holder?: unknown; vip?: unknown };
      const print = (x: unknown) => typeof x === "string" ? `"${x}"` : `${x}`;
      const issues = [];
      if (typeof v.card !== "string") {
        issues.push({
          message: `Invalid type: Expected string but received ${print(v.card)}`,
          path: [{ key: "card" }],
        });
      }
      if (v.vip !== undefined && typeof v.vip !== "string") {
        issues.push({
          message: `Invalid type: Expected string but received ${print(v.vip)}`,
          path: [{ key: "vip" }],
        });
      }
      return issues.length > 0 ? { issues } : { value: v as { card: string; holder: string } };
    },
  },
};

const payments = new Flow({ slug: "cl_payments", input: cardSchema, maxAttempts: 1 })
  .step({ slug: "charge" }, (input) => input.card.length);

db.test("no value of a rejected input (a number, a boolean) reaches an error, a record or a log line", async ({ url, sql }) => {
  const client = createClient({ connectionString: url });
  const workers: FlowWorker[] = [];
  const input = { card: 4111111111111111, holder: "Ada", vip: true };
  const leaks = /4111|received true/;
  try {
    await assert.rejects(client.startFlow(payments, input as never), (e: unknown) => {
      assert.ok(e instanceof InputValidationError);
      assert.equal(
        e.message,
        "cannot start flow cl_payments: input failed its schema: card: Invalid type: Expected " +
          "string but received [redacted]; vip: Invalid type: Expected string but received " +
          "[redacted]",
      );
      assert.doesNotMatch(e.message + JSON.stringify(e.issues), leaks);
      return true;
    });

    // Started by slug, the worker checks it: with the handler's text logged, too.
    const { logs } = await startWorker(workers, payments, {
      connectionString: url,
      logErrorMessages: true,
    });
    const run = await client.startFlow("cl_payments", input);
    await assert.rejects(
      run.waitFor("completed", { timeoutMs: 60_000 }),
      (e: unknown) => e instanceof RunFailedError && !leaks.test(e.message + e.stepError),
    );
    const [row] = await sql<Record<string, string>[]>`
      select r.error_message as run, s.error_message as step, t.error_message as task,
             a.error_message as attempt
        from pgflow.runs r
        join pgflow.step_states s using (run_id)
        join pgflow.step_tasks t using (run_id, step_slug)
        join pgflow.task_attempts a using (run_id, step_slug, task_index)
       where r.run_id = ${run.runId}::uuid`;
    for (const [where, text] of Object.entries(row)) {
      assert.match(
        text,
        /^input failed its schema: card: Invalid type: Expected string but received \[redacted\]/,
        where,
      );
      assert.doesNotMatch(text, leaks, where);
    }
    const line = await waitFor(() => logs.find((l) => l.event === "task failed"), {
      what: "the failure's log line",
    });
    assert.match(String(line.fields.error), /received \[redacted\]/);
    assert.doesNotMatch(JSON.stringify(logs), leaks);
  } finally {
    await stopAll(workers);
    await client.close();
  }
});
