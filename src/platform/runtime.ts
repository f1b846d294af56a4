/**
 * The Supabase Edge runtime's global, when present. Only `waitUntil` is used: it keeps the isolate
 * alive while the worker runs.
 */
export interface EdgeRuntimeGlobal {
  /** Extends the isolate's lifetime until `promise` settles. */
  waitUntil(promise: Promise<unknown>): void;
}

/** The `EdgeRuntime` global, or `undefined` outside Supabase Edge Functions. */
export function edgeRuntime(): EdgeRuntimeGlobal | undefined {
  const candidate = (globalThis as { EdgeRuntime?: Partial<EdgeRuntimeGlobal> }).EdgeRuntime;
  return typeof candidate?.waitUntil === "function" ? candidate as EdgeRuntimeGlobal : undefined;
}

/**
 * Calls `listener` when the platform is about to end the isolate (the `beforeunload` event), with
 * the reason the Supabase Edge runtime gives in `detail.reason` (`WallClockTime`, `CPUTime`,
 * `Memory`, `EarlyDrop`), or `undefined` where the event carries none (plain Deno).
 *
 * @example
 * ```ts
 * import { onBeforeUnload } from "./runtime.ts";
 *
 * onBeforeUnload((reason) => console.log(`ending: ${reason ?? "unknown"}`));
 * ```
 */
export function onBeforeUnload(listener: (reason: string | undefined) => void): void {
  globalThis.addEventListener("beforeunload", (event) => {
    const detail = (event as Event & { detail?: { reason?: unknown } }).detail;
    listener(typeof detail?.reason === "string" ? detail.reason : undefined);
  });
}
