/**
 * What every peer program shares: the line protocol with the Deno bench, and the tally of units
 * run. The bench writes one JSON command per line on stdin; the program answers each on stdout
 * with one line starting with {@link MARK} (a library that prints to stdout cannot be taken for
 * an answer). A peer is told its database, shape and concurrency in its environment:
 * PEER_URL, PEER_SHAPE (`single` or `chain`), PEER_CONCURRENCY, PEER_MODE (peer-specific).
 *
 * Commands: `backlog {from, n}` (units from..from+n-1 in one commit), `wait {until}` (until that
 * many units are done; the window since the last backlog), `paced {from, count, rate}` (units
 * started one by one; their latencies), `ledger` (the tally of step runs written to
 * `bench_ledger`), `stop`.
 *
 * CommonJS (`.cjs`), importing the ESM libraries with `import()`: the repository's `deno check`
 * takes every JavaScript module but `.cjs` under bench/, and cannot resolve these npm packages.
 */
"use strict";
const pg = require("pg");

const MARK = "@@bench ";

/** Wall-clock ms with sub-ms resolution (the Deno bench reads the same clock). */
function wallMs() {
  return performance.timeOrigin + performance.now();
}

/** The peer's settings from its environment. */
function settings() {
  const url = process.env.PEER_URL;
  const shape = process.env.PEER_SHAPE;
  const concurrency = Number(process.env.PEER_CONCURRENCY ?? "10");
  if (!url || (shape !== "single" && shape !== "chain") || !(concurrency >= 1)) {
    throw new Error(
      `peer needs PEER_URL, PEER_SHAPE single|chain and PEER_CONCURRENCY ≥ 1; got shape ` +
        `${JSON.stringify(shape)}, concurrency ${JSON.stringify(process.env.PEER_CONCURRENCY)}`,
    );
  }
  return { url, shape, concurrency, mode: process.env.PEER_MODE ?? "" };
}

/** The steps of a unit: one, or the chain a → b → c. */
function stepsOf(shape) {
  return shape === "single" ? ["a"] : ["a", "b", "c"];
}

/**
 * Units done and their window. `step(unit, name)` is called on the first line of every step
 * function; `finished(unit)` once the unit's last step is over. Latencies are measured for the
 * units whose start time was noted with `startedAt(unit, ms)` (the paced ones): pickup (start →
 * first step) for single steps, run latency (start → last step over) for chains.
 */
class Tally {
  constructor(shape) {
    this.shape = shape;
    this.done = 0;
    this.first = NaN;
    this.last = NaN;
    this.ledger = new Map();
    this.starts = new Map();
    this.latencies = [];
    this.error = undefined;
  }

  /** A unit that failed: the bench's next wait fails with it rather than timing out. */
  fail(unit, error) {
    this.error ??= new Error(`unit ${unit} failed: ${error?.stack ?? error}`);
  }

  step(unit, name) {
    const at = wallMs();
    if (Number.isNaN(this.first)) this.first = at;
    const key = `${unit}\u001f${name}`;
    this.ledger.set(key, (this.ledger.get(key) ?? 0) + 1);
    const start = this.starts.get(unit);
    if (start !== undefined && this.shape === "single") this.latencies.push(at - start);
  }

  finished(unit) {
    this.last = wallMs();
    this.done++;
    const start = this.starts.get(unit);
    if (start !== undefined && this.shape === "chain") this.latencies.push(this.last - start);
  }

  startedAt(unit, ms) {
    this.starts.set(unit, ms);
  }

  resetWindow() {
    this.first = this.last = NaN;
  }

  async until(n, timeoutMs = 600_000) {
    const deadline = wallMs() + timeoutMs;
    while (this.done < n) {
      if (this.error) throw this.error;
      if (wallMs() > deadline) throw new Error(`finished ${this.done} of ${n} units`);
      await new Promise((r) => setTimeout(r, 5));
    }
    return { first: this.first, last: this.last };
  }

  /** Writes the ledger (unit, step, times run) into `bench_ledger` on `client`. */
  async write(client) {
    await client.query(
      "create table if not exists bench_ledger (unit text not null, step text not null, n int not null)",
    );
    const rows = [...this.ledger].map(([key, n]) => [...key.split("\u001f"), n]);
    await client.query(
      "insert into bench_ledger select * from unnest($1::text[], $2::text[], $3::int[])",
      [rows.map((r) => r[0]), rows.map((r) => r[1]), rows.map((r) => r[2])],
    );
    return rows.length;
  }
}

/** A connection of its own for producing units (its backend pid is left out of the server CPU). */
async function producer(url) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const { rows } = await client.query("select pg_backend_pid() as pid");
  return { client, pid: rows[0].pid };
}

/** Starts `count` units one by one at `rate` per second; `start(unit)` starts one. */
async function paced(tally, from, count, rate, start) {
  tally.latencies = [];
  const before = tally.done;
  const t0 = wallMs();
  for (let i = 0; i < count; i++) {
    const wait = t0 + (i * 1000) / rate - wallMs();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const unit = from + i;
    tally.startedAt(unit, wallMs());
    await start(unit);
  }
  await tally.until(before + count);
  return tally.latencies;
}

/** Runs `from..from+n-1` one commit: BEGIN, `add(client, unit)` each, COMMIT. */
async function inOneCommit(client, from, n, add) {
  await client.query("begin");
  try {
    for (let unit = from; unit < from + n; unit++) await add(client, unit);
    await client.query("commit");
  } catch (error) {
    await client.query("rollback").catch(() => {});
    throw error;
  }
}

/**
 * Runs `setup` (async; resolves with `{ answer, handlers }`: the first answer, e.g. the
 * producer's pid, and op → async (command) → answer object), then serves the bench's commands.
 */
async function serve(setup) {
  const say = (answer) => process.stdout.write(MARK + JSON.stringify(answer) + "\n");
  let handlers;
  try {
    const ready = await setup();
    handlers = ready.handlers;
    say({ ok: true, ...ready.answer });
  } catch (error) {
    say({ ok: false, error: String(error?.stack ?? error) });
    process.exit(1);
  }
  let buffer = "";
  let queue = Promise.resolve();
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (chunk) => {
    buffer += chunk;
    let at;
    while ((at = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, at);
      buffer = buffer.slice(at + 1);
      if (line.trim() === "") continue;
      // One command at a time, in order: the bench waits for each answer anyway.
      queue = queue.then(async () => {
        const command = JSON.parse(line);
        try {
          const handler = handlers[command.op];
          if (!handler) throw new Error(`unknown command ${JSON.stringify(command.op)}`);
          say({ ok: true, ...(await handler(command)) });
        } catch (error) {
          say({ ok: false, error: String(error?.stack ?? error) });
        }
        if (command.op === "stop") process.exit(0);
      });
    }
  });
  // The bench gone (its end of stdin closed): stop at once, nobody reads the answers.
  process.stdin.on("end", () => process.exit(0));
}

module.exports = {
  MARK,
  wallMs,
  settings,
  stepsOf,
  Tally,
  producer,
  paced,
  inOneCommit,
  serve,
};
