/**
 * Runs the CLI as a user would: a `deno run` process of `src/cli/main.ts` (or of a copy of the
 * module), with its exit code, stdout and stderr. `DATABASE_URL` and `EDGE_WORKER_DB_URL` are not
 * inherited unless given.
 *
 * @module
 */
import postgres from "postgres";
import { catalogSnapshot } from "../../local/catalog.ts";
import { withHeader } from "../../local/migration_writer.ts";

/** What one CLI run printed and returned. */
export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Options of {@link runCli}. */
export interface RunOptions {
  /** Extra environment; `undefined` values are removed. */
  env?: Record<string, string | undefined>;
  cwd?: string;
  /** The CLI's entry module (default: this repository's). */
  entry?: string;
  /** Run it as this user (through runuser), e.g. to check a normal user's run as root. */
  user?: string;
  /** The deno binary to run it with (default: this one). */
  deno?: string;
}

const ENTRY = new URL("../../src/cli/main.ts", import.meta.url).href;

/**
 * Runs `pgflow <args>` and waits for it.
 *
 * @example
 * ```ts
 * const { code, stdout } = await runCli(["--help"]);
 * ```
 */
export async function runCli(args: string[], options: RunOptions = {}): Promise<CliRun> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(Deno.env.toObject())) {
    if (k !== "DATABASE_URL" && k !== "EDGE_WORKER_DB_URL") env[k] = v;
  }
  for (const [k, v] of Object.entries(options.env ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  env.NO_COLOR = "1";
  const deno = ["run", "-A", "--no-lock", options.entry ?? ENTRY, ...args];
  const [cmd, argv] = options.user
    ? ["runuser", [
      "-u",
      options.user,
      "--",
      "env",
      ...Object.entries(env).map(([k, v]) => `${k}=${v}`),
      options.deno ?? Deno.execPath(),
      ...deno,
    ]]
    : [options.deno ?? Deno.execPath(), deno];
  const out = await new Deno.Command(cmd, {
    args: argv,
    env: options.user ? undefined : env,
    clearEnv: !options.user,
    cwd: options.cwd ?? Deno.cwd(),
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, stdout: decode(out.stdout), stderr: decode(out.stderr) };
}

/** A message for assertions: both streams of a run. */
export function shown(run: CliRun): string {
  return `exit ${run.code}\n--- stdout\n${run.stdout}\n--- stderr\n${run.stderr}`;
}

/** A new Supabase project folder (holding supabase/config.toml), in a temporary folder. */
export async function supabaseProject(): Promise<string> {
  const root = await Deno.makeTempDir({ prefix: "pgflow-project-" });
  await Deno.mkdir(`${root}/supabase/migrations`, { recursive: true });
  await Deno.writeTextFile(`${root}/supabase/config.toml`, 'project_id = "test"\n');
  return root;
}

const ROOT = new URL("../../", import.meta.url);

/** A copy of the module as `deno publish` would upload it, served over HTTP. */
export interface ServedModule {
  /** The URL of the CLI's entry in the served copy. */
  entry: string;
  /** The copy's folder (to change before serving, e.g. to inject a broken migration). */
  dir: string;
  close(): Promise<void>;
}

/**
 * Copies exactly the files `deno.json`'s `publish.include` lists into a temporary folder, releases
 * every draft migration in the copy's manifest (as `deno task migration:release` does before a
 * release), and serves the copy over HTTP, so the CLI runs from a URL whose folders cannot be
 * listed, as from `jsr:`.
 *
 * @example
 * ```ts
 * const served = await servePublished();
 * try { await runCli(["--help"], { entry: served.entry }); } finally { await served.close(); }
 * ```
 */
export async function servePublished(): Promise<ServedModule> {
  const dir = await publishedCopy();
  await releaseAll(dir);
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    const path = decodeURIComponent(new URL(req.url).pathname);
    if (path.includes("..") || path.endsWith("/")) {
      return new Response("not found", { status: 404 });
    }
    try {
      return new Response(await Deno.readFile(`${dir}${path}`), {
        headers: { "content-type": path.endsWith(".ts") ? "application/typescript" : "text/plain" },
      });
    } catch {
      return new Response("not found", { status: 404 });
    }
  });
  return {
    entry: `http://127.0.0.1:${server.addr.port}/src/cli/main.ts`,
    dir,
    close: async () => {
      await server.shutdown();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
}

/**
 * Copies exactly the files `deno.json`'s `publish.include` lists into a new temporary folder and
 * returns it: the module as `deno publish` uploads it. Its CLI entry is `<dir>/src/cli/main.ts`.
 */
export async function publishedCopy(): Promise<string> {
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT)));
  const dir = await Deno.makeTempDir({ prefix: "pgflow-published-" });
  for (const path of config.publish.include as string[]) {
    const from = new URL(path, ROOT).pathname.replace(/\/$/, "");
    const to = `${dir}/${path}`.replace(/\/$/, "");
    await Deno.mkdir(to.replace(/\/[^/]*$/, ""), { recursive: true });
    const out = await new Deno.Command("cp", { args: ["-a", from, to] }).output();
    if (!out.success) throw new Error(`cp ${from} ${to} failed`);
  }
  return dir;
}

