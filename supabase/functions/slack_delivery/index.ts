/**
 * Runs the Slack delivery step of both triage versions from the queue `slack_delivery`, with a
 * small pool of its own so slow webhooks never hold up classification.
 *
 * Locally, with this function's own import map:
 * `DATABASE_URL=postgres://... deno run -A --config supabase/functions/slack_delivery/deno.json supabase/functions/slack_delivery/index.ts`.
 *
 * @module
 */
import { EdgeWorker } from "@pgflow/shared";
import { routedTriage } from "../_shared/triage.ts";

await EdgeWorker.start(routedTriage, { queueName: "slack_delivery", maxConcurrent: 2 });
