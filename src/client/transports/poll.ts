import type { Subscription, WakeSource } from "../backend.ts";

/**
 * No push at all: the watcher reads the run on a timer. Used behind a transaction pooler, where a
 * LISTEN lasts only as long as the transaction it ran in.
 */
export function pollSource(): WakeSource {
  const none: Subscription = { close: () => Promise.resolve() };
  return {
    name: "poll",
    pushes: false,
    subscribe: () => Promise.resolve(none),
    close: () => Promise.resolve(),
  };
}
