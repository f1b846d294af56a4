/**
 * The local adapter's shutdown hook: in plain Deno, SIGINT and SIGTERM stop the worker gracefully
 * and then exit, so Ctrl-C during a demo never leaves tasks started.
 */
export function onTerminationSignal(stop: () => Promise<void>): void {
  let stopping = false;
  const handler = () => {
    if (stopping) Deno.exit(130); // a second signal means "now"
    stopping = true;
    stop().finally(() => Deno.exit(0));
  };
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    try {
      Deno.addSignalListener(signal, handler);
    } catch {
      // Not every platform supports every signal (SIGTERM on Windows); SIGINT suffices there.
    }
  }
}
