/** A JSON scalar: what `JSON.stringify` writes as-is. */
export type JsonPrimitive = string | number | boolean | null;

/**
 * Any JSON value: step outputs, flow inputs and condition patterns are stored as `jsonb`.
 *
 * @example
 * ```ts
 * import type { Json } from "@pgflow/shared";
 *
 * const value: Json = { labels: ["bug", "urgent"], score: 0.9, archived: false, owner: null };
 * ```
 */
export type Json = JsonPrimitive | readonly Json[] | { readonly [key: string]: Json };
