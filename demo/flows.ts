/**
 * The demo's flows: two versions of a thread triage flow whose processing steps share the queue
 * `demo_processing`, while Slack delivery keeps its own, smaller pool on `demo_slack`. Handlers
 * simulate a little latency and fail at the configured rate, so retries show up.
 *
 * @module
 */
import { Flow, routeFlow } from "../mod.ts";

/** What the demo's handlers do besides their work. */
export interface Behaviour {
  /** Probability that one handler call throws (retried up to 3 attempts). */
  failureRate: number;
  /** Upper bound of the simulated work per call, in milliseconds. */
  maxLatencyMs: number;
}

/** The run input. */
export interface Thread {
  threadId: string;
  text: string;
}

/** Builds both versions, routed, with the given behaviour. */
export function demoFlows(b: Behaviour) {
  const work = async <T>(result: T): Promise<T> => {
    await new Promise((r) => setTimeout(r, Math.random() * b.maxLatencyMs));
    if (Math.random() < b.failureRate) throw new Error("injected failure");
    return result;
  };
  const classify = (t: Thread) => work({ label: /urgent|down/.test(t.text) ? "urgent" : "normal" });

  const v1 = new Flow<Thread>({ slug: "demo_triage_v1", maxAttempts: 3, baseDelay: 1 })
    .step({ slug: "classify" }, (t) => classify(t))
    .step(
      { slug: "enrich", dependsOn: ["classify"] },
      (d) => work({ summary: `[${d.classify.label}]` }),
    )
    .step(
      { slug: "deliverSlack", dependsOn: ["enrich"] },
      (d) => work({ posted: d.enrich.summary }),
    );

  const v2 = new Flow<Thread>({ slug: "demo_triage_v2", maxAttempts: 3, baseDelay: 1 })
    .step({ slug: "classify" }, (t) => classify(t))
    .step(
      { slug: "score", dependsOn: ["classify"] },
      (d) => work({ priority: d.classify.label === "urgent" ? 1 : 3 }),
    )
    .step(
      { slug: "enrich", dependsOn: ["classify", "score"] },
      (d) => work({ summary: `[P${d.score.priority}]` }),
    )
    .step(
      { slug: "deliverSlack", dependsOn: ["enrich"] },
      (d) => work({ posted: d.enrich.summary }),
    );

  return [
    routeFlow(v1, {
      queues: {
        classify: "demo_processing",
        enrich: "demo_processing",
        deliverSlack: "demo_slack",
      },
    }),
    routeFlow(v2, {
      queues: {
        classify: "demo_processing",
        score: "demo_processing",
        enrich: "demo_processing",
        deliverSlack: "demo_slack",
      },
    }),
  ] as const;
}
