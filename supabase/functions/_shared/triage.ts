/**
 * The thread triage flows shared by the example functions. Two concrete versions run side by
 * side (old runs of v1 drain while v2 takes new ones); in both, classification and enrichment are
 * grouped on the shared queue `thread_processing`, and Slack delivery has its own pool on
 * `slack_delivery`.
 *
 * Start a run with `select pgflow.start_flow('thread_triage_v2', '{"threadId": "t1", "text": "..."}')`.
 *
 * @module
 */
import { Flow, routeFlow } from "@pgflow/shared";

/** The run input of both versions. */
export interface ThreadInput {
  threadId: string;
  text: string;
}

function classify(text: string): { label: "urgent" | "normal"; words: number } {
  const words = text.split(/\s+/).filter(Boolean).length;
  return { label: /\b(down|outage|urgent|asap)\b/i.test(text) ? "urgent" : "normal", words };
}

/** Delivers a message to Slack when `SLACK_WEBHOOK_URL` is set; otherwise reports a dry run. */
async function deliver(
  webhook: string | undefined,
  text: string,
): Promise<{ delivered: boolean; text: string }> {
  if (webhook === undefined || webhook === "") return { delivered: false, text };
  const response = await fetch(webhook, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ text }),
  });
  if (!response.ok) throw new Error(`Slack answered ${response.status}`);
  return { delivered: true, text };
}

/** Version 1: classify → enrich → deliverSlack. */
export const triageV1 = new Flow<ThreadInput>({ slug: "thread_triage_v1", maxAttempts: 3 })
  .step({ slug: "classify" }, (input) => classify(input.text))
  .step({ slug: "enrich", dependsOn: ["classify"] }, async (deps, ctx) => {
    const run = await ctx.flowInput;
    return { summary: `[${deps.classify.label}] thread ${run.threadId}` };
  })
  .step(
    { slug: "deliverSlack", dependsOn: ["enrich"] },
    (deps, ctx) => deliver(ctx.env.SLACK_WEBHOOK_URL, deps.enrich.summary),
  );

/** Version 2 adds a priority score, still grouped with the other processing steps. */
export const triageV2 = new Flow<ThreadInput>({ slug: "thread_triage_v2", maxAttempts: 3 })
  .step({ slug: "classify" }, (input) => classify(input.text))
  .step({ slug: "score", dependsOn: ["classify"] }, (deps) => ({
    priority: deps.classify.label === "urgent" ? 1 : Math.min(5, 2 + deps.classify.words / 50),
  }))
  .step({ slug: "enrich", dependsOn: ["classify", "score"] }, async (deps, ctx) => {
    const run = await ctx.flowInput;
    return { summary: `[P${deps.score.priority}] thread ${run.threadId}` };
  })
  .step(
    { slug: "deliverSlack", dependsOn: ["enrich"] },
    (deps, ctx) => deliver(ctx.env.SLACK_WEBHOOK_URL, deps.enrich.summary),
  );

/** Both versions, routed: processing steps share `thread_processing`, delivery `slack_delivery`. */
export const routedTriage = [
  routeFlow(triageV1, {
    queues: {
      classify: "thread_processing",
      enrich: "thread_processing",
      deliverSlack: "slack_delivery",
    },
  }),
  routeFlow(triageV2, {
    queues: {
      classify: "thread_processing",
      score: "thread_processing",
      enrich: "thread_processing",
      deliverSlack: "slack_delivery",
    },
  }),
] as const;
