/** Command-line options of `deno task bench`. */
import { WORKER_OPTIONS } from "../tools.ts";
import { type CellKey, CELLS, DEFAULT_CELLS } from "./cells.ts";

export const SECTIONS = [
  "headline",
  "single",
  "mixed",
  "chain",
  "scale",
  "claim",
  "memory",
] as const;
export type Section = typeof SECTIONS[number];

/** Parsed options. */
export interface BenchOptions {
  tasks: number;
  latencyTasks: number;
  rate: number;
  memoryTasks: number;
  pollIntervalMs: number;
  maxPollSeconds: number;
  claimScale: number;
  only: Set<Section>;
  out: string | undefined;
  label: string;
  /** Start the throw-away server with fsync and synchronous_commit off (not durable). */
  fast: boolean;
  /** Rounds: every repeated scenario runs once per round, in turn. */
  repeat: number;
  /** Chain runs drained for runs/s. */
  chainRuns: number;
  /** Chain runs started one by one for the unloaded run latency, and how many per second. */
  chainPaced: number;
  chainRate: number;
  /** Worker counts of the scale-out curve. */
  scaleWorkers: number[];
  /** Seconds each scale-out point's drain is sized to last. */
  scaleSeconds: number;
  /** The scale-out curve also with a queue per worker. */
  scaleSeparate: boolean;
  /** Seconds each headline drain is sized to last. */
  drainSeconds: number;
  /** The headline cells measured. */
  cells: CellKey[];
  /** DBOS queued cells: the queue's minPollingIntervalMs. */
  dbosPollMs: number;
}

/** `words` joined with ", " in lines of at most `width` characters, the next ones indented. */
function wrapped(words: readonly string[], indent: number, width: number): string {
  const lines = [""];
  for (const word of words) {
    const last = lines[lines.length - 1];
    const next = last === "" ? word : `${last}, ${word}`;
    if (indent + next.length + 1 > width && last !== "") {
      lines[lines.length - 1] = `${last},`;
      lines.push(word);
    } else lines[lines.length - 1] = next;
  }
  return lines.join(`\n${" ".repeat(indent)}`);
}

export const HELP =
  `pgflow benchmarks: headline cells on fresh and used tables (this engine, graphile-worker,
pg-boss, DBOS Transact, the raw PGMQ floor), queue shapes, mixed workers, chains, server cost per
worker count, claim cost, memory.

usage: deno task bench [options]

  --fast               start the throw-away server with fsync, synchronous_commit and
                       full_page_writes off (quick comparisons; hides commit cost). Default:
                       durable settings, as on Supabase
  --quick              one round, shorter drains, fewer tasks (several minutes); noisy
  --drain-seconds S    each headline drain (fresh and used tables) is sized from the cell's
                       measured rate to last at least S seconds (default 10; quick 2)
  --cells LIST         headline cells (default all but graphileDeno):
                       ${
    wrapped(Object.keys(CELLS), 23, 100)
  }. The peers (graphile*, pgboss*, dbos*) run
                       on Node 22, installed from npm into bench/.peers on first use (needs npm)
  --dbos-poll-ms MS    the DBOS queue's minPollingIntervalMs in the dbos queued cells (default
                       50; DBOS's own default is 1000)
  --tasks N            tasks per queue-shape and mixed-worker scenario (default 3000; quick 600)
  --latency-tasks N    runs started one by one for pickup latency (default 300; quick 100)
  --rate N             runs per second while measuring latency (default 100)
  --memory-tasks N     tasks the memory worker runs (default 10000; quick 2000)
  --repeat N           rounds of the throughput and latency scenarios, interleaved; tables show
                       the median and the spread across rounds (default 3; quick 1)
  --chain-runs N       three-step runs drained per chain scenario (default 1000; quick 200)
  --chain-paced N      chain runs started one by one for the unloaded run latency (default 100;
                       quick 40), at --chain-rate per second (default 20)
  --scale-workers LIST worker counts of the server-cost curve (default 1,4,8,16; quick 1,4,8);
                       graphile-worker runs as many runners too
  --scale-seconds S    each curve point's drain lasts about S seconds (default 4; quick 1)
  --scale-separate     the curve also with one queue per worker
  --poll-interval MS   pollIntervalMs of every worker and of the raw loop (default: the worker
                       default)
  --max-poll-seconds S maxPollSeconds of every worker and of the raw loop (default: the worker
                       default)
  --only LIST          comma-separated sections: ${SECTIONS.join(", ")} (default all)
  --label TEXT         a label printed with the results (e.g. "before")
  --out PATH           where to write the Markdown results (default bench/results.md)
  --no-write           print only
  --help               this text

Uses DATABASE_URL when set; otherwise starts a throw-away local Postgres.`;

