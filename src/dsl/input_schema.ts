/**
 * A flow's input schema, through Standard Schema v1 (https://standardschema.dev): the small
 * interface zod (3.24+), valibot (1.0+), arktype (2.0+) and others implement, so any of them works
 * and none is bundled. The client checks a run's input with it before starting, and the worker
 * before a step of the run runs.
 *
 * @module
 */
import { FlowDefinitionError } from "./errors.ts";
import { InputRedactor } from "./input_redaction.ts";

/**
 * A Standard Schema v1: what `new Flow({ slug, input: schema })` accepts. Written out here (it is
 * an interface, not a library) so that no validation library is a dependency.
 *
 * @example
 * ```ts
 * import type { StandardSchemaV1 } from "@pgflow/shared";
 *
 * const threadInput: StandardSchemaV1<unknown, { threadId: string }> = {
 *   "~standard": {
 *     version: 1,
 *     vendor: "hand-written",
 *     validate: (value) =>
 *       typeof (value as { threadId?: unknown })?.threadId === "string"
 *         ? { value: value as { threadId: string } }
 *         : { issues: [{ message: "threadId must be a string", path: ["threadId"] }] },
 *   },
 * };
 * ```
 */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  /** The schema's Standard Schema properties. */
  readonly "~standard": StandardSchemaV1Props<Input, Output>;
}

/**
 * The `~standard` properties of a {@link StandardSchemaV1}.
 *
 * @example
 * ```ts
 * import type { StandardSchemaV1Props } from "@pgflow/shared";
 *
 * const any: StandardSchemaV1Props<unknown, unknown> = {
 *   version: 1,
 *   vendor: "none",
 *   validate: (value) => ({ value }),
 * };
 * ```
 */
export interface StandardSchemaV1Props<Input = unknown, Output = Input> {
  /** The version of the standard: 1. */
  readonly version: 1;
  /** The library that made the schema (`zod`, `valibot`, `arktype`, ...). */
  readonly vendor: string;
  /** Checks `value`: its (possibly transformed) value, or the issues found. */
  readonly validate: (
    value: unknown,
  ) => StandardSchemaV1Result<Output> | Promise<StandardSchemaV1Result<Output>>;
  /** Compile-time only: the schema's input and output types. */
  readonly types?: StandardSchemaV1Types<Input, Output> | undefined;
}

/**
 * What `validate` answers: `{ value }` when the value passes, `{ issues }` when it does not.
 *
 * @example
 * ```ts
 * import type { StandardSchemaV1Result } from "@pgflow/shared";
 *
 * const failed: StandardSchemaV1Result<string> = { issues: [{ message: "Required" }] };
 * ```
 */
export type StandardSchemaV1Result<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<StandardSchemaV1Issue> };

/**
 * One problem a schema found: its message and where (the path of keys into the value).
 *
 * @example
 * ```ts
 * import type { StandardSchemaV1Issue } from "@pgflow/shared";
 *
 * const issue: StandardSchemaV1Issue = { message: "Expected string", path: ["items", 0, "id"] };
 * ```
 */
export interface StandardSchemaV1Issue {
  /** What is wrong, as the schema says it. */
  readonly message: string;
  /** Where: keys, or `{ key }` segments, from the root of the value. */
  readonly path?: ReadonlyArray<PropertyKey | StandardSchemaV1PathSegment> | undefined;
}

/**
 * One segment of an issue's path, in its object form.
 *
 * @example
 * ```ts
 * import type { StandardSchemaV1PathSegment } from "@pgflow/shared";
 *
 * const segment: StandardSchemaV1PathSegment = { key: "threadId" };
 * ```
 */
export interface StandardSchemaV1PathSegment {
  /** The key. */
  readonly key: PropertyKey;
}

/**
 * The compile-time types a schema carries.
 *
 * @example
 * ```ts
 * import type { StandardSchemaV1Types } from "@pgflow/shared";
 *
 * type T = StandardSchemaV1Types<string, number>["output"]; // number
 * ```
 */
export interface StandardSchemaV1Types<Input = unknown, Output = Input> {
  /** What the schema accepts. */
  readonly input: Input;
  /** What it produces (after its transforms). */
  readonly output: Output;
}

/**
 * The option `new Flow` takes for an input schema; the flow's input type is the schema's output.
 *
 * @example
 * ```ts
 * import type { FlowInputSchemaOption } from "@pgflow/shared";
 *
 * const none: FlowInputSchemaOption<{ id: string }> = {};
 * ```
 */
