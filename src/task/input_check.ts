import { checkInput, formatIssues, type InputIssue, inputIssues } from "../dsl/input_schema.ts";
import type { StandardSchemaV1 } from "../dsl/input_schema.ts";
import type { FlowInputCache } from "./flow_input.ts";

/**
 * Whether each run's input passes its flow's schema, checked once per run and remembered (bounded
 * like the inputs themselves): the run's other tasks on this worker wait for the same answer and
 * make no query. A check that could not be made (the input could not be loaded, the schema threw)
 * is forgotten, so the task's retry checks again.
 */
export class RunInputChecks {
  readonly #results = new Map<string, Promise<readonly InputIssue[] | undefined>>();
  readonly #flowInputs: FlowInputCache;
  readonly #capacity: number;

  /**
   * @param flowInputs where run inputs come from (a root task's input is seeded there already)
   * @param capacity how many runs to remember
   */
  constructor(flowInputs: FlowInputCache, capacity = 500) {
    this.#flowInputs = flowInputs;
    this.#capacity = capacity;
  }

  /** `undefined` when run `runId`'s input passes `schema`, else the issues found. */
  check(runId: string, schema: StandardSchemaV1): Promise<readonly InputIssue[] | undefined> {
    const hit = this.#results.get(runId);
    if (hit !== undefined) return hit;
    const checking = this.#check(runId, schema);
    this.#results.set(runId, checking);
    while (this.#results.size > this.#capacity) {
      this.#results.delete(this.#results.keys().next().value!);
    }
    checking.catch(() => {
      if (this.#results.get(runId) === checking) this.#results.delete(runId);
    });
    return checking;
  }

  async #check(
    runId: string,
    schema: StandardSchemaV1,
  ): Promise<readonly InputIssue[] | undefined> {
    const input = await this.#flowInputs.get(runId);
    const result = await checkInput(schema, input);
    return result.ok ? undefined : inputIssues(result.issues, input);
  }
}

/**
 * The run input failed its flow's schema: the task fails the run at once (`fail_task(...,
 * fail_run => true)`), as no retry can change the stored input.
 */
export class RunInputRejected extends Error {
  /** The issues, for callers that want them whole. */
  readonly issues: readonly InputIssue[];

  constructor(issues: readonly InputIssue[]) {
    super(`input failed its schema: ${formatIssues(issues)}`);
    this.name = "RunInputRejected";
    this.issues = issues;
  }
}

/**
 * Checks run `runId`'s input against `schema` (once per run, see {@link RunInputChecks}). Throws
 * {@link RunInputRejected} when it fails; any other error (the input could not be loaded, the
 * schema threw) is an ordinary failure of the task, retried as such.
 */
export async function checkRunInput(
  checks: RunInputChecks,
  runId: string,
  schema: StandardSchemaV1,
): Promise<void> {
  const issues = await checks.check(runId, schema);
  if (issues !== undefined) throw new RunInputRejected(issues);
}
