/**
 * The soak's worker on `edge_a` (tests/edge/soak.ts): LISTEN wake-ups, as on a direct or session
 * connection.
 *
 * @module
 */
import { EdgeWorker } from "../../../../mod.ts";
import { soakV1, soakV2, storm } from "../_soak/flows.ts";

await EdgeWorker.start([soakV1, soakV2, storm], {
  queueName: "edge_a",
  maxConcurrent: 8,
  stalledRecoveryIntervalMs: 0,
  heartbeatIntervalMs: 500,
});
