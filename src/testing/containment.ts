/**
 * `jsonb @>` (containment) in memory, as Postgres evaluates the `if` / `ifNot` conditions of
 * `pgflow._start_ready_steps` (supabase/schemas/0250_run_progress.sql).
 *
 * @module
 */
import type { Json } from "../dsl/json.ts";
import { isExactNumber } from "../util/json_parse.ts";

/**
 * Whether `container @> pattern` holds: an object contains an object whose every key it has with
 * a value that contains the pattern's; an array contains an array whose every element is
 * contained by one of its elements (order and repeats do not matter); scalars must be equal
 * (numbers by value, so `1` and `1.0` match). As in Postgres, an array at the top level also
 * contains a scalar it holds (`["a", "b"] @> "a"`), but nowhere deeper.
 *
 * @example
 * ```ts ignore
 * jsonbContains({ plan: "pro", seats: 3 }, { plan: "pro" }); // true
 * jsonbContains({ tags: ["a", "b"] }, { tags: ["b"] }); // true
 * ```
 */
export function jsonbContains(container: Json, pattern: Json): boolean {
  if (Array.isArray(container) && !isContainer(pattern)) {
    return container.some((item) => !isContainer(item) && scalarEqual(item, pattern));
  }
  return contains(container, pattern);
}

function isContainer(value: Json): value is Json[] | { [key: string]: Json } {
  return value !== null && typeof value === "object" && !isExactNumber(value);
}

function contains(container: Json, pattern: Json): boolean {
  if (!isContainer(container) || !isContainer(pattern)) {
    return !isContainer(container) && !isContainer(pattern) && scalarEqual(container, pattern);
  }
  if (Array.isArray(container) !== Array.isArray(pattern)) return false;
  if (Array.isArray(pattern)) {
    const items = container as Json[];
    return pattern.every((wanted) => items.some((item) => contains(item, wanted)));
  }
  const object = container as { [key: string]: Json };
  return Object.keys(pattern).every((key) =>
    Object.hasOwn(object, key) && contains(object[key], pattern[key])
  );
}

/** Scalars as jsonb compares them: numbers by value (an exact number by its decimal text). */
function scalarEqual(a: Json, b: Json): boolean {
  const na = numeric(a);
  const nb = numeric(b);
  if (na !== undefined || nb !== undefined) {
    return na === nb;
  }
  return a === b;
}

/** A number's canonical decimal text, or `undefined` for a non-number. */
function numeric(value: Json): string | undefined {
  if (typeof value === "number") return canonical(String(value));
  if (isExactNumber(value)) return canonical((value as { rawJSON: string }).rawJSON);
  return undefined;
}

/** Decimal text without exponent, leading zeros or trailing fractional zeros. */
function canonical(text: string): string {
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (match === null) return text;
  const [, sign, whole, fraction = "", exponent = "0"] = match;
  let digits = whole + fraction;
  let point = whole.length + Number(exponent);
  if (point < 0) {
    digits = "0".repeat(-point) + digits;
    point = 0;
  }
  if (point > digits.length) digits += "0".repeat(point - digits.length);
  const int = digits.slice(0, point).replace(/^0+/, "") || "0";
  const frac = digits.slice(point).replace(/0+$/, "");
  const body = frac === "" ? int : `${int}.${frac}`;
  return body === "0" ? "0" : sign + body;
}
