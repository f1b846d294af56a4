/**
 * `pgflow db start | stop | status | url [--data-dir DIR]`: a local Postgres for one's own app that
 * keeps its data between starts, with PGMQ, the engine's migrations and local-development mode.
 *
 * @module
 */
import { parseArgs } from "./args.ts";
import { openDatabase } from "./connect.ts";
import { absolute, DEFAULT_DATA_DIR, LocalCluster, shellSpecial } from "./db/cluster.ts";
import { withFolderLock } from "./db/lock.ts";
import { portIsFree } from "./db/server.ts";
import { installPgmq } from "./db/pgmq.ts";
import { migrateDatabase } from "./migrate.ts";
import { testPause } from "./db/test_pause.ts";
import { CliError, command, elapsed, progress, result, UsageError } from "./output.ts";

/** The help text of `pgflow db`. */
export const DB_HELP = `pgflow db <start | stop | status | url> [--data-dir DIR] [--port N]

A local Postgres for your app that keeps its data between starts (in DIR, default
./${DEFAULT_DATA_DIR}; the folder ignores itself in git). It listens on 127.0.0.1 only, user
postgres without a password.

  start   create the database if needed, start it, provide PGMQ (the extension where the server
          has it, else the PGMQ-compatible SQL), apply the engine's migrations, turn on local
          development mode (changed flows recompile in place), and print its URL
  stop    stop it; the data stays
  status  say whether it runs, where, and its URL (exit 1 when it does not run)
  url     print its URL, e.g. export DATABASE_URL="$(pgflow db url)"

  --data-dir DIR  the database's folder; default ./${DEFAULT_DATA_DIR}
  --port N        (start) the port; default: the one it had, else the first free from 54330

Commands on one folder run one at a time: a second start waits for the first and prints the same
URL; stop waits for a start to finish (DIR.lock sits next to DIR meanwhile). A start interrupted
(Ctrl-C, killed) while creating the database is finished or redone by the next start. DIR must
not hold $ \` " or \\ (pg_ctl hands it to a shell).

Server binaries: PGFLOW_PG_BIN, else the machine's PostgreSQL (Debian: postgresql-15), else the
npm-packaged server. As root the server runs as the postgres (or nobody) user.

Exit codes: 0 ok, 1 failed (or, for status, not running), 2 usage error.`;

const ACTIONS = ["start", "stop", "status", "url"] as const;

/**
 * Runs `pgflow db …`; returns the exit code.
 *
 * @example
 * ```ts
 * import { db } from "./db.ts";
 *
 * // Deno.exit(await db(["start", "--data-dir", ".pgflow/db"]));
 * ```
 */
export async function db(argv: readonly string[]): Promise<number> {
  const args = parseArgs(argv, { "data-dir": "string", "port": "string" }, "pgflow db", 1);
  const action = args.positionals[0];
  if (args.help) {
    result(DB_HELP);
    return 0;
  }
  if (action === undefined || !(ACTIONS as readonly string[]).includes(action)) {
    throw new UsageError(
      `pgflow db needs one of ${ACTIONS.join(", ")}` +
        (action === undefined ? "" : `, got ${JSON.stringify(action)}`) +
        '; run "pgflow db --help"',
    );
  }
  let port: number | undefined;
  if (args.strings.port !== undefined) {
    if (action !== "start") throw new UsageError(`--port is for db start only`);
    port = Number(args.strings.port);
    if (!Number.isInteger(port) || port < 1024 || port > 65535) {
      throw new UsageError(`--port must be a port from 1024 to 65535, got ${args.strings.port}`);
    }
  }
  const dir = absolute(args.strings["data-dir"] ?? DEFAULT_DATA_DIR);
  switch (action) {
    case "start": {
      const special = shellSpecial(dir);
      if (special) {
        throw new UsageError(
          `the database folder ${JSON.stringify(dir)} holds ${special}, which pg_ctl hands to a ` +
            'shell: nothing was created. Pass --data-dir with a path without $ ` " or \\',
        );
      }
      // Starts and stops of one folder run one after the other: a second start finds the first's
      // server, and no start's clean-up meets another's data.
      return await withFolderLock(dir, "db start", async () => {
        return await start(await LocalCluster.open(dir), port);
      });
    }
    case "stop":
      return await withFolderLock(dir, "db stop", async () => {
        return await stop(await LocalCluster.open(dir));
      });
    case "status":
      return await describe(await LocalCluster.open(dir));
    default: {
      // A start still running may yet move the port it recorded (a racing start took it first):
      // wait for it, so the URL printed is the one the server listens on.
      const found = await LocalCluster.open(dir);
      const cluster = found.url === undefined && !found.interrupted
        ? found
        : await withFolderLock(dir, "db url", () => LocalCluster.open(dir));
      if (cluster.url === undefined) throw noDatabase(cluster);
      result(cluster.url);
      return 0;
    }
  }
}

