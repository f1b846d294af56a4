/**
 * `pgflow db`: a local Postgres that keeps its data between starts, with PGMQ, the migrations and
 * local-development mode, on a recorded port; as root and as a normal user. A folder that is not
 * one of its databases, a folder the server user cannot reach, a port in use and bad arguments are
 * refused with what to do, creating nothing.
 */
import assert from "node:assert/strict";
import { ENGINE_VERSION } from "../../src/util/version.ts";
import { freePort } from "../e2e/process.ts";
import { projectDir, publishedCopy, query, runCli, type RunOptions, shown } from "./helpers.ts";

/** Runs start, checks the database, writes a row, stops, starts again and finds the row. */
async function lifecycle(
  project: string,
  user?: string,
  denoDir?: string,
  from: Pick<RunOptions, "deno" | "entry"> = {},
): Promise<void> {
  const env = denoDir ? { DENO_DIR: denoDir, HOME: project } : {};
  const cli = (args: string[]) => runCli(args, { cwd: project, user, env, ...from });
  try {
    // A port of the system's choosing, not the default (the first free from 54330): another suite
    // on the machine could take that one while this database is stopped, and the restart below
    // (no --port: the recorded one) would then rightly refuse it.
    const port = freePort();
    const start = await cli(["db", "start", "--port", String(port)]);
    assert.equal(start.code, 0, shown(start));
    const url = start.stdout.trim();
    assert.equal(url, `postgres://postgres@127.0.0.1:${port}/postgres`);
    assert.match(start.stderr, /creating a database in .*\.pgflow\/db \(initdb\)/);
    assert.match(start.stderr, /ready in .*local development mode on/);
    const urlRun = await cli(["db", "url"]);
    assert.equal(urlRun.stdout.trim(), url);
    const [row] = await query(
      url,
      (sql) =>
        sql`select pgflow.engine_version() as version, pgflow.is_local_development() as local,
                 to_regnamespace('pgmq') is not null as pgmq`,
    );
    assert.deepEqual({ ...row }, { version: ENGINE_VERSION, local: true, pgmq: true });
    await query(
      url,
      (sql) => sql.unsafe("create table kept (n int); insert into kept values (42)").simple(),
    );
    const status = await cli(["db", "status"]);
    assert.equal(status.code, 0, shown(status));
    assert.match(status.stdout, /^state\s+running$/m);
    assert.equal(
      await Deno.readTextFile(`${project}/.pgflow/db/.gitignore`).then((t) => t.includes("\n*\n")),
      true,
      "the folder ignores itself in git",
    );

    const stop = await cli(["db", "stop"]);
    assert.equal(stop.code, 0, shown(stop));
    const stopped = await cli(["db", "status"]);
    assert.equal(stopped.code, 1, shown(stopped));
    assert.match(stopped.stdout, /^state\s+stopped$/m);
    assert.match((await cli(["db", "stop"])).stderr, /not running/);

    const again = await cli(["db", "start"]);
    assert.equal(again.code, 0, shown(again));
    assert.equal(again.stdout.trim(), url, "same port");
    assert.match(again.stderr, /up to date/);
    const [{ n }] = await query(url, (sql) => sql`select n from kept`);
    assert.equal(n, 42, "the data was kept");
    const twice = await cli(["db", "start"]);
    assert.match(twice.stderr, /already running on/, shown(twice));
  } finally {
    await cli(["db", "stop"]);
  }
}

Deno.test("db start, stop, status and url keep the data between starts (as root)", async () => {
  const project = await projectDir("pgflow-db-test-");
  try {
    await lifecycle(project);
  } finally {
    await Deno.remove(project, { recursive: true });
  }
});

