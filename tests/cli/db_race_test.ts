/**
 * `pgflow db` commands at once on one folder, and folder names a shell would run: `db start`,
 * `db stop` and creating or removing the folder are serialised on the folder (a lock the OS drops
 * when its process ends), a failed start removes only what it made, and a `--data-dir` a shell would
 * interpret is refused before anything runs. `PGFLOW_DB_TEST_PAUSE` widens the race windows.
 */
import assert from "node:assert/strict";
import { projectDir, query, runCli, shown } from "./helpers.ts";

/** A port of the system's choosing, so this file's servers keep clear of other test files'. */
function somePort(): string {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  listener.close();
  return String((listener.addr as Deno.NetAddr).port);
}

const exists = (path: string) => Deno.lstat(path).then(() => true, () => false);

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

Deno.test("two db start at once on one folder: one server, its data intact", async () => {
  const project = await projectDir("pgflow-db-race-");
  // A space and a quote in the name: paths reach the tools without a shell re-reading them.
  const dir = `${project}/it's my db`;
  const cli = (args: string[]) => runCli(["db", ...args, "--data-dir", dir], { cwd: project });
  try {
    // Both processes are spawned before either is awaited.
    const port = somePort();
    const [a, b] = await Promise.all([
      cli(["start", "--port", port]),
      cli(["start", "--port", port]),
    ]);
    assert.equal(a.code, 0, shown(a));
    assert.equal(b.code, 0, shown(b));
    const url = a.stdout.trim();
    assert.match(url, /^postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres$/);
    assert.equal(b.stdout.trim(), url, "the second start gives the first one's URL");
    const created = [a, b].filter((r) => /creating a database in/.test(r.stderr));
    const joined = [a, b].filter((r) => /already running on/.test(r.stderr));
    assert.equal(created.length, 1, `exactly one creates:\n${shown(a)}\n${shown(b)}`);
    assert.equal(joined.length, 1, `the other finds it running:\n${shown(a)}\n${shown(b)}`);

    await query(url, (sql) => sql.unsafe("create table kept (n int); insert into kept values (7)"));
    const stop = await cli(["stop"]);
    assert.equal(stop.code, 0, shown(stop));
    const again = await cli(["start"]);
    assert.equal(again.code, 0, shown(again));
    assert.equal(again.stdout.trim(), url);
    const [{ n }] = await query(url, (sql) => sql`select n from kept`);
    assert.equal(n, 7, "the data survived both starts and a restart");
    assert.equal(await exists(`${dir}.lock`), false, "the lock file goes with its holder");
  } finally {
    await cli(["stop"]);
    await Deno.remove(project, { recursive: true });
  }
});

Deno.test("a failed db start removes only what it made, never data that appeared", async () => {
  const project = await projectDir("pgflow-db-race-");
  const dir = `${project}/db`;
  try {
    // The start pauses after making the folder, before the cluster's data folder; meanwhile
    // something else (not pgflow) writes into it. initdb cannot use it, and the start fails.
    const pending = runCli(["db", "start", "--data-dir", dir], {
      env: { PGFLOW_DB_TEST_PAUSE: "initdb:4000" },
    });
    await until("the folder", () => exists(`${dir}/.gitignore`));
    await Deno.mkdir(`${dir}/data`);
    await Deno.writeTextFile(`${dir}/data/precious.txt`, "not pgflow's\n");
    await Deno.writeTextFile(`${dir}/notes.txt`, "mine\n");
    const r = await pending;
    assert.equal(r.code, 1, shown(r));
    assert.match(r.stderr, /db\/data appeared while the database was being created/, shown(r));
    assert.equal(await Deno.readTextFile(`${dir}/data/precious.txt`), "not pgflow's\n");
    assert.equal(await Deno.readTextFile(`${dir}/notes.txt`), "mine\n");
    assert.equal(await exists(`${dir}/.gitignore`), false, "what the start made is gone");
    assert.equal(await exists(`${dir}/pgflow-db.json`), false);
  } finally {
    await Deno.remove(project, { recursive: true });
  }
});

Deno.test("db stop during db start waits for the start to finish, then stops", async () => {
  const project = await projectDir("pgflow-db-race-");
  const dir = `${project}/db`;
  const cli = (args: string[], env: Record<string, string> = {}) =>
    runCli(["db", ...args, "--data-dir", dir], { cwd: project, env });
  try {
    const first = await cli(["start", "--port", somePort()]);
    assert.equal(first.code, 0, shown(first));
    const port = Number(new URL(first.stdout.trim()).port);
    assert.equal((await cli(["stop"])).code, 0);

    // The start pauses with the server up and PGMQ and the migrations still to do; the stop
    // comes in then.
    const starting = cli(["start"], { PGFLOW_DB_TEST_PAUSE: "setup:5000" });
    await until("the server", () =>
      Deno.connect({ hostname: "127.0.0.1", port }).then((c) => {
        c.close();
        return true;
      }, () => false));
    const stopping = cli(["stop"]);
    const [start, stop] = await Promise.all([starting, stopping]);
    assert.equal(start.code, 0, shown(start));
    assert.equal(start.stdout.trim(), first.stdout.trim());
    assert.equal(stop.code, 0, shown(stop));
    assert.match(
      stop.stderr,
      /waiting for another pgflow db command on .*db \(pid \d+: db start\)/,
    );
    assert.match(stop.stderr, /stopped; the data stays/, shown(stop));
    const status = await cli(["status"]);
    assert.match(status.stdout, /^state\s+stopped$/m, shown(status));
  } finally {
    await cli(["stop"]);
    await Deno.remove(project, { recursive: true });
  }
});

