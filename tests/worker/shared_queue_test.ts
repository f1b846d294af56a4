/** One worker serves grouped steps of two versions of a flow on one shared queue. */
import assert from "node:assert/strict";
import { Flow, type FlowWorker, routeFlow } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const ran: string[] = [];

const v1 = new Flow<{ threadId: string }>({ slug: "triage_v1" })
  .step({ slug: "classify" }, (input) => {
    ran.push("v1.classify");
    return { label: `v1:${input.threadId}` };
  })
  .step({ slug: "enrich", dependsOn: ["classify"] }, (deps) => {
    ran.push("v1.enrich");
    return { text: deps.classify.label.toUpperCase() };
  })
  .step({ slug: "deliver", dependsOn: ["enrich"] }, (deps) => {
    ran.push("v1.deliver");
    return { sent: deps.enrich.text };
  });

const v2 = new Flow<{ threadId: string }>({ slug: "triage_v2" })
  .step({ slug: "classify" }, (input) => {
    ran.push("v2.classify");
    return { label: `v2:${input.threadId}`, urgent: true };
  })
  .step({ slug: "enrich", dependsOn: ["classify"] }, async (deps, ctx) => {
    ran.push("v2.enrich");
    const run = await ctx.flowInput;
    return { text: `${deps.classify.label}/${run.threadId}` };
  })
  .step({ slug: "deliver", dependsOn: ["enrich"] }, (deps) => {
    ran.push("v2.deliver");
    return { sent: deps.enrich.text };
  });

const routes = {
  classify: "thread_processing",
  enrich: "thread_processing",
  deliver: "slack_delivery",
} as const;
const routedV1 = routeFlow(v1, { queues: routes });
const routedV2 = routeFlow(v2, { queues: routes });

db.test("grouped steps of two versions run on one worker per queue", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    const { worker: processing } = await startWorker(workers, [routedV1, routedV2], {
      queueName: "thread_processing",
      connectionString: url,
    });
    const { worker: delivery } = await startWorker(workers, [routedV1, routedV2], {
      queueName: "slack_delivery",
      connectionString: url,
    });
    assert.deepEqual(processing.supportSet, [
      ["triage_v1", "classify"],
      ["triage_v1", "enrich"],
      ["triage_v2", "classify"],
      ["triage_v2", "enrich"],
    ]);
    assert.deepEqual(delivery.supportSet, [["triage_v1", "deliver"], ["triage_v2", "deliver"]]);

    const run1 = await startRun(sql, "triage_v1", { threadId: "t1" });
    const run2 = await startRun(sql, "triage_v2", { threadId: "t2" });
    assert.deepEqual(await waitForRun(sql, run1), {
      status: "completed",
      output: { deliver: { sent: "V1:T1" } },
    });
    assert.deepEqual(await waitForRun(sql, run2), {
      status: "completed",
      output: { deliver: { sent: "v2:t2/t2" } },
    });
    assert.deepEqual([...ran].sort(), [
      "v1.classify",
      "v1.deliver",
      "v1.enrich",
      "v2.classify",
      "v2.deliver",
      "v2.enrich",
    ]);
    // Each task ran on the worker of its queue.
    const tasks = await sql<{ step_slug: string; queue_name: string; worker_queue: string }[]>`
      select t.step_slug, t.queue_name, w.queue_name as worker_queue
      from pgflow.step_tasks t join pgflow.workers w on w.worker_id = t.last_worker_id`;
    assert.equal(tasks.length, 6);
    for (const task of tasks) assert.equal(task.queue_name, task.worker_queue);
  } finally {
    await stopAll(workers);
  }
});

db.test("a plain flow named like a shared queue is refused with what to do", async ({ url }) => {
  const sharer = routeFlow(
    new Flow<{ n: number }>({ slug: "sq_owner" }).step({ slug: "a" }, (i) => i.n),
    { queues: { a: "sq_alerts" } },
  );
  const plain = new Flow<{ n: number }>({ slug: "sq_alerts" }).step({ slug: "a" }, (i) => i.n);
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, sharer, { connectionString: url, queueName: "sq_alerts" });
    await assert.rejects(
      startWorker(workers, plain, { connectionString: url }),
      /flow "sq_alerts" could not be compiled: .*sq_alerts is a shared queue declared with routeFlow\(\).*hint: give the flow another slug \(e\.g\. sq_alerts_v2\), or route its steps with routeFlow/,
    );
  } finally {
    await stopAll(workers);
  }
});