Deno.test({
  name: "db works as a normal user too",
  ignore: Deno.uid() !== 0, // run as a normal user, the test above is this one
  async fn() {
    const project = await projectDir("pgflow-db-test-", "postgres");
    // The normal user cannot read root's Deno cache: give it a cache of its own holding postgres.js.
    const denoDir = `${project}/.deno`;
    const info = JSON.parse(
      new TextDecoder().decode(
        (await new Deno.Command(Deno.execPath(), { args: ["info", "--json"] }).output()).stdout,
      ),
    );
    await Deno.mkdir(`${denoDir}/npm/registry.npmjs.org`, { recursive: true });
    await new Deno.Command("cp", {
      args: [
        "-a",
        `${info.npmCache}/registry.npmjs.org/postgres`,
        `${denoDir}/npm/registry.npmjs.org/`,
      ],
    }).output();
    await new Deno.Command("chown", { args: ["-R", "postgres", project] }).output();
    // Neither this checkout (a clone in root's home, a `mktemp -d` folder) nor this deno (npx's
    // cache under root's home) need be readable by another user: it runs copies of both, in a
    // world-readable folder, as a user who installed the module would.
    const module = await publishedCopy();
    await Deno.copyFile(Deno.execPath(), `${module}/deno`);
    await new Deno.Command("chmod", { args: ["-R", "a+rX", module] }).output();
    await Deno.chmod(`${module}/deno`, 0o755);
    try {
      await lifecycle(project, "postgres", denoDir, {
        deno: `${module}/deno`,
        entry: `${module}/src/cli/main.ts`,
      });
      const owner = (await Deno.stat(`${project}/.pgflow/db/pgflow-db.json`)).uid;
      const id = new TextDecoder().decode(
        (await new Deno.Command("id", { args: ["-u", "postgres"] }).output()).stdout,
      ).trim();
      assert.equal(String(owner), id, "everything made by the normal user");
    } finally {
      await Deno.remove(project, { recursive: true });
      await Deno.remove(module, { recursive: true });
    }
  },
});

Deno.test("db refuses what it cannot use, creating nothing, and says what to do", async () => {
  const project = await projectDir("pgflow-db-test-");
  try {
    await Deno.mkdir(`${project}/other`);
    await Deno.writeTextFile(`${project}/other/notes.txt`, "mine\n");
    const notDb = await runCli(["db", "start", "--data-dir", `${project}/other`]);
    assert.equal(notDb.code, 1, shown(notDb));
    assert.match(
      notDb.stderr,
      /other exists and is not a pgflow database folder \(no pgflow-db\.json\); nothing was changed/,
    );
    assert.deepEqual([...Deno.readDirSync(`${project}/other`)].map((e) => e.name), ["notes.txt"]);

    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    try {
      const port = (listener.addr as Deno.NetAddr).port;
      const busy = await runCli(["db", "start", "--port", String(port)], { cwd: project });
      assert.equal(busy.code, 1, shown(busy));
      assert.match(
        busy.stderr,
        new RegExp(
          `port ${port} on 127\\.0\\.0\\.1 is in use by another program; nothing was created`,
        ),
      );
    } finally {
      listener.close();
    }
    assert.equal(await Deno.stat(`${project}/.pgflow`).then(() => true, () => false), false);

    for (
      const [args, code, message] of [
        [
          ["db", "url"],
          1,
          // Run in a project folder, not this repository: the hint is the published form, never
          // a path of this machine.
          /there is no database in .*\.pgflow\/db: create and start one with `deno run -A jsr:@pgflow\/shared@[\d.]+\/cli db start`/,
        ],
        [["db", "stop"], 1, /there is no database in/],
        [["db", "status"], 1, /create one with/],
        [["db"], 2, /pgflow db needs one of start, stop, status, url/],
        [["db", "restart"], 2, /pgflow db needs one of start, stop, status, url, got "restart"/],
        [["db", "start", "--port", "80"], 2, /--port must be a port from 1024 to 65535, got 80/],
        [["db", "stop", "--port", "5432"], 2, /--port is for db start only/],
        [
          ["db", "start", "--datadir", "x"],
          2,
          /unknown flag "--datadir" for pgflow db \(its flags: --data-dir, --port\)/,
        ],
        [["db", "start", "stop"], 2, /pgflow db takes at most 1, got "stop"/],
      ] as const
    ) {
      const r = await runCli([...args], { cwd: project });
      assert.equal(r.code, code, shown(r));
      assert.match(r.stderr, message, shown(r));
    }
    assert.equal(await Deno.stat(`${project}/.pgflow`).then(() => true, () => false), false);
  } finally {
    await Deno.remove(project, { recursive: true });
  }
});

Deno.test({
  name: "as root, a folder the server user cannot reach is refused before anything is created",
  ignore: Deno.uid() !== 0,
  async fn() {
    const closed = await Deno.makeTempDir({ prefix: "pgflow-closed-" });
    await Deno.chmod(closed, 0o700);
    try {
      const r = await runCli(["db", "start", "--data-dir", `${closed}/app/db`]);
      assert.equal(r.code, 1, shown(r));
      assert.match(
        r.stderr,
        /the server must run as user postgres .* cannot reach .*app\/db: a folder above it is closed to other users/,
      );
      assert.match(r.stderr, /Nothing was created\. Pass --data-dir with a folder it can reach/);
      assert.deepEqual([...Deno.readDirSync(closed)], []);
    } finally {
      await Deno.remove(closed, { recursive: true });
    }
  },
});
