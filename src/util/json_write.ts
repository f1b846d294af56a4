/**
 * Writing a value as the JSON text `jsonb` will store, refusing what would be stored as something
 * else or not at all.
 *
 * @module
 */

/**
 * A value that cannot become the JSON `jsonb` stores: `path` says where (`$` is the value itself,
 * then `.key`, `["odd key"]`, `[index]`), `problem` what is wrong there. Never quotes the data.
 */
export class JsonValueError extends TypeError {
  /** Where the value is, e.g. `$.items[3].name`. */
  readonly path: string;
  /** What is wrong with it, e.g. `is NaN`. */
  readonly problem: string;

  constructor(path: string, problem: string) {
    super(`${path} ${problem}`);
    this.name = "JsonValueError";
    this.path = path;
    this.problem = problem;
  }
}

/**
 * `JSON.stringify(value)`, with what it would change or `jsonb` would refuse found first:
 * - a bigint (JSON.stringify throws without saying where),
 * - NaN or ±Infinity (JSON.stringify writes `null`: the number would be lost),
 * - U+0000 or a lone surrogate in a string or a key (`jsonb` refuses both).
 *
 * Each throws a {@link JsonValueError} whose path starts with `root` (e.g. `output.items[2]`).
 * `undefined` for a value JSON has no text for (`undefined`, a function, a symbol). Other errors
 * (a cycle, a throwing `toJSON`) are `JSON.stringify`'s own. The value is walked only when its
 * text shows that a problem may exist (a `null`, a `\u` escape) or `JSON.stringify` threw: the
 * everyday value costs one `JSON.stringify` and two scans of its text.
 */
export function jsonText(value: unknown, root = "$"): string | undefined {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw findProblem(value, root) ?? error;
  }
  if (
    text !== undefined &&
    (text.includes("null") || (text.includes("\\u") && UNSTORABLE_ESCAPE.test(text)))
  ) {
    const found = findProblem(value, root);
    if (found !== undefined) throw found;
  }
  return text;
}

/**
 * `\u0000` or a surrogate escape in JSON.stringify's text: it escapes a surrogate only when it is
 * alone (a pair is written as it is). An even run of backslashes before it is escaped backslashes.
 */
const UNSTORABLE_ESCAPE = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f])/;

/** U+0000, and lone surrogates. */
const UNSTORABLE_CHAR = /\0|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * The first problem in `value`, walking it as JSON.stringify does (`toJSON`, boxed primitives,
 * members whose value JSON leaves out skipped, exact numbers as they are).
 */
function findProblem(value: unknown, root: string): JsonValueError | undefined {
  const path: (string | number)[] = [];
  const seen = new Set<object>();
  const problem = (text: string) => new JsonValueError(where(root, path), text);
  const visit = (v: unknown, key: string | number): JsonValueError | undefined => {
    if (
      v !== null && typeof v === "object" &&
      typeof (v as { toJSON?: unknown }).toJSON === "function"
    ) {
      v = (v as { toJSON(key: string): unknown }).toJSON(String(key));
    }
    if (v instanceof Number || v instanceof String || v instanceof Boolean) v = v.valueOf();
    switch (typeof v) {
      case "number":
        return Number.isFinite(v) ? undefined : problem(
          `is ${v}, which JSON cannot hold (it would be stored as null); use null or a string`,
        );
      case "bigint":
        return problem(
          "is a bigint, which JSON.stringify cannot write; use exactNumber(n) for an exact JSON " +
            "number, or String(n)",
        );
      case "string":
        return UNSTORABLE_CHAR.test(v) ? problem(`is a string with ${unstorable(v)}`) : undefined;
      case "object":
        break;
      default:
        return undefined;
    }
    if (v === null || isRaw(v) || seen.has(v)) return undefined;
    seen.add(v);
    try {
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          path.push(i);
          const found = visit(v[i], i);
          path.pop();
          if (found !== undefined) return found;
        }
        return undefined;
      }
      for (const k of Object.keys(v)) {
        const item = (v as Record<string, unknown>)[k];
        if (item === undefined || typeof item === "function" || typeof item === "symbol") continue;
        path.push(k);
        const found = UNSTORABLE_CHAR.test(k)
          ? problem(`is a key with ${unstorable(k)}`)
          : visit(item, k);
        path.pop();
        if (found !== undefined) return found;
      }
      return undefined;
    } finally {
      seen.delete(v);
    }
  };
  return visit(value, "");
}

function unstorable(text: string): string {
  return `${
    text.includes("\0") ? "U+0000" : "a lone surrogate (half of a UTF-16 pair)"
  }, which Postgres jsonb cannot store; remove it, or encode the text (e.g. base64)`;
}

function isRaw(value: object): boolean {
  const api = JSON as unknown as { isRawJSON?: (value: unknown) => boolean };
  return api.isRawJSON?.(value) === true;
}

/** `root`, then `.key` for plain keys, `["…"]` for others (at most 60 characters), `[i]`. */
function where(root: string, path: readonly (string | number)[]): string {
  let out = root;
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else if (/^[A-Za-z_$][\w$]*$/.test(part)) out += `.${part}`;
    else {
      const quoted = JSON.stringify(part.replace(UNSTORABLE_CHAR_ALL, "\uFFFD"));
      out += `[${quoted.length > 60 ? `${quoted.slice(0, 56)}…"` : quoted}]`;
    }
  }
  return out;
}

const UNSTORABLE_CHAR_ALL = new RegExp(UNSTORABLE_CHAR.source, "g");
