/** Subprocess helpers for end-to-end tests: spawn a Deno script, keep its output, free ports. */
import { type RunningDeno, spawnDeno as spawnDenoCommand } from "../package/deno_cmd.ts";

/** A running child process and the output it wrote so far (see `RunningDeno.exited`). */
export type Child = RunningDeno;

/** Spawns `deno run -A <script>` with `env` added; stdout and stderr are collected. */
export function spawnDeno(script: string, env: Record<string, string>): Child {
  return spawnDenoCommand(["run", "-A", script], { env });
}

/** A TCP port that was free a moment ago. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** Kills a child (if still running) and waits for it to exit. */
export async function killChild(child: Child, signal: Deno.Signal = "SIGKILL"): Promise<void> {
  try {
    child.process.kill(signal);
  } catch {
    // Already exited.
  }
  await child.process.status;
}

/**
 * Waits up to `ms` for a child to exit (after sending it `signal`, if given), and kills it after
 * that. Returns whether it exited by itself: a process that hangs on its way out is then the
 * test's finding, never the test's hang.
 */
export async function exitWithin(child: Child, ms: number, signal?: Deno.Signal): Promise<boolean> {
  if (signal) {
    try {
      child.process.kill(signal);
    } catch {
      // Already exited.
    }
  }
  let timer: ReturnType<typeof setTimeout> | undefined;
  const exited = await Promise.race([
    child.process.status.then(() => true),
    new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), ms)),
  ]);
  clearTimeout(timer);
  if (!exited) await killChild(child);
  return exited;
}