/** Lists every migration of the copy in its manifest, with its checksum. */
export async function releaseAll(dir: string): Promise<void> {
  const files = [...Deno.readDirSync(`${dir}/supabase/migrations`)].map((e) => e.name)
    .filter((n) => n.endsWith(".sql")).sort();
  const lines = [];
  for (const file of files) {
    const text = (await Deno.readTextFile(`${dir}/supabase/migrations/${file}`)).replaceAll(
      "\r\n",
      "\n",
    );
    const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
    const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
    lines.push(`${hex}  ${file}\n`);
  }
  await Deno.writeTextFile(`${dir}/supabase/migrations.sha256`, lines.join(""));
}

/**
 * Adds `bodies.length` later engine migrations to the copy of the module in `dir`, after its own,
 * written as the tooling writes a migration (one transaction, the guard, a 5 s lock timeout, the
 * record of itself), and lists every migration of the copy in its manifest. Returns their names
 * (file names without `.sql`), in order. With only the baseline shipped, tests of upgrades and of
 * the migrator's record use these.
 *
 * @example
 * ```ts
 * const [later] = await addLaterMigrations(copy, ["create function pgflow.later() returns int language sql as 'select 1';"]);
 * ```
 */
export async function addLaterMigrations(dir: string, bodies: string[]): Promise<string[]> {
  const names = bodies.map((_, i) => `2999010100${String(i).padStart(4, "0")}_pgflow_later_${i}`);
  for (const [i, name] of names.entries()) {
    await Deno.writeTextFile(
      `${dir}/supabase/migrations/${name}.sql`,
      withHeader(name.replace(/^\d+_/, ""), `${bodies[i]}\n`, [], [], name),
    );
  }
  await releaseAll(dir);
  return names;
}

/** A body for {@link addLaterMigrations}: creates the function `pgflow.later_<n>()`. */
export function laterFunction(n: number): string {
  return `create function pgflow.later_${n}() returns int language sql as 'select ${n}';`;
}

/** The engine's migration files of this checkout, in order. */
export function engineFiles(): string[] {
  return [...Deno.readDirSync(new URL("supabase/migrations/", ROOT))].map((e) => e.name)
    .filter((n) => n.endsWith(".sql")).sort();
}

/**
 * Everything a migration or a CLI command could change in a database: the pgflow and pgmq
 * catalogs, the schemas, the extensions, and the migration records (pgflow's and Supabase's).
 * (Roles are the cluster's, shared with tests running alongside, so they are not compared.)
 */
export async function databaseState(url: string): Promise<Map<string, string>> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const all = new Map<string, string>();
    for (const schema of ["pgflow", "pgmq"]) {
      for (const [k, v] of await catalogSnapshot(sql, schema)) all.set(`${schema}: ${k}`, v);
    }
    const [row] = await sql<{ schemas: string; extensions: string }[]>`
      select (select string_agg(nspname, ',' order by nspname) from pg_namespace) as schemas,
             (select string_agg(extname, ',' order by extname) from pg_extension) as extensions`;
    all.set("schemas", row.schemas);
    all.set("extensions", row.extensions);
    for (const table of ["pgflow.migrations", "supabase_migrations.schema_migrations"]) {
      const [{ present }] = await sql`select to_regclass(${table}) is not null as present`;
      if (present) {
        const rows = await sql.unsafe(`select * from ${table} order by 1`);
        all.set(`rows of ${table}`, JSON.stringify(rows.map((r) => r.name ?? r.version)));
      }
    }
    return all;
  } finally {
    await sql.end();
  }
}

/**
 * A fresh project folder (world-readable, as a project folder usually is, so the server user
 * reaches it), owned by `owner` when given.
 *
 * @example
 * ```ts
 * const project = await projectDir("pgflow-db-test-");
 * ```
 */
export async function projectDir(prefix: string, owner?: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix });
  await Deno.chmod(dir, 0o755);
  if (owner) await new Deno.Command("chown", { args: ["-R", owner, dir] }).output();
  return dir;
}

/**
 * Runs `fn` on a one-connection pool to `url`, closed afterwards.
 *
 * @example
 * ```ts
 * const [{ n }] = await query(url, (sql) => sql`select 1 as n`);
 * ```
 */
export async function query<T>(url: string, fn: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    return await fn(sql);
  } finally {
    await sql.end();
  }
}