function fail(message: string): never {
  console.error(`${message}\n\n${HELP}`);
  Deno.exit(2);
}

function count(flag: string, value: string | undefined, min: number, max: number): number {
  const n = Number(value);
  if (value === undefined || !Number.isInteger(n) || n < min || n > max) {
    fail(`${flag} needs an integer from ${min} to ${max}, got ${value ?? "nothing"}`);
  }
  return n;
}

/** Parses `args`; prints help and exits on --help or a bad option. */
export function parseOptions(args: readonly string[], defaultOut: string): BenchOptions {
  const quick = args.includes("--quick");
  const o: BenchOptions = {
    tasks: quick ? 600 : 3000,
    latencyTasks: quick ? 100 : 300,
    rate: 100,
    memoryTasks: quick ? 2000 : 10_000,
    // The worker's own defaults (src/worker/config.ts), so the figures describe what users get.
    pollIntervalMs: WORKER_OPTIONS.pollIntervalMs.default,
    maxPollSeconds: WORKER_OPTIONS.maxPollSeconds.default,
    claimScale: quick ? 0.3 : 1,
    only: new Set(SECTIONS),
    out: defaultOut,
    label: "",
    fast: args.includes("--fast"),
    // Quick: one round (about two minutes); a full run interleaves three.
    repeat: quick ? 1 : 3,
    chainRuns: quick ? 200 : 1000,
    chainPaced: quick ? 40 : 100,
    chainRate: 20,
    scaleWorkers: quick ? [1, 4, 8] : [1, 4, 8, 16],
    scaleSeconds: quick ? 1 : 4,
    scaleSeparate: false,
    drainSeconds: quick ? 2 : 10,
    cells: [...DEFAULT_CELLS],
    dbosPollMs: 50,
  };
  for (let i = 0; i < args.length; i++) {
    const flag = args[i];
    const value = args[i + 1];
    switch (flag) {
      case "--help":
      case "-h":
        console.log(HELP);
        Deno.exit(0);
        break;
      case "--quick":
      case "--fast":
        continue;
      case "--no-write":
        o.out = undefined;
        continue;
      case "--scale-separate":
        o.scaleSeparate = true;
        continue;
      case "--drain-seconds":
        o.drainSeconds = count(flag, value, 1, 600);
        break;
      case "--scale-seconds":
        o.scaleSeconds = count(flag, value, 1, 600);
        break;
      case "--dbos-poll-ms":
        o.dbosPollMs = count(flag, value, 1, 60_000);
        break;
      case "--cells": {
        const names = (value ?? "").split(",").filter(Boolean);
        const unknown = names.filter((n) => !(n in CELLS));
        if (names.length === 0 || unknown.length > 0) {
          fail(`--cells takes ${Object.keys(CELLS).join(", ")}; got ${value ?? "nothing"}`);
        }
        o.cells = names as CellKey[];
        break;
      }
      case "--tasks":
        o.tasks = count(flag, value, 10, 1_000_000);
        break;
      case "--latency-tasks":
        o.latencyTasks = count(flag, value, 10, 100_000);
        break;
      case "--rate":
        o.rate = count(flag, value, 1, 10_000);
        break;
      case "--memory-tasks":
        o.memoryTasks = count(flag, value, 10, 1_000_000);
        break;
      case "--repeat":
        o.repeat = count(flag, value, 1, 100);
        break;
      case "--chain-runs":
        o.chainRuns = count(flag, value, 1, 1_000_000);
        break;
      case "--chain-paced":
        o.chainPaced = count(flag, value, 1, 100_000);
        break;
      case "--chain-rate":
        o.chainRate = count(flag, value, 1, 10_000);
        break;
      case "--scale-workers": {
        const counts = (value ?? "").split(",").map(Number);
        if (!value || counts.some((n) => !Number.isInteger(n) || n < 1 || n > 16)) {
          fail(
            `--scale-workers takes worker counts from 1 to 16, e.g. 1,2,4; got ${
              value ?? "nothing"
            }`,
          );
        }
        o.scaleWorkers = counts;
        break;
      }
      case "--poll-interval":
        o.pollIntervalMs = count(
          flag,
          value,
          WORKER_OPTIONS.pollIntervalMs.min,
          WORKER_OPTIONS.pollIntervalMs.max,
        );
        break;
      case "--max-poll-seconds":
        o.maxPollSeconds = count(
          flag,
          value,
          WORKER_OPTIONS.maxPollSeconds.min,
          WORKER_OPTIONS.maxPollSeconds.max,
        );
        break;
      case "--only": {
        const names = (value ?? "").split(",").filter(Boolean);
        const unknown = names.filter((n) => !(SECTIONS as readonly string[]).includes(n));
        if (names.length === 0 || unknown.length > 0) {
          fail(`--only takes ${SECTIONS.join(", ")}; got ${value ?? "nothing"}`);
        }
        o.only = new Set(names as Section[]);
        break;
      }
      case "--label":
        if (value === undefined) fail("--label needs a text");
        o.label = value;
        break;
      case "--out":
        if (value === undefined) fail("--out needs a path");
        o.out = value;
        break;
      default:
        fail(`unknown option ${flag}`);
    }
    i++;
  }
  if (o.pollIntervalMs > o.maxPollSeconds * 1000) {
    fail(`--poll-interval ${o.pollIntervalMs} exceeds --max-poll-seconds ${o.maxPollSeconds}`);
  }
  return o;
}

