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
