/**
 * Helpers for the packaging tests: run `deno` subcommands as a user would (in a chosen directory,
 * with a chosen environment), and find this repository's files by URL.
 *
 * @module
 */

/** The repository root (a directory path ending in `/`). */
export const REPO_ROOT: string = new URL("../../", import.meta.url).pathname;

/** What a finished `deno` subprocess printed. */
export interface DenoResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Options of {@link deno}. */
export interface DenoOptions {
  /** Working directory; default the test's. */
  readonly cwd?: string;
  /** Variables added to the environment. */
  readonly env?: Record<string, string>;
}

/**
 * Runs `deno <args>` to completion and returns its exit code and output (colours off).
 *
 * @example
 * ```ts
 * const { code, stderr } = await deno(["check", "main.ts"], { cwd: dir });
 * ```
 */
export async function deno(args: string[], options: DenoOptions = {}): Promise<DenoResult> {
  const output = await new Deno.Command(Deno.execPath(), {
    args,
    cwd: options.cwd,
    env: { NO_COLOR: "1", ...options.env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder();
  return {
    code: output.code,
    stdout: text.decode(output.stdout),
    stderr: text.decode(output.stderr),
  };
}

/** Throws with the command's output when it did not exit 0. */
export function assertSucceeded(what: string, result: DenoResult): void {
  if (result.code !== 0) {
    throw new Error(
      `${what} exited ${result.code}\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`,
    );
  }
}

/** One module of `deno info --json`, with the dependencies it names and what they resolved to. */
export interface GraphModule {
  readonly specifier: string;
  readonly error?: string;
  readonly dependencies?: readonly {
    readonly specifier: string;
    readonly code?: { readonly specifier?: string; readonly error?: string };
    readonly type?: { readonly specifier?: string; readonly error?: string };
    /** An `import()`: loaded when it runs, not with the module. */
    readonly isDynamic?: boolean;
  }[];
}

/** The module graph `deno info --json` prints. */
export interface ModuleGraph {
  readonly roots: readonly string[];
  readonly modules: readonly GraphModule[];
}

/**
 * The import graph of `entry` as Deno resolves it with `args` (e.g. `--config ...`), read with
 * `deno info --json` from `cwd`.
 */
export async function moduleGraph(
  entry: string,
  args: string[],
  cwd?: string,
): Promise<ModuleGraph> {
  const result = await deno(["info", "--json", "--no-lock", ...args, entry], { cwd });
  assertSucceeded(`deno info ${entry}`, result);
  return JSON.parse(result.stdout) as ModuleGraph;
}

/**
 * Every edge of a graph: (module, specifier as written, what it resolved to, or `error: ...`).
 */
export function edges(
  graph: ModuleGraph,
): { from: string; written: string; to: string }[] {
  const out: { from: string; written: string; to: string }[] = [];
  for (const module of graph.modules) {
    for (const dep of module.dependencies ?? []) {
      for (const target of [dep.code, dep.type]) {
        if (target === undefined) continue;
        // An import Deno could not resolve is kept, as "error: <why>", so checks see it.
        const to = target.specifier ?? `error: ${target.error ?? "unresolved"}`;
        out.push({ from: module.specifier, written: dep.specifier, to });
      }
    }
  }
  return out;
}

/** Whether `dir` or any directory above it holds a Deno or npm project file. */
export async function projectFileAbove(dir: string): Promise<string | undefined> {
  let current = dir.replace(/\/+$/, "");
  for (;;) {
    for (const name of ["deno.json", "deno.jsonc", "package.json", "import_map.json"]) {
      try {
        await Deno.stat(`${current}/${name}`);
        return `${current}/${name}`;
      } catch {
        // Not there; keep looking upwards.
      }
    }
    const parent = current.slice(0, current.lastIndexOf("/"));
    if (parent === current || current === "") return undefined;
    current = parent;
  }
}

/** A `deno` subprocess left running, with the output it wrote so far. */
export interface RunningDeno {
  readonly process: Deno.ChildProcess;
  output(): string;
  /**
   * The exit status, once the process ended and all it wrote has been read: `process.status` can
   * resolve before the last output arrives (seen under load), so read `output()` after this.
   */
  readonly exited: Promise<Deno.CommandStatus>;
}

/**
 * Starts `deno <args>` and keeps collecting its output; stop it with `process.kill` and await
 * `exited` (or `process.status` when the output no longer matters).
 */
export function spawnDeno(args: string[], options: DenoOptions = {}): RunningDeno {
  const process = new Deno.Command(Deno.execPath(), {
    args,
    cwd: options.cwd,
    env: { NO_COLOR: "1", ...options.env },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let text = "";
  const decoder = new TextDecoder();
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream) text += decoder.decode(chunk, { stream: true });
  };
  const drained = Promise.all([drain(process.stdout), drain(process.stderr)]);
  const exited = Promise.all([process.status, drained]).then(([status]) => status);
  return { process, output: () => text, exited };
}
