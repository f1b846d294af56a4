/**
 * The soak's worker on `edge_b` (tests/edge/soak.ts): reads that wait in the database (no
 * LISTEN), as behind Supabase's transaction pooler.
 *
 * @module
 */
import { EdgeWorker } from "../../../../mod.ts";
import { soakV1, soakV2 } from "../_soak/flows.ts";

await EdgeWorker.start([soakV1, soakV2], {
  queueName: "edge_b",
  maxConcurrent: 8,
  wakeups: "poll",
  maxPollSeconds: 2,
  pollIntervalMs: 100,
  stalledRecoveryIntervalMs: 0,
  heartbeatIntervalMs: 500,
});
