import type { Json, JsonPrimitive } from "../util/json.ts";

export type { Json, JsonPrimitive } from "../util/json.ts";

/**
 * Maps `T` to itself when every part of it survives a JSON round trip and to a type with `never`
 * in the offending places otherwise. Handlers declare their outputs through the constraint
 * `TOut extends JsonOutput<TOut>`, so returning a function, a `Date`, a `Map`, a symbol, a bigint
 * or nothing at all is a compile error instead of data silently lost in `jsonb`.
 *
 * `undefined` is accepted inside a union (an optional property, `string | undefined`) because
 * JSON drops it or writes `null`; a value that can only be `undefined` (or `void`) is rejected.
 *
 * @example
 * ```ts
 * import type { JsonOutput } from "@pgflow/shared";
 *
 * type Ok = JsonOutput<{ id: string; tags?: string[] }>; // { id: string; tags?: string[] }
 * type Bad = JsonOutput<{ at: Date }>; // { at: { ...methods: never } }
 * ```
 */
export type JsonOutput<T> = [T] extends [undefined | void] ? never : JsonValueCheck<T>;

/** The recursive part of {@link JsonOutput}; distributes over unions. */
export type JsonValueCheck<T> = 0 extends (1 & T) ? T // `any` opts out of checking, as everywhere in TS
  : T extends JsonPrimitive | undefined ? T
  : T extends ((...args: never[]) => unknown) | symbol | bigint ? never
  : T extends readonly unknown[] ? { [K in keyof T]: JsonValueCheck<T[K]> }
  : T extends object ? { [K in keyof T]: JsonValueCheck<T[K]> }
  : never;

/**
 * A deep partial of `T` used by `if`/`ifNot`: SQL matches it with jsonb containment (`@>`), so
 * objects may list a subset of keys, arrays list elements that must be present, and scalars must
 * match exactly.
 *
 * @example
 * ```ts
 * import type { ContainmentPattern } from "@pgflow/shared";
 *
 * const pattern: ContainmentPattern<{ user: { plan: string; id: number } }> = {
 *   user: { plan: "pro" },
 * };
 * ```
 */
export type ContainmentPattern<T> = 0 extends (1 & T) ? Json
  : T extends readonly (infer E)[] ? readonly ContainmentPattern<E>[]
  : T extends object ? { readonly [K in keyof T]?: ContainmentPattern<T[K]> }
  : T;

/**
 * Checks at run time that a value is plain JSON (used for condition patterns, which are copied
 * into SQL). Returns a path to the first offending part, or `undefined` when the value is JSON.
 */
export function findNonJson(value: unknown, path: string = "$"): string | undefined {
  if (value === null) return undefined;
  switch (typeof value) {
    case "string":
    case "boolean":
      return undefined;
    case "number":
      return Number.isFinite(value) ? undefined : path;
    case "object": {
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const found = findNonJson(value[i], `${path}[${i}]`);
          if (found !== undefined) return found;
        }
        return undefined;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return path;
      for (const [key, item] of Object.entries(value)) {
        const found = findNonJson(item, `${path}.${key}`);
        if (found !== undefined) return found;
      }
      return undefined;
    }
    default:
      return path;
  }
}

/**
 * Returns a copy of a JSON value with object keys sorted, so that the same pattern always
 * serialises to the same text (the startup compiler compares shapes).
 */
export function canonicalJson(value: Json): Json {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((item: Json) => canonicalJson(item));
  const source = value as { readonly [key: string]: Json };
  const sorted: { [key: string]: Json } = {};
  for (const key of Object.keys(source).sort()) sorted[key] = canonicalJson(source[key]);
  return sorted;
}