/**
 * The positive number after `--name` in `args` (a scenario script's option), else `fallback`;
 * anything else after it ends the script with an error naming the option and the value.
 *
 * @example
 * ```ts
 * const backlog = positiveOption(Deno.args, "backlog", 20000); // `--backlog 5000` → 5000
 * ```
 */
export function positiveOption(args: readonly string[], name: string, fallback: number): number {
  const at = args.indexOf(`--${name}`);
  if (at < 0) return fallback;
  const value = Number(args[at + 1]);
  if (!Number.isFinite(value) || value <= 0) {
    throw new Error(`--${name} needs a positive number, got ${args[at + 1] ?? "nothing"}`);
  }
  return value;
}

/**
 * The comma-separated positive whole numbers after `--name` in `args`, else `fallback`.
 *
 * @example
 * ```ts
 * const windows = positiveList(Deno.args, "windows", [32, 16, 8]); // `--windows 16,8` → [16, 8]
 * ```
 */
export function positiveList(args: readonly string[], name: string, fallback: number[]): number[] {
  const at = args.indexOf(`--${name}`);
  if (at < 0) return fallback;
  const text = args[at + 1] ?? "";
  const values = text.split(",").map(Number);
  if (text === "" || values.some((v) => !Number.isInteger(v) || v <= 0)) {
    throw new Error(`--${name} needs positive whole numbers separated by commas, got ${text}`);
  }
  return values;
}
