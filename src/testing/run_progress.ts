/**
 * How a run moves forward, in memory: the one place the engine's SQL rules are written again for
 * `runFlowInMemory`. It mirrors supabase/schemas/0250_run_progress.sql (`_start_ready_steps`,
 * `_complete_step`, `_skip_step`, `_fail_run`, `_count_off_step`), 0510_fail_task.sql
 * (`_task_failed`: retries with base_delay * 2^(attempt - 1), then `whenExhausted`) and the input
 * and output helpers of 0090_inline_helpers.sql (`_dependency_outputs`, `_run_output`); a change
 * to those rules is a change here too (tests/testing/engine_agreement_test.ts compares both).
 *
 * @module
 */
import type { Json } from "../dsl/json.ts";
import type { StepDefinition } from "../dsl/types.ts";
import type { WhenMode } from "../dsl/options.ts";
import { isExactNumber } from "../util/json_parse.ts";
import { jsonbContains } from "./containment.ts";
import { MAX_DEFERRALS } from "../dsl/retry_after.ts";

/**
 * A step's status at the end of a run in memory, as `pgflow.step_states.status` would say.
 *
 * @example
 * ```ts
 * import type { InMemoryStepStatus } from "@pgflow/shared/testing";
 *
 * const status: InMemoryStepStatus = "skipped";
 * ```
 */
export type InMemoryStepStatus = "created" | "started" | "completed" | "skipped" | "failed";

/**
 * Why a step was skipped, as `pgflow.step_states.skip_reason` would say.
 *
 * @example
 * ```ts
 * import type { SkipReason } from "@pgflow/shared/testing";
 *
 * const reason: SkipReason = "condition_unmet";
 * ```
 */
export type SkipReason = "condition_unmet" | "dependency_skipped" | "handler_failed";

/** One task waiting for its (next) attempt. */
export interface QueuedTask {
  /** Its step. */
  readonly step: StepDefinition;
  /** Its index (0 for a single step, the element's for a map). */
  readonly index: number;
  /** Its handler input. */
  readonly input: Json;
  /** The attempt it runs next (1-based). */
  attempt: number;
  /** Its attempts so far that did not count toward `maxAttempts` (deferred). */
  uncounted?: number;
  /** Clock time (ms) from which it may run. */
  visibleAt: number;
}

/** The state of one step of the run. */
export interface StepState {
  status: InMemoryStepStatus;
  remainingDeps: number;
  remainingTasks: number;
  output?: Json;
  skipReason?: SkipReason;
  error?: string;
  /** Outputs of a map's tasks by index. */
  taskOutputs: Json[];
}

/** The engine's defaults for options a flow leaves unset (`pgflow.flow_option_default`). */
const DEFAULT_MAX_ATTEMPTS = 3;
const DEFAULT_BASE_DELAY = 1;

/** The largest retry delay SQL computes, in seconds (it caps at the `integer` range). */
const MAX_DELAY_SECONDS = 2_147_483_647;

/** What the run needs to know of its flow. */
export interface RunFlow {
  readonly steps: readonly StepDefinition[];
  readonly maxAttempts?: number;
  readonly baseDelay?: number;
}

/** One run in memory: its steps' states and the tasks that wait to run. */
export class InMemoryRun {
  status: "started" | "completed" | "failed" = "started";
  output: Json = null;
  error: string | undefined;
  readonly states: Map<string, StepState> = new Map();
  readonly queue: QueuedTask[] = [];
  readonly #flow: RunFlow;
  readonly #input: Json;
  readonly #now: () => number;
  readonly #dependents = new Map<string, StepDefinition[]>();
  #remainingSteps: number;

  /**
   * @param flow the flow's steps and options
   * @param input the run input, as stored
   * @param now the clock's time in milliseconds (retry and start delays count from it)
   */
  constructor(flow: RunFlow, input: Json, now: () => number) {
    this.#flow = flow;
    this.#now = now;
    this.#input = input;
    for (const step of flow.steps) {
      this.states.set(step.slug, {
        status: "created",
        remainingDeps: step.dependencies.length,
        remainingTasks: 0,
        taskOutputs: [],
      });
      for (const dep of step.dependencies) {
        this.#dependents.set(dep, [...(this.#dependents.get(dep) ?? []), step]);
      }
    }
    this.#remainingSteps = flow.steps.length;
  }

