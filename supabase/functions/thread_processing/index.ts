/**
 * Runs the processing steps of both triage versions from the shared queue `thread_processing`.
 *
 * On Supabase the worker starts on the first authorised request (the keep-alive's ping). Locally,
 * with this function's own import map:
 * `DATABASE_URL=postgres://... deno run -A --config supabase/functions/thread_processing/deno.json supabase/functions/thread_processing/index.ts`
 * (add `EDGE_WORKER_TRIGGER=http PORT=8001 PGFLOW_AUTH_SECRET=...` to wait for a request instead).
 *
 * @module
 */
import { EdgeWorker } from "@pgflow/shared";
import { routedTriage } from "../_shared/triage.ts";

await EdgeWorker.start(routedTriage, { queueName: "thread_processing", maxConcurrent: 8 });