Deno.test("a db command killed while holding the lock does not block the next one", async () => {
  const project = await projectDir("pgflow-db-race-");
  const dir = `${project}/db`;
  const cli = (args: string[]) => runCli(["db", ...args, "--data-dir", dir], { cwd: project });
  try {
    // A start that holds the lock for 10 minutes, killed once its server is up.
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(Deno.env.toObject())) {
      if (k !== "DATABASE_URL" && k !== "EDGE_WORKER_DB_URL") env[k] = v;
    }
    const holder = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--no-lock",
        new URL("../../src/cli/main.ts", import.meta.url).href,
        "db",
        "start",
        "--data-dir",
        dir,
        "--port",
        somePort(),
      ],
      env: { ...env, NO_COLOR: "1", PGFLOW_DB_TEST_PAUSE: "setup:600000" },
      clearEnv: true,
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const stderr = new Response(holder.stderr).text();
    await until("the held lock", async () => {
      const text = await Deno.readTextFile(`${dir}.lock`).catch(() => "");
      return text.includes("db start") && await exists(`${dir}/pgflow-db.json`);
    });
    await until("the server", async () => (await cli(["status"])).code === 0);
    holder.kill("SIGKILL");
    await holder.status;
    await stderr;
    assert.equal(await exists(`${dir}.lock`), true, "the dead holder left its file behind");

    // Not waiting forever: the OS dropped the dead process's lock.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stop = await Promise.race([
      cli(["stop"]),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("db stop still waits on a dead lock")), 60_000);
      }),
    ]).finally(() => clearTimeout(timer));
    assert.equal(stop.code, 0, shown(stop));
    assert.match(stop.stderr, /stopped; the data stays/, shown(stop));
    assert.equal(await exists(`${dir}.lock`), false, "the next holder removed the stale file");
  } finally {
    await cli(["stop"]);
    await Deno.remove(project, { recursive: true });
  }
});

Deno.test("a --data-dir a shell would interpret is refused before anything runs", async () => {
  const project = await projectDir("pgflow-db-race-");
  const marker = `/tmp/pgflow-planted-${crypto.randomUUID()}`;
  try {
    for (
      const name of [
        `x$(touch ${marker}-1)`,
        `x\`touch ${marker}-2\``,
        `x"$(touch ${marker}-3)"`,
        `x\\$(touch ${marker}-4)`,
      ]
    ) {
      const r = await runCli(["db", "start", "--data-dir", name], { cwd: project });
      assert.equal(r.code, 2, shown(r));
      assert.ok(r.stderr.includes(JSON.stringify(`${project}/${name}`)), shown(r));
      assert.match(
        r.stderr,
        /which pg_ctl hands to a shell: nothing was created\. Pass --data-dir with a path without \$ ` " or \\/,
      );
    }
    for (const n of [1, 2, 3, 4]) {
      assert.equal(await exists(`${marker}-${n}`), false, "the planted command never ran");
    }
    assert.deepEqual([...Deno.readDirSync(project)], [], "nothing was created");
  } finally {
    for (const n of [1, 2, 3, 4]) await Deno.remove(`${marker}-${n}`).catch(() => {});
    await Deno.remove(project, { recursive: true });
  }
});

Deno.test("a port picked for a new database and taken before it binds: the next free one is used", async () => {
  const project = await projectDir("pgflow-db-race-");
  const dir = `${project}/db`;
  const cli = (args: string[], env: Record<string, string> = {}) =>
    runCli(["db", ...args, "--data-dir", dir], { cwd: project, env });
  let squatter: Deno.Listener | undefined;
  try {
    // No --port: the start picks one when it creates the database, then pauses before the bind;
    // meanwhile another program takes that port (as a second start racing this one would).
    const pending = cli(["start"], { PGFLOW_DB_TEST_PAUSE: "bind:3000" });
    await until("the recorded port", () => exists(`${dir}/pgflow-db.json`));
    const picked = JSON.parse(await Deno.readTextFile(`${dir}/pgflow-db.json`)).port as number;
    squatter = Deno.listen({ hostname: "127.0.0.1", port: picked });
    // Asked while the start still runs, db url waits for it and answers the port it moved to,
    // not the one it recorded first (a user exporting DATABASE_URL would reach another server).
    const asked = await cli(["url"]);
    const r = await pending;
    assert.equal(asked.code, 0, shown(asked));
    assert.equal(asked.stdout.trim(), r.stdout.trim());
    assert.equal(r.code, 0, shown(r));
    const moved = Number(new URL(r.stdout.trim()).port);
    assert.notEqual(moved, picked);
    assert.match(r.stderr, new RegExp(`port ${picked} was taken; started on ${moved}`), shown(r));
    assert.equal(JSON.parse(await Deno.readTextFile(`${dir}/pgflow-db.json`)).port, moved);
    assert.equal((await cli(["stop"])).code, 0);
  } finally {
    squatter?.close();
    await cli(["stop"]).catch(() => {});
    await Deno.remove(project, { recursive: true });
  }
});
