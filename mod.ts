/**
 * @pgflow/shared: a Postgres-native workflow engine for Supabase with explicit shared queues and
 * multi-flow dispatch.
 *
 * Postgres (with PGMQ queues) orchestrates flows, a typed DSL defines them, and an Edge Worker runs
 * their steps. `routeFlow(flow, { queues })` puts any step of any flow or version on a named queue;
 * one worker polls one queue and runs exactly the (flow, step) pairs it has handlers for.
 *
 * @example
 * ```ts
 * import { Flow, routeFlow } from "@pgflow/shared";
 *
 * const triage = new Flow<{ threadId: string }>({ slug: "thread_triage_v1" })
 *   .step({ slug: "classify" }, (input) => ({ label: `thread ${input.threadId}` }))
 *   .step({ slug: "deliver", dependsOn: ["classify"] }, (deps) => deps.classify.label);
 *
 * export const routed = routeFlow(triage, {
 *   queues: { classify: "thread_processing", deliver: "slack_delivery" },
 * });
 * ```
 *
 * @module
 */
