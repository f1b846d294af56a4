/**
 * `pgflow migrate`: applies the missing engine migrations, each in its own transaction and recorded
 * in pgflow.migrations, directly and through PgBouncer in transaction mode; continues a database
 * set up by `supabase db push`; refuses a half-applied, unknown or newer state, a database without
 * PGMQ, a wrong URL and a role without privileges, each with what to do and changing nothing; a
 * migration that fails halfway is rolled back and named, and the next run continues from it.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { startPgBouncer } from "../../local/pgbouncer.ts";
import { withScratchDatabase } from "../../local/scratch_db.ts";
import { catalogSnapshot, diffCatalogs } from "../../local/catalog.ts";
import { pgmqSource, serverUrl, testDatabase } from "../support/db.ts";
import { TEMPLATES } from "../support/templates.ts";
import {
  addLaterMigrations,
  databaseState,
  engineFiles,
  laterFunction,
  publishedCopy,
  query,
  releaseAll,
  runCli,
  shown,
} from "./helpers.ts";

const pgmqOnly = testDatabase(import.meta.url, { template: "pgmq" });
const migrated = testDatabase(import.meta.url, { template: "pgflow" });
const empty = testDatabase(import.meta.url, { template: "empty" });
const NAMES = engineFiles().map((f) => f.slice(0, -4));

function templateCatalog(): Promise<Map<string, string>> {
  return withScratchDatabase(serverUrl(), (sql) => catalogSnapshot(sql, "pgflow"), {
    template: TEMPLATES.pgflow,
  });
}

async function recorded(url: string): Promise<string[]> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    return (await sql`select name from pgflow.migrations order by name`).map((r) => r.name);
  } finally {
    await sql.end();
  }
}

async function run(url: string, text: string): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(text).simple();
  } finally {
    await sql.end();
  }
}

/** Checks the database is what the migrations make, recorded once each. */
async function assertMigrated(url: string): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const drift = diffCatalogs(
      await catalogSnapshot(sql, "pgflow"),
      await templateCatalog(),
      "migrate",
      "template",
    );
    assert.deepEqual(drift, [], drift.join("\n"));
  } finally {
    await sql.end();
  }
  assert.deepEqual(await recorded(url), NAMES);
}

pgmqOnly.test(
  "migrate applies every migration, recorded, and a second run changes nothing",
  async ({ url }) => {
    const first = await runCli(["migrate", "--database-url", url]);
    assert.equal(first.code, 0, shown(first));
    for (const [i, name] of NAMES.entries()) {
      assert.match(first.stderr, new RegExp(`${i + 1}/${NAMES.length} ${name}\\.sql`));
    }
    assert.match(first.stderr, /migrated on .* to engine \d+\.\d+\.\d+/);
    await assertMigrated(url);
    const before = await databaseState(url);
    const again = await runCli(["migrate"], { env: { DATABASE_URL: url } });
    assert.equal(again.code, 0, shown(again));
    assert.match(
      again.stderr,
      new RegExp(`up to date on .*: engine .*, ${NAMES.length} migrations`),
    );
    assert.deepEqual(await databaseState(url), before);
  },
  { fresh: true },
);

