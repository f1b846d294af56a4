/**
 * Waits for `promise` to settle, but at most `ms`: resolves with whether it settled in time.
 * Never rejects (a rejection counts as settled: the caller waited for the end, not the value),
 * and clears its timer either way, so a caller that goes on leaves nothing pending.
 */
export async function settlesWithin(promise: PromiseLike<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      Promise.resolve(promise).then(() => true, () => true),
      new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), ms)),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
