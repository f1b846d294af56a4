import { sleep } from "./backoff.ts";

/**
 * Runs `tick` every `intervalMs` (never overlapping itself) until `signal` aborts; resolves when
 * the last tick has finished. `jitter` spreads the first tick so many workers do not fire at once.
 */
export async function every(
  intervalMs: number,
  signal: AbortSignal,
  tick: () => Promise<void>,
  options: { readonly firstDelayMs?: number } = {},
): Promise<void> {
  await sleep(options.firstDelayMs ?? intervalMs, signal);
  while (!signal.aborted) {
    await tick();
    await sleep(intervalMs, signal);
  }
}
