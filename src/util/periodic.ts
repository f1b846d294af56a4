import { sleep } from "./backoff.ts";

/**
 * Runs `tick` every `intervalMs` (never overlapping itself) until `signal` aborts; resolves when
 * the last tick has finished. The first tick comes after `firstDelayMs` (default `intervalMs`): a
 * random one spreads the first ticks of many workers started together.
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