  /** `maxAttempts` of a step: its own, else the flow's, else the engine's default. */
  maxAttempts(step: StepDefinition): number {
    return step.options.maxAttempts ?? this.#flow.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  }

  /** The delay before the retry after failed attempt `attempt`, in seconds. */
  retryDelaySeconds(step: StepDefinition, attempt: number): number {
    const base = step.options.baseDelay ?? this.#flow.baseDelay ?? DEFAULT_BASE_DELAY;
    return Math.min(base * 2 ** (attempt - 1), MAX_DELAY_SECONDS);
  }

  /** `_start_ready_steps`: starts every step whose dependencies are done, until none is left. */
  startReadySteps(): void {
    let progressed = true;
    while (progressed && this.status === "started") {
      progressed = false;
      for (const step of this.#flow.steps) {
        const state = this.states.get(step.slug)!;
        if (this.status !== "started") return;
        if (state.status !== "created" || state.remainingDeps > 0) continue;
        if (!this.#conditionHolds(step)) {
          const mode: WhenMode = step.whenUnmet ?? "skip";
          if (mode === "fail") {
            return this.failRun(
              step.slug,
              `[CONDITION_UNMET] step ${step.slug}: its if/ifNot condition does not hold`,
            );
          }
          this.skipStep(step.slug, "condition_unmet", mode === "skip-cascade");
          progressed = true;
          continue;
        }
        let source: Json = null;
        let count = 1;
        if (step.kind === "map") {
          if (step.dependencies.length === 0) source = this.#input;
          else {
            const dep = this.states.get(step.dependencies[0])!;
            if (dep.status === "skipped") {
              this.skipStep(step.slug, "dependency_skipped", false);
              progressed = true;
              continue;
            }
            source = dep.output ?? null;
          }
          if (!Array.isArray(source)) {
            return this.failRun(
              step.slug,
              `[TYPE_VIOLATION] map step ${step.slug} needs an array to map over, got ${
                jsonbType(source)
              }`,
            );
          }
          count = source.length;
        }
        state.status = "started";
        state.remainingTasks = count;
        if (count === 0) {
          this.completeStep(step.slug, []);
          progressed = true;
          continue;
        }
        const visibleAt = this.#now() + (step.options.startDelay ?? 0) * 1000;
        for (let index = 0; index < count; index++) {
          const input = step.kind === "map"
            ? (source as Json[])[index]
            : step.dependencies.length === 0
            ? this.#input
            : this.#dependencyOutputs(step);
          this.queue.push({ step, index, input, attempt: 1, visibleAt });
        }
      }
    }
  }

  /** A task's attempt completed with `output` (as stored): `complete_task`. */
  taskCompleted(task: QueuedTask, output: Json): void {
    const state = this.states.get(task.step.slug)!;
    if (this.status !== "started" || state.status !== "started") return;
    state.taskOutputs[task.index] = output;
    state.remainingTasks--;
    if (state.remainingTasks === 0) {
      this.completeStep(task.step.slug, task.step.kind === "map" ? state.taskOutputs : output);
    }
    this.startReadySteps();
  }

  /**
   * A task's attempt failed: `_task_failed`. Returns the retry delay in seconds when the task is
   * queued again, `undefined` when its attempts are exhausted. `failRun` fails the run at once
   * (an input that fails the flow's schema).
   */
  taskFailed(
    task: QueuedTask,
    error: string,
    failRun = false,
    retryDelay?: number,
  ): number | undefined {
    if (failRun) {
      this.failRun(task.step.slug, error);
      return undefined;
    }
    const counted = task.attempt - (task.uncounted ?? 0);
    if (counted < this.maxAttempts(task.step)) {
      const delay = retryDelay ?? this.retryDelaySeconds(task.step, counted);
      this.queue.push({
        ...task,
        attempt: task.attempt + 1,
        visibleAt: this.#now() + delay * 1000,
      });
      return delay;
    }
    const mode: WhenMode = task.step.whenExhausted ?? "fail";
    if (mode === "fail") this.failRun(task.step.slug, error);
    else {
      this.states.get(task.step.slug)!.error = error;
      this.skipStep(task.step.slug, "handler_failed", mode === "skip-cascade");
      this.startReadySteps();
    }
    return undefined;
  }

  /**
   * A handler threw `RetryAfter`: `_task_uncounted`. The task is queued again after `delay`
   * seconds without the attempt counting, up to {@link MAX_DEFERRALS} times; past that the
   * deferral is a failed attempt naming the bound (`outcome` says which it was).
   */
  taskDeferred(
    task: QueuedTask,
    error: string,
    delay: number,
  ): { outcome: "deferred" | "failed"; error: string; retryDelay?: number } {
    const soFar = task.uncounted ?? 0;
    if (soFar >= MAX_DEFERRALS) {
      const text = `deferred ${soFar} times, the most one task may be without it counting as a ` +
        `failed attempt; ${error}`;
      return {
        outcome: "failed",
        error: text,
        retryDelay: this.taskFailed(task, text, false, delay),
      };
    }
    this.queue.push({
      ...task,
      attempt: task.attempt + 1,
      uncounted: soFar + 1,
      visibleAt: this.#now() + delay * 1000,
    });
    return { outcome: "deferred", error, retryDelay: delay };
  }

  /** `_complete_step`: completes the step, releases its dependents, counts it off the run. */
  completeStep(slug: string, output: Json): void {
    const state = this.states.get(slug)!;
    state.status = "completed";
    state.output = output;
    state.remainingTasks = 0;
    this.#release(slug);
    this.#countOff();
  }

  /** `_skip_step`: skips the step (its tasks are dropped); a cascade skips its dependents too. */
  skipStep(slug: string, reason: SkipReason, cascade: boolean): void {
    const state = this.states.get(slug)!;
    if (state.status !== "created" && state.status !== "started") return;
    state.status = "skipped";
    state.skipReason = reason;
    state.remainingTasks = 0;
    this.#drop((task) => task.step.slug === slug);
    this.#countOff();
    if (!cascade) return this.#release(slug);
    for (const dependent of this.#dependents.get(slug) ?? []) {
      if (this.states.get(dependent.slug)!.status === "created") {
        this.skipStep(dependent.slug, "dependency_skipped", true);
      }
    }
  }

  /** `_fail_run`: the step (if any) and the run fail; every outstanding task is dropped. */
  failRun(slug: string | undefined, error: string): void {
    if (slug !== undefined) {
      const state = this.states.get(slug)!;
      state.status = "failed";
      state.error = error;
    }
    this.status = "failed";
    this.error = error;
    this.#drop(() => true);
  }

  /** `_dependency_outputs`: the completed dependencies' outputs by slug (skipped ones absent). */
  #dependencyOutputs(step: StepDefinition): { [slug: string]: Json } {
    const outputs: { [slug: string]: Json } = {};
    for (const dep of step.dependencies) {
      const state = this.states.get(dep)!;
      if (state.status === "completed") outputs[dep] = state.output ?? null;
    }
    return outputs;
  }

