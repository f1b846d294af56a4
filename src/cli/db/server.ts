/**
 * Running PostgreSQL's own tools for a local cluster: as the current user, or, as root, as an
 * unprivileged user (PostgreSQL refuses to run as root).
 *
 * @module
 */

/**
 * The user the server runs as: `undefined` (the current user) unless this process is root, then
 * `postgres`, else `nobody`.
 *
 * @example
 * ```ts
 * import { serverUser } from "./server.ts";
 *
 * const user = await serverUser(); // "postgres" when run as root
 * ```
 */
export async function serverUser(): Promise<string | undefined> {
  if (Deno.uid() !== 0) return undefined;
  for (const name of ["postgres", "nobody"]) {
    const out = await new Deno.Command("id", { args: ["-u", name], stdout: "null", stderr: "null" })
      .output();
    if (out.success) return name;
  }
  throw new Error(
    "running as root, but neither a 'postgres' nor a 'nobody' user exists for the server to run " +
      "as (PostgreSQL refuses root): create one (useradd --system postgres) or run as a normal user",
  );
}

/** What a tool printed and how it ended. */
export interface ToolResult {
  /** Exit code. */
  readonly code: number;
  /** stdout and stderr, joined. */
  readonly output: string;
}

/**
 * Runs `cmd args` as `user` (through `runuser`) or as the current user, and returns its exit code
 * and output without throwing.
 *
 * @example
 * ```ts
 * import { runTool } from "./server.ts";
 *
 * const { code } = await runTool("/usr/lib/postgresql/15/bin/pg_ctl", ["--version"], undefined);
 * ```
 */
export async function runTool(
  cmd: string,
  args: readonly string[],
  user: string | undefined,
): Promise<ToolResult> {
  const [bin, argv] = user ? ["runuser", ["-u", user, "--", cmd, ...args]] : [cmd, [...args]];
  const out = await new Deno.Command(bin, { args: argv, stdout: "piped", stderr: "piped" })
    .output();
  const text = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
  return { code: out.code, output: text };
}

/**
 * Like {@link runTool}, but a non-zero exit is an error carrying the command and its output.
 *
 * @example
 * ```ts
 * import { run } from "./server.ts";
 *
 * await run("/usr/lib/postgresql/15/bin/pg_ctl", ["--version"], undefined);
 * ```
 */
export async function run(
  cmd: string,
  args: readonly string[],
  user: string | undefined,
): Promise<string> {
  const { code, output } = await runTool(cmd, args, user);
  if (code !== 0) throw new Error(`${cmd} ${args.join(" ")} failed:\n${output}`);
  return output;
}

/**
 * A free TCP port on the loopback interface: the first free one of `preferred`, else one the
 * system picks.
 *
 * @example
 * ```ts
 * import { freePort } from "./server.ts";
 *
 * const port = freePort();
 * ```
 */
export function freePort(preferred: Iterable<number> = []): number {
  for (const port of preferred) if (portIsFree(port)) return port;
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/**
 * Whether nothing listens on `127.0.0.1:port`.
 *
 * @example
 * ```ts
 * import { portIsFree } from "./server.ts";
 *
 * console.log(portIsFree(54330));
 * ```
 */
export function portIsFree(port: number): boolean {
  try {
    Deno.listen({ hostname: "127.0.0.1", port }).close();
    return true;
  } catch {
    return false;
  }
}
