/** Subprocess helpers for end-to-end tests: spawn a Deno script, keep its output, free ports. */

/** A running child process and the output it wrote so far. */
export interface Child {
  process: Deno.ChildProcess;
  output: () => string;
}

/** Spawns `deno run -A <script>` with `env` added; stdout and stderr are collected. */
export function spawnDeno(script: string, env: Record<string, string>): Child {
  const process = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", script],
    env: { NO_COLOR: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let text = "";
  const decoder = new TextDecoder();
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream) text += decoder.decode(chunk, { stream: true });
  };
  drain(process.stdout);
  drain(process.stderr);
  return { process, output: () => text };
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
