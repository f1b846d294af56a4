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
  StartFlowError,
} from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
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
