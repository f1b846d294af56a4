/**
 * The client's options come from one table (`src/client/options.ts`), as the worker's do: each
 * numeric option of `createClient` and `waitFor` accepts exactly its range, every refusal is a
 * `ClientConfigError` naming the call, the option, the value and what is accepted, unknown and
 * misplaced options are refused, and a connection given wrongly is named by its type only (a URL
 * may hold a password). No database is reached: every check runs before the first query.
 */
import assert from "node:assert/strict";
import { ClientConfigError, type ClientOptions, createClient, createPool } from "../../mod.ts";
import { CLIENT_OPTIONS, WAIT_OPTIONS } from "../../src/client/options.ts";

/** Never connected to: every test here fails before a query, or closes the client unused. */
const URL_ = "postgres://postgres:s3cret-pw@127.0.0.1:1/postgres";
const RUN_ID = "00000000-0000-4000-8000-000000000001";

/** `createClient(options)` from untyped input, as JavaScript callers and JSON configs give it. */
function loose(options: Record<string, unknown>) {
  return createClient(options as unknown as ClientOptions);
}

/** Makes a client and closes it: only its options are under test. */
async function accepts(options: Record<string, unknown>): Promise<void> {
  await loose(options).close();
}

function refuses(options: unknown, message: RegExp): void {
  assert.throws(
    () => createClient(options as ClientOptions),
    (e: unknown) => e instanceof ClientConfigError && message.test(e.message),
    `${JSON.stringify(options)} should be refused with ${message}`,
  );
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

Deno.test("every timing option of createClient accepts exactly its range from the one options table", async () => {
  for (const [key, { min, max }] of Object.entries(CLIENT_OPTIONS)) {
    // pollIntervalMs may not exceed maxPollIntervalMs: give each room at its edges.
    const room = key === "pollIntervalMs"
      ? { maxPollIntervalMs: CLIENT_OPTIONS.maxPollIntervalMs.max }
      : key === "maxPollIntervalMs"
      ? { pollIntervalMs: CLIENT_OPTIONS.pollIntervalMs.min }
      : {};
    for (const ok of [min, max]) await accepts({ connectionString: URL_, ...room, [key]: ok });
    const bad: [unknown, string][] = [
      [min - 1, String(min - 1)],
      [max + 1, String(max + 1)],
      [min + 0.5, String(min + 0.5)],
      [`${min}`, `"${min}"`],
      [Number.NaN, "NaN"],
      [Number.POSITIVE_INFINITY, "Infinity"],
      [null, "null"],
    ];
    for (const [value, shown] of bad) {
      refuses(
        { connectionString: URL_, ...room, [key]: value },
        new RegExp(
          `^createClient: ${key} must be an integer from ${min} to ${max}, got ${escape(shown)}$`,
        ),
      );
    }
  }
});

Deno.test("pollIntervalMs may not exceed maxPollIntervalMs, defaults included", () => {
  refuses(
    { connectionString: URL_, pollIntervalMs: 3_000 },
    /^createClient: pollIntervalMs \(3000\) must not exceed maxPollIntervalMs \(2000\)/,
  );
  refuses(
    { connectionString: URL_, pollIntervalMs: 500, maxPollIntervalMs: 400 },
    /pollIntervalMs \(500\) must not exceed maxPollIntervalMs \(400\)/,
  );
});

Deno.test("waitFor's timeoutMs accepts exactly its range; waitFor, events and startFlow refuse unknown options", async () => {
  const client = createClient({ connectionString: URL_ });
  try {
    const run = client.run(RUN_ID);
    const { min, max } = WAIT_OPTIONS.timeoutMs;
    for (const ok of [min, max]) {
      // An aborted signal ends the wait before any reading: the options were accepted.
      const signal = AbortSignal.abort(new Error("aborted before reading"));
      await assert.rejects(run.waitFor("terminal", { timeoutMs: ok, signal }), /aborted before/);
    }
    // Past the longest timer, setTimeout would fire at once: a 25-day wait would time out now.
    for (const [value, shown] of [[0, "0"], [-1, "-1"], [max + 1, String(max + 1)], [1.5, "1.5"]]) {
      await assert.rejects(
        run.waitFor("completed", { timeoutMs: value as number }),
        (e: unknown) =>
          e instanceof ClientConfigError &&
          e.message === `waitFor: timeoutMs must be an integer from ${min} to ${max}, got ${shown}`,
      );
    }
    const untyped = run as unknown as {
      waitFor(status: string, options: unknown): Promise<unknown>;
      events(options: unknown): AsyncIterableIterator<unknown>;
    };
    await assert.rejects(
      untyped.waitFor("completed", { timeout: 1_000 }),
      (e: unknown) =>
        e instanceof ClientConfigError &&
        e.message === `waitFor: unknown option "timeout"; the options are timeoutMs, signal`,
    );
    await assert.rejects(
      untyped.waitFor("completed", { signal: 5 }),
      (e: unknown) =>
        e instanceof ClientConfigError &&
        e.message === "waitFor: signal must be an AbortSignal, got 5",
    );
    await assert.rejects(
      untyped.events({ signal: "stop" }).next(),
      (e: unknown) =>
        e instanceof ClientConfigError &&
        e.message === `events: signal must be an AbortSignal, got "stop"`,
    );
    await assert.rejects(
      client.startFlow("some_flow", {}, { runID: RUN_ID } as unknown as { runId: string }),
      (e: unknown) =>
        e instanceof ClientConfigError &&
        e.message === `startFlow: unknown option "runID"; the options are runId, priority`,
    );
  } finally {
    await client.close();
  }
});

Deno.test("createClient refuses unknown options, another connection's options, and not exactly one connection", () => {
  refuses(
    { connectionString: URL_, pollIntervalMS: 100 },
    /^createClient: unknown option "pollIntervalMS"; the options are pollIntervalMs, maxPollIntervalMs, safetyIntervalMs, queryTimeoutMs, flows, connectionString, pool, transport$/,
  );
  refuses(
    { connectionString: URL_, url: URL_ },
    /^createClient: url goes with sql, not with connectionString$/,
  );
  refuses(
    { connectionString: URL_, supabase: {} },
    /give one of sql, connectionString or supabase, got connectionString and supabase/,
  );
  refuses({}, /^createClient needs \{ sql \}, \{ connectionString \} or \{ supabase \}/);
  refuses(undefined, /^createClient: options must be an object, got undefined$/);
  refuses(URL_, /^createClient: options must be an object, got a string$/);
});

Deno.test("createClient names a bad connection by its type only, never its text", () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ sql: URL_ }, /^createClient: sql must be a postgres\.js pool \(createPool\), got a string$/],
    [
      { connectionString: new URL(URL_) },
      /^createClient: connectionString must be a string, got an object$/,
    ],
    [{ supabase: URL_ }, /^createClient: supabase must be a supabase-js client .*, got a string$/],
    [
      { connectionString: URL_, pool: URL_ },
      /^createClient: pool must be an object of createPool options, got a string$/,
    ],
  ];
  for (const [options, message] of cases) {
    refuses(options, message);
    try {
      loose(options);
    } catch (e) {
      assert.ok(!(e as Error).message.includes("s3cret"), (e as Error).message);
    }
  }
});