  /** `if` / `ifNot` on the run input (root steps) or the dependency outputs (dependents). */
  #conditionHolds(step: StepDefinition): boolean {
    const required = step.requiredInputPattern;
    const forbidden = step.forbiddenInputPattern;
    if (!required.defined && !forbidden.defined) return true;
    const subject = step.dependencies.length === 0 ? this.#input : this.#dependencyOutputs(step);
    return (!required.defined || jsonbContains(subject, required.value)) &&
      (!forbidden.defined || !jsonbContains(subject, forbidden.value));
  }

  /** Dependents that still wait count a finished (completed or `'skip'`ped) dependency off. */
  #release(slug: string): void {
    for (const dependent of this.#dependents.get(slug) ?? []) {
      const state = this.states.get(dependent.slug)!;
      if (state.status === "created") state.remainingDeps--;
    }
  }

  /** `_count_off_step` and `_run_output`: the run completes with its completed leaves' outputs. */
  #countOff(): void {
    this.#remainingSteps--;
    if (this.#remainingSteps > 0 || this.status !== "started") return;
    const output: { [slug: string]: Json } = {};
    for (const step of this.#flow.steps) {
      const state = this.states.get(step.slug)!;
      if (state.status === "completed" && !this.#dependents.has(step.slug)) {
        output[step.slug] = state.output ?? null;
      }
    }
    this.status = "completed";
    this.output = output;
  }

  #drop(which: (task: QueuedTask) => boolean): void {
    for (let i = this.queue.length - 1; i >= 0; i--) {
      if (which(this.queue[i])) this.queue.splice(i, 1);
    }
  }
}

/** `jsonb_typeof` of a stored value. */
function jsonbType(value: Json): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (isExactNumber(value)) return "number";
  return typeof value;
}
