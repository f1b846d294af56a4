/**
 * Runs the Slack delivery step of both triage versions from the queue `slack_delivery`, with a
 * small pool of its own so slow webhooks never hold up classification.
 *
 * Locally: `DATABASE_URL=postgres://... deno run -A supabase/functions/slack_delivery/index.ts`.
 *
 * @module
 */
import { EdgeWorker } from "../../../mod.ts";
import { routedTriage } from "../_shared/triage.ts";

await EdgeWorker.start(routedTriage, { queueName: "slack_delivery", maxConcurrent: 2 });