pgmqOnly.test("migrate through PgBouncer in transaction mode, twice at once", async ({ url }) => {
  const bouncer = await startPgBouncer({
    serverPort: Number(new URL(url).port),
    mode: "transaction",
  });
  try {
    const via = bouncer.via(url);
    const runs = await Promise.all([
      runCli(["migrate", "--database-url", via]),
      runCli(["migrate", "--database-url", via]),
    ]);
    for (const r of runs) assert.equal(r.code, 0, shown(r));
    await assertMigrated(url);
    const status = await runCli(["status", "--database-url", via]);
    assert.match(status.stdout, /engine\s+\d+\.\d+\.\d+ \(\d+ migrations/, shown(status));
  } finally {
    await bouncer.destroy();
  }
}, { fresh: true });

pgmqOnly.test(
  "where the Supabase CLI keeps the migration history, migrate refuses (db push would then fail) unless told to ignore it",
  async ({ url }) => {
    // What `supabase db push` creates on its first run.
    await run(
      url,
      `create schema supabase_migrations;
       create table supabase_migrations.schema_migrations (version text primary key, statements text[], name text);`,
    );
    const before = await databaseState(url);
    const refused = await runCli(["migrate", "--database-url", url]);
    assert.equal(refused.code, 1, shown(refused));
    assert.match(
      refused.stderr,
      /the Supabase CLI manages this database's migrations .*nothing was changed.*`pgflow install` then `supabase db push`.*--ignore-supabase-history/s,
    );
    assert.deepEqual(await databaseState(url), before, "nothing changed");
    const forced = await runCli(["migrate", "--database-url", url, "--ignore-supabase-history"]);
    assert.equal(forced.code, 0, shown(forced));
    await assertMigrated(url);
    // Up to date: nothing to apply, nothing to refuse.
    const again = await runCli(["migrate", "--database-url", url]);
    assert.equal(again.code, 0, shown(again));
  },
  { fresh: true },
);

migrated.test("a database set up as supabase db push does (the local runner) is up to date", async ({ url }) => {
  const run = await runCli(["migrate", "--database-url", url]);
  assert.equal(run.code, 0, shown(run));
  assert.match(run.stderr, /up to date/);
  assert.deepEqual(await recorded(url), NAMES, "the migrations recorded themselves");
});

pgmqOnly.test(
  "a pgflow schema nothing records, a gap and a newer release's migration are refused",
  async ({ url }) => {
    await run(url, "create schema pgflow; create table pgflow.flows (flow_slug text)");
    let before = await databaseState(url);
    const unknown = await runCli(["migrate", "--database-url", url]);
    assert.equal(unknown.code, 1, shown(unknown));
    assert.match(
      unknown.stderr,
      /has a pgflow schema, but nothing records which engine migrations built it/,
    );
    assert.match(unknown.stderr, /Nothing was changed\. .*drop schema pgflow cascade;/);
    assert.deepEqual(await databaseState(url), before);

    // A release that ships two migrations after the baseline.
    await run(url, "drop schema pgflow cascade");
    const copy = await publishedCopy();
    try {
      const names = [...NAMES, ...await addLaterMigrations(copy, [0, 1].map(laterFunction))];
      const entry = `${copy}/src/cli/main.ts`;
      assert.equal((await runCli(["migrate", "--database-url", url], { entry })).code, 0);
      await run(url, `delete from pgflow.migrations where name = '${names[1]}'`);
      before = await databaseState(url);
      const gap = await runCli(["migrate", "--database-url", url], { entry });
      assert.equal(gap.code, 1, shown(gap));
      assert.match(
        gap.stderr,
        new RegExp(`record has a gap: ${names[1]} is not recorded, but the later ${names[2]}`),
      );
      assert.match(
        gap.stderr,
        /Nothing was changed\. If the missing migration's changes are there, record it/,
      );
      assert.deepEqual(await databaseState(url), before);

      await run(
        url,
        `insert into pgflow.migrations (name) values ('${names[1]}'),
                    ('29990101000000_pgflow_from_the_future')`,
      );
      before = await databaseState(url);
      const newer = await runCli(["migrate", "--database-url", url], { entry });
      assert.equal(newer.code, 1, shown(newer));
      assert.match(
        newer.stderr,
        /does not ship \(29990101000000_pgflow_from_the_future\): a newer release migrated it/,
      );
      assert.match(newer.stderr, /Run that release's migrate instead/);
      assert.deepEqual(await databaseState(url), before);
    } finally {
      await Deno.remove(copy, { recursive: true });
    }
  },
  { fresh: true },
);

empty.test(
  "without PGMQ, migrate refuses (changing nothing) unless told to install the compatible SQL",
  async ({ url }) => {
    if (pgmqSource() === "extension") {
      const run = await runCli(["migrate", "--database-url", url]);
      assert.equal(run.code, 0, shown(run));
      return;
    }
    const before = await databaseState(url);
    const refused = await runCli(["migrate", "--database-url", url]);
    assert.equal(refused.code, 1, shown(refused));
    assert.match(
      refused.stderr,
      /PGMQ is not installed in this database and the server has no pgmq extension/,
    );
    assert.match(refused.stderr, /nothing was changed\. .*--pgmq-sql/);
    assert.deepEqual(await databaseState(url), before);
    const installed = await runCli(["migrate", "--database-url", url, "--pgmq-sql"]);
    assert.equal(installed.code, 0, shown(installed));
    assert.match(installed.stderr, /installing the PGMQ-compatible SQL/);
    await assertMigrated(url);
  },
  { fresh: true },
);

pgmqOnly.test(
  "a migration that fails halfway is rolled back and named; the next run continues from it",
  async ({ url }) => {
    // A release with three migrations after the baseline, the last failing before its commit.
    const copy = await publishedCopy();
    const firstThree = await publishedCopy();
    try {
      const later = await addLaterMigrations(copy, [0, 1, 2].map(laterFunction));
      await addLaterMigrations(firstThree, [0, 1].map(laterFunction));
      const names = [...NAMES, ...later];
      const broken = `${copy}/supabase/migrations/${later[2]}.sql`;
      const text = await Deno.readTextFile(broken);
      await Deno.writeTextFile(
        broken,
        text.replace(
          /\ncommit;\n$/,
          () => "\ndo $$ begin raise exception 'injected failure'; end $$;\ncommit;\n",
        ),
      );
      await releaseAll(copy);
      const entry = `${copy}/src/cli/main.ts`;
      const failed = await runCli(["migrate", "--database-url", url], { entry });
      assert.equal(failed.code, 1, shown(failed));
      assert.match(
        failed.stderr,
        new RegExp(
          `migration ${later[2]}\\.sql failed and was rolled back, so it changed nothing: ` +
            "injected failure",
        ),
      );
      assert.match(
        failed.stderr,
        new RegExp(`Applied before it: ${names.slice(0, 3).join(", ")}\\.`),
      );
      assert.deepEqual(await recorded(url), names.slice(0, 3));
      // Nothing of the failed file is there: the state equals the first three files applied alone.
      const partial = await withScratchDatabase(serverUrl(), async (_sql, scratch) => {
        const ok = await runCli(["migrate", "--database-url", scratch], {
          entry: `${firstThree}/src/cli/main.ts`,
        });
        assert.equal(ok.code, 0, shown(ok));
        return await databaseState(scratch);
      }, { template: TEMPLATES.pgmq });
      const drift = diffCatalogs(
        await databaseState(url),
        partial,
        "after the failure",
        "three files",
      );
      assert.deepEqual(drift.filter((d) => !d.startsWith("rows of")), [], drift.join("\n"));

      await Deno.writeTextFile(broken, text);
      await releaseAll(copy);
      const resumed = await runCli(["migrate", "--database-url", url], { entry });
      assert.equal(resumed.code, 0, shown(resumed));
      assert.match(resumed.stderr, /applying 1 migration\(s\).* \(3 already applied\)/);
      assert.deepEqual(await recorded(url), names);
      const [{ n }] = await query(url, (sql) => sql`select pgflow.later_2() as n`);
      assert.equal(n, 2);
    } finally {
      await Deno.remove(copy, { recursive: true });
      await Deno.remove(firstThree, { recursive: true });
    }
  },
  { fresh: true },
);

pgmqOnly.test(
  "a wrong URL or no URL says what was wrong and what to do; the password is never shown",
  async ({ url }) => {
    const cases: [string[], Record<string, string | undefined>, number, RegExp][] = [
      [
        ["--database-url", "postgres://postgres:s3cret@127.0.0.1:1/postgres"],
        {},
        1,
        /could not connect to 127\.0\.0\.1:1: connection refused \(ECONNREFUSED\)\. Is the database running there\? For the local database run `deno task pgflow db start`/,
      ],
      [
        ["--database-url", "postgres://postgres:s3cret@no-such-host.invalid/postgres"],
        {},
        1,
        /host no-such-host\.invalid not found \((ENOTFOUND|EAI_AGAIN)\); check the URL \(postgres:\/\/postgres:\*\*\*@no-such-host\.invalid\/postgres\)/,
      ],
      [
        [
          "--database-url",
          url.replace("//postgres@", "//postgres:s3cret@").replace(/\/[^/]*$/, "/t_no_such_db"),
        ],
        {},
        1,
        /has no database t_no_such_db/,
      ],
      [["--database-url", "not a url s3cret"], {}, 2, /--database-url is not a URL/],
      [
        ["--database-url", "https://user:s3cret@example.com/db"],
        {},
        2,
        /--database-url is a https: URL/,
      ],
      [
        [],
        {},
        2,
        /pgflow migrate needs a database: pass --database-url .* or set EDGE_WORKER_DB_URL or DATABASE_URL/,
      ],
      [[], { DATABASE_URL: "postgres://postgres:s3cret@127.0.0.1:1/x" }, 1, /connection refused/],
      [["--database-url", url, "--force"], {}, 2, /unknown flag "--force" for pgflow migrate/],
    ];
    const before = await databaseState(url);
    for (const [args, env, code, message] of cases) {
      const r = await runCli(["migrate", ...args], { env });
      assert.equal(r.code, code, shown(r));
      assert.match(r.stderr, message, shown(r));
      assert.doesNotMatch(r.stdout + r.stderr, /s3cret/, "the password is never printed");
    }
    // EDGE_WORKER_DB_URL comes before DATABASE_URL.
    const preferred = await runCli(["migrate"], {
      env: { EDGE_WORKER_DB_URL: url, DATABASE_URL: "postgres://postgres@127.0.0.1:1/x" },
    });
    assert.equal(preferred.code, 0, shown(preferred));
    void before;
  },
  { fresh: true },
);

pgmqOnly.test(
  "a role without privileges is refused with what to do, and nothing changes",
  async ({ url }) => {
    const role = `t_nopriv_${crypto.randomUUID().slice(0, 8)}`;
    await run(url, `create role ${role} login`);
    try {
      const as = url.replace("//postgres@", `//${role}@`);
      const before = await databaseState(url);
      const r = await runCli(["migrate", "--database-url", as]);
      assert.equal(r.code, 1, shown(r));
      assert.match(
        r.stderr,
        /failed and was rolled back, so it changed nothing: permission denied for database/,
      );
      assert.match(r.stderr, /run migrate as the database's owner \(postgres on Supabase\)/);
      assert.deepEqual(await databaseState(url), before);
      // On a migrated database, the role cannot read the record either.
      assert.equal((await runCli(["migrate", "--database-url", url])).code, 0);
      const after = await databaseState(url);
      const again = await runCli(["migrate", "--database-url", as]);
      assert.equal(again.code, 1, shown(again));
      assert.match(
        again.stderr,
        /could not read which engine migrations the database has: permission denied for schema pgflow/,
      );
      assert.match(again.stderr, /Connect as the role that owns the pgflow schema/);
      assert.deepEqual(await databaseState(url), after);
    } finally {
      await run(url, `drop owned by ${role}; drop role ${role}`);
    }
  },
  { fresh: true },
);
