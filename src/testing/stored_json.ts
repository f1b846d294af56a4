/**
 * Values as `jsonb` stores them and a worker reads them back, for runs in memory.
 *
 * @module
 */
import type { Json } from "../dsl/json.ts";
import { isExactNumber, parseJsonb } from "../util/json_parse.ts";

const utf8 = new TextEncoder();

/**
 * JSON text (as the worker sends it) read back as a handler would receive it from the database:
 * numbers a double cannot hold as `ExactNumber`s, and object keys in `jsonb`'s order (shorter keys
 * first, then by their UTF-8 bytes), which is the order `Object.keys` shows a worker.
 *
 * @example
 * ```ts ignore
 * Object.keys(storedJson('{"bb":1,"a":2}') as object); // ["a", "bb"]
 * ```
 */
export function storedJson(text: string): Json {
  return jsonbOrder(parseJsonb(text));
}

function jsonbOrder(value: Json): Json {
  if (value === null || typeof value !== "object" || isExactNumber(value)) return value;
  if (Array.isArray(value)) return value.map(jsonbOrder);
  const object = value as { readonly [key: string]: Json };
  const ordered: { [key: string]: Json } = {};
  for (const key of Object.keys(object).sort(compareKeys)) {
    // defineProperty: a "__proto__" key is data, as in jsonb, not the object's prototype.
    Object.defineProperty(ordered, key, {
      value: jsonbOrder(object[key]),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return ordered;
}

function compareKeys(a: string, b: string): number {
  const x = utf8.encode(a);
  const y = utf8.encode(b);
  if (x.length !== y.length) return x.length - y.length;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i] - y[i];
  return 0;
}
