/**
 * A (flow, step) pair as one string, the key of every map and set of pairs in the engine: the flow
 * slug, U+001F, the step slug. Slugs never hold U+001F (letters, digits and underscores only), so
 * no two pairs share a key. The SQL side keys pairs the same way (`flow || chr(31) || step`).
 *
 * @example
 * ```ts
 * import { pairKey } from "./pair_key.ts";
 *
 * pairKey("thread_triage_v1", "classify"); // "thread_triage_v1\u001fclassify"
 * ```
 */
export function pairKey(flow: string, step: string): string {
  return `${flow}\u001f${step}`;
}

/**
 * The {@link pairKey}s of `pairs`, for membership tests.
 *
 * @example
 * ```ts
 * import { pairKey, pairKeys } from "./pair_key.ts";
 *
 * pairKeys([["triage_v1", "a"]]).has(pairKey("triage_v1", "a")); // true
 * ```
 */
export function pairKeys(pairs: Iterable<readonly [flow: string, step: string]>): Set<string> {
  const keys = new Set<string>();
  for (const [flow, step] of pairs) keys.add(pairKey(flow, step));
  return keys;
}