function noDatabase(cluster: LocalCluster): CliError {
  return new CliError(
    `there is no database in ${cluster.dir}: create and start one with ` +
      `\`${command("db start")}\` (with the same --data-dir)`,
  );
}

async function start(cluster: LocalCluster, port: number | undefined): Promise<number> {
  const began = performance.now();
  const state = await cluster.state();
  if (state === "absent") {
    if (port !== undefined && !portIsFree(port)) {
      throw new CliError(
        `port ${port} on 127.0.0.1 is in use by another program; nothing was created. Stop that ` +
          "program, or pass another --port (or none: the first free one from 54330 is taken)",
      );
    }
    if (cluster.interrupted) {
      const outcome = await cluster.recover(port);
      progress(
        outcome === "completed"
          ? `an interrupted db start had created the database in ${cluster.dir}: recorded it`
          : `removed what an interrupted db start left in ${cluster.dir}`,
      );
    }
    if (cluster.port === undefined) {
      progress(`creating a database in ${cluster.dir} (initdb)`);
      await cluster.create(port);
    }
  }
  if (state === "running") {
    await cluster.start(port); // refuses a different port
    progress(`already running on 127.0.0.1:${cluster.port}`);
  } else {
    const planned = port ?? cluster.port;
    progress(`starting Postgres on 127.0.0.1:${planned}`);
    // A port picked for a cluster made just now may be taken by a racing start: then another.
    await cluster.start(port, { movable: state === "absent" && port === undefined });
    if (cluster.port !== planned) progress(`port ${planned} was taken; started on ${cluster.port}`);
  }
  await testPause("setup");
  const url = cluster.url!;
  const sql = await openDatabase(url);
  try {
    const pgmq = await installPgmq(sql);
    if (pgmq !== "existing") {
      progress(`PGMQ installed (${pgmq === "extension" ? "extension" : "compatible SQL"})`);
    }
    await migrateDatabase(sql);
    await sql`select pgflow.set_local_development(true)`;
  } catch (error) {
    throw new CliError(
      `the database runs (${url}), but setting it up failed: ${(error as Error).message}`,
    );
  } finally {
    await sql.end({ timeout: 5 });
  }
  progress(
    `ready in ${elapsed(began)}: local development mode on; stop with \`${command("db stop")}\``,
  );
  result(url);
  return 0;
}

async function stop(cluster: LocalCluster): Promise<number> {
  const state = await cluster.state();
  if (state === "absent") throw noDatabase(cluster);
  if (state === "stopped") {
    progress(`not running (data in ${cluster.dir})`);
    return 0;
  }
  progress("stopping");
  await cluster.stop();
  progress(`stopped; the data stays in ${cluster.dir}`);
  return 0;
}

async function describe(cluster: LocalCluster): Promise<number> {
  const state = await cluster.state();
  if (state === "absent") {
    result(`state     no database\ndata dir  ${cluster.dir}`);
    progress(
      cluster.interrupted
        ? `a db start was interrupted while creating it (or is creating it now); ` +
          `\`${command("db start")}\` finishes or redoes it`
        : `create one with \`${command("db start")}\``,
    );
    return 1;
  }
  result(
    [
      `state     ${state}`,
      `data dir  ${cluster.dir}`,
      `url       ${cluster.url}`,
      `server    ${cluster.binDir}`,
    ].join("\n"),
  );
  return state === "running" ? 0 : 1;
}