export interface FlowInputSchemaOption<TInput> {
  /**
   * A Standard Schema (zod, valibot, arktype, ...) the run input must pass: the client checks it
   * before starting a run, the worker before a step of the run runs. The flow's input type is the
   * schema's output type.
   */
  readonly input?: StandardSchemaV1<unknown, TInput>;
}

/** Throws a {@link FlowDefinitionError} unless `schema` is a Standard Schema v1 (or absent). */
export function checkInputSchema(
  schema: unknown,
  where: string,
): StandardSchemaV1 | undefined {
  if (schema === undefined) return undefined;
  const props = (schema as { "~standard"?: Partial<StandardSchemaV1Props> } | null)?.[
    "~standard"
  ];
  if (
    (typeof schema !== "object" && typeof schema !== "function") || schema === null ||
    props === null || typeof props !== "object" || props.version !== 1 ||
    typeof props.validate !== "function"
  ) {
    throw new FlowDefinitionError(
      `${where}: input is not a Standard Schema v1 (an object with "~standard": { version: 1, ` +
        `validate }); pass a zod, valibot or arktype schema, or any schema implementing ` +
        `https://standardschema.dev`,
    );
  }
  return schema as StandardSchemaV1;
}

/** The outcome of {@link checkInput}: the schema's value, or its issues. */
export type InputCheck =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly issues: readonly StandardSchemaV1Issue[] };

/**
 * Runs `schema` on `value`. A schema that throws rejects with its error (a bug in the schema, not
 * an issue of the value); an answer that is neither `{ value }` nor `{ issues }` rejects too.
 */
export async function checkInput(schema: StandardSchemaV1, value: unknown): Promise<InputCheck> {
  const result = await schema["~standard"].validate(value);
  if (result !== null && typeof result === "object") {
    if (Array.isArray(result.issues)) return { ok: false, issues: result.issues };
    if ("value" in result) return { ok: true, value: result.value };
  }
  throw new TypeError(
    `the input schema (${schema["~standard"].vendor}) answered neither { value } nor { issues }`,
  );
}

/**
 * One issue as the engine reports it: the schema's message, with every value of the input it
 * quotes replaced by `[redacted]` (however the library prints it: a number, a string quoted or
 * not, `true`, `null`), and the path as plain keys. Never a value of the input.
 *
 * @example
 * ```ts
 * import type { InputIssue } from "@pgflow/shared";
 *
 * const issue: InputIssue = { message: "Expected string, received number", path: ["threadId"] };
 * ```
 */
export interface InputIssue {
  /** What is wrong, as the schema says it, without the input's values. */
  readonly message: string;
  /** Where: the keys from the input's root (empty for the input itself). */
  readonly path: readonly PropertyKey[];
}

/**
 * The schema's issues as {@link InputIssue}s: paths as plain keys, and messages without the
 * values of `input` (see `InputRedactor`), so none ends up in an error, a log or a run record.
 */
export function inputIssues(
  issues: readonly StandardSchemaV1Issue[],
  input: unknown,
): InputIssue[] {
  const redactor = new InputRedactor(input);
  return issues.map((issue) => {
    const path = (issue.path ?? []).map(keyOf);
    return Object.freeze({
      message: redactor.redact(String(issue.message), path),
      path: Object.freeze(path),
    });
  });
}

/** How many issues an error lists; the rest are counted. */
export const MAX_LISTED_ISSUES = 10;

/**
 * The issues as one line: `path: message` for each (at most {@link MAX_LISTED_ISSUES}), `; `
 * between them. For example `{ message: "Expected string", path: ["items", 0, "id"] }` gives
 * `items[0].id: Expected string`.
 */
export function formatIssues(issues: readonly InputIssue[]): string {
  if (issues.length === 0) return "the schema reported a failure without issues";
  const listed = issues.slice(0, MAX_LISTED_ISSUES).map((issue) =>
    issue.path.length === 0 ? issue.message : `${pathText(issue.path)}: ${issue.message}`
  );
  const more = issues.length - listed.length;
  return listed.join("; ") + (more > 0 ? `; and ${more} more` : "");
}

function keyOf(segment: PropertyKey | StandardSchemaV1PathSegment): PropertyKey {
  return segment !== null && typeof segment === "object" ? segment.key : segment;
}

function pathText(path: readonly PropertyKey[]): string {
  let text = "";
  for (const key of path) {
    if (typeof key === "number") text += `[${key}]`;
    else if (typeof key === "string" && /^[A-Za-z_$][\w$]*$/.test(key)) {
      text += text === "" ? key : `.${key}`;
    } else text += `[${JSON.stringify(String(key))}]`;
  }
  return text;
}