Deno.test("transport must be one the connection supports", async () => {
  refuses(
    { connectionString: URL_, transport: "realtime" },
    /^createClient: transport with connectionString must be "auto", "listen" or "poll", got "realtime"$/,
  );
  refuses(
    { supabase: { schema: () => ({}) }, transport: "listen" },
    /^createClient: transport with supabase must be "auto", "realtime" or "poll", got "listen"$/,
  );
  const sql = createPool(URL_, { max: 1 });
  try {
    refuses({ sql, transport: 1 }, /transport with sql must be "auto", "listen" or "poll", got 1$/);
    await accepts({ sql, transport: "poll" });
  } finally {
    await sql.end();
  }
});

Deno.test("ClientTiming's docs state the defaults and ranges of the options table", () => {
  const source = Deno.readTextFileSync(new URL("../../src/client/client.ts", import.meta.url));
  const number = (text: string) => Number(text.replace(/[_,]/g, ""));
  for (const [key, option] of Object.entries(CLIENT_OPTIONS)) {
    const doc = new RegExp(`/\\*\\*((?:(?!\\*/)[\\s\\S])*)\\*/\\s*readonly ${key}\\?:`).exec(
      source,
    );
    assert.ok(doc, `${key} is documented in ClientTiming`);
    const text = doc[1].replace(/\s+\*\s*/g, " ");
    const stated = /default (\d[\d_,]*)/i.exec(text);
    assert.ok(stated, `${key}'s doc states its default`);
    assert.equal(number(stated[1]), option.default, `${key}'s default`);
    const range = /(\d[\d_,]*) to (\d[\d_,]*)/.exec(text);
    assert.ok(range, `${key}'s doc states its range`);
    assert.deepEqual(
      [number(range[1]), number(range[2])],
      [option.min, option.max],
      `${key}'s range`,
    );
  }
});
