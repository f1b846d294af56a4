import type { ClaimedTask } from "./claim.ts";
import { checkPayloadText, PayloadTooLarge } from "../util/payload_limit.ts";

/** `flow.step[index]`: which task a size error is about. */
function taskName(task: ClaimedTask): string {
  return `${task.flowSlug}.${task.stepSlug}[${task.taskIndex}]`;
}

/**
 * The error of a task whose input the read left in the database for its size (see
 * `ClaimedTask.inputWithheld`): the size, the bound and the fix.
 */
export function inputTooLarge(task: ClaimedTask, limit: number | undefined): string {
  return new PayloadTooLarge(`input of task ${taskName(task)}`, task.inputBytes ?? 0, limit ?? 0)
    .message;
}

/**
 * `output` (the handler's JSON text), or a {@link PayloadTooLarge} thrown when it is over
 * `limit` bytes: checked before anything is sent, so no copy is made for the wire and no
 * dependent task is given an input no worker with the same bound would take.
 */
export function checkOutputSize(
  output: string,
  task: ClaimedTask,
  limit: number | undefined,
): string {
  return limit === undefined
    ? output
    : checkPayloadText(output, limit, `output of task ${taskName(task)}`);
}
