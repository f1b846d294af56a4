/**
 * docs/child-flows.md does what it shows: its flows run end to end on workers (the parent's output
 * built from its children's), the mapping it prints is the one its example compiles to, and the
 * errors it quotes are the DSL's and the database's own.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker } from "../../mod.ts";
import { REPO_ROOT } from "../package/deno_cmd.ts";
import { testDatabase } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "../worker/helpers.ts";
import { blockNamed, codeBlocks } from "./markdown.ts";

const db = testDatabase(import.meta.url);
const blocks = codeBlocks(Deno.readTextFileSync(`${REPO_ROOT}docs/child-flows.md`));

/** The guide's `ts define` block as a module, importing this repository's mod.ts. */
async function guideFlows(): Promise<{ enrich: Flow; onboard: Flow }> {
  const code = blockNamed(blocks, "ts", "define").code
    .replace(`"@pgflow/shared"`, JSON.stringify(new URL("mod.ts", `file://${REPO_ROOT}`).href));
  const file = await Deno.makeTempFile({ suffix: ".ts" });
  try {
    await Deno.writeTextFile(file, code);
    return await import(`file://${file}`);
  } finally {
    await Deno.remove(file);
  }
}

db.test("child flows guide: its flows run, and the mapping it shows is what they compile to", async ({ sql, url }) => {
  const { enrich, onboard } = await guideFlows();
  assert.deepEqual(
    onboard.steps().find((s) => s.slug === "enriched")?.child?.input,
    JSON.parse(blockNamed(blocks, "json", "mapping").code),
  );
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, enrich as never, { connectionString: url });
    await startWorker(workers, onboard as never, { connectionString: url });
    const run = await startRun(sql, "onboard_customers_v1", {
      customers: [{ id: "a1", plan: "pro" }, { id: "b22", plan: "free" }],
    });
    assert.deepEqual(await waitForRun(sql, run), {
      status: "completed",
      output: { report: { scores: ["account a1".length, "account b22".length] } },
    });
    await assert.rejects(
      sql`select pgflow.delete_flow_and_data('enrich_account_v1')`,
      (e: Error) => e.message === blockNamed(blocks, "text", "refused").code.trim(),
    );
  } finally {
    await stopAll(workers);
  }
});

db.test("child flows guide: the error it quotes for a computed input is the DSL's", async () => {
  const { enrich } = await guideFlows();
  assert.throws(
    () =>
      new Flow<{ id: string }>({ slug: "bad_v1" }).subflow({
        slug: "child",
        flow: enrich as unknown as Flow<{ id: string }>,
        input: (input) => ({ id: `${input.id}!` }),
      }),
    (e: Error) => e.message === blockNamed(blocks, "text", "computed").code.trim(),
  );
});
