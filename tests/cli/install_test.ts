/**
 * `pgflow install`: the engine's migrations land in a Supabase project's supabase/migrations/ under
 * new timestamps, once; a second run adds only what is missing and never rewrites a file; a folder
 * that is not a Supabase project, a hole in the installed files and a bad flag are refused with
 * what to do, writing nothing. It works from a served copy of the published files too.
 */
import assert from "node:assert/strict";
import {
  addLaterMigrations,
  engineFiles,
  laterFunction,
  publishedCopy,
  runCli,
  servePublished,
  shown,
  supabaseProject,
} from "./helpers.ts";

const labels = engineFiles().map((f) => f.replace(/^\d+_/, ""));

function migrationsOf(project: string): string[] {
  return [...Deno.readDirSync(`${project}/supabase/migrations`)].map((e) => e.name).sort();
}

async function snapshot(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for await (const e of Deno.readDir(dir)) {
    const path = `${dir}/${e.name}`;
    if (e.isDirectory) { for (const [k, v] of await snapshot(path)) out.set(k, v); }
    else out.set(path, await Deno.readTextFile(path));
  }
  return out;
}

Deno.test("install writes every engine migration once, timestamped after the project's own", async () => {
  const project = await supabaseProject();
  try {
    await Deno.writeTextFile(
      `${project}/supabase/migrations/20200101000000_app.sql`,
      "select 1;\n",
    );
    const first = await runCli(["install"], { cwd: project });
    assert.equal(first.code, 0, shown(first));
    const files = migrationsOf(project);
    assert.equal(files.length, labels.length + 1, files.join("\n"));
    assert.equal(files[0], "20200101000000_app.sql");
    const installed = files.slice(1);
    assert.deepEqual(installed.map((f) => f.replace(/^\d+_/, "")), labels, "engine order kept");
    for (const f of installed) assert.match(f, /^\d{14}_pgflow_[a-z0-9_]+\.sql$/);
    assert.equal(new Set(installed.map((f) => f.slice(0, 14))).size, installed.length, "distinct");
    const now = new Date().toISOString().replace(/\D/g, "").slice(0, 14);
    assert.ok(installed[0].slice(0, 14) <= now, "stamped with the current UTC time");
    // Byte for byte the engine's files.
    for (const [i, f] of installed.entries()) {
      assert.equal(
        await Deno.readTextFile(`${project}/supabase/migrations/${f}`),
        await Deno.readTextFile(
          new URL(`../../supabase/migrations/${engineFiles()[i]}`, import.meta.url),
        ),
      );
    }
    assert.match(first.stderr, /Next: `supabase db push`/);
    assert.equal(first.stdout.trim().split("\n").length, labels.length, "each path on stdout");

    const before = await snapshot(project);
    const again = await runCli(["install", "--supabase-dir", `${project}/supabase`]);
    assert.equal(again.code, 0, shown(again));
    assert.match(again.stderr, /up to date: all \d+ engine migrations are in/);
    assert.deepEqual(await snapshot(project), before, "a second run changes nothing");
  } finally {
    await Deno.remove(project, { recursive: true });
  }
});

/** A copy of the module that ships two migrations after the baseline; its CLI entry. */
async function laterRelease(): Promise<{ copy: string; entry: string }> {
  const copy = await publishedCopy();
  await addLaterMigrations(copy, [0, 1].map(laterFunction));
  return { copy, entry: `${copy}/src/cli/main.ts` };
}

Deno.test("install adds only the missing ones, after the newest file, and never rewrites one", async () => {
  const project = await supabaseProject();
  const { copy, entry } = await laterRelease();
  try {
    assert.equal((await runCli(["install"], { cwd: project, entry })).code, 0);
    const files = migrationsOf(project);
    // A newer release's migration is missing: remove the last one; edit another.
    const last = files.at(-1)!;
    await Deno.remove(`${project}/supabase/migrations/${last}`);
    const edited = `${project}/supabase/migrations/${files[0]}`;
    await Deno.writeTextFile(edited, "-- edited by hand\n", { append: true });
    const editedText = await Deno.readTextFile(edited);
    // The project's newest migration is in the future (a clock behind): the new file goes after.
    await Deno.writeTextFile(
      `${project}/supabase/migrations/29990101000000_app.sql`,
      "select 1;\n",
    );
    // The project folder works too.
    const run = await runCli(["install", "--supabase-dir", project], { entry });
    assert.equal(run.code, 0, shown(run));
    assert.match(run.stderr, new RegExp(`warning: .*${files[0]} differs from the engine's`));
    assert.equal(await Deno.readTextFile(edited), editedText, "the edited file is kept");
    const now = migrationsOf(project);
    assert.equal(now.length, files.length + 1);
    assert.equal(now.at(-1), `29990101000001_${last.replace(/^\d+_/, "")}`);
  } finally {
    await Deno.remove(project, { recursive: true });
    await Deno.remove(copy, { recursive: true });
  }
});

Deno.test("install refuses a hole before an installed migration, writing nothing", async () => {
  const project = await supabaseProject();
  const { copy, entry } = await laterRelease();
  try {
    assert.equal((await runCli(["install"], { cwd: project, entry })).code, 0);
    const files = migrationsOf(project);
    await Deno.remove(`${project}/supabase/migrations/${files[1]}`);
    const before = await snapshot(project);
    const run = await runCli(["install"], { cwd: project, entry });
    assert.equal(run.code, 1, shown(run));
    assert.match(
      run.stderr,
      new RegExp(
        `lacks the engine migration ${files[1].replace(/^\d+_|\.sql$/g, "")}, but holds the later`,
      ),
    );
    assert.match(run.stderr, /nothing was written\. .*Restore the file from version control/);
    assert.deepEqual(await snapshot(project), before);
  } finally {
    await Deno.remove(project, { recursive: true });
    await Deno.remove(copy, { recursive: true });
  }
});

Deno.test("install refuses a folder that is not a Supabase project, and a bad flag, writing nothing", async () => {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-not-supabase-" });
  try {
    await Deno.mkdir(`${dir}/supabase/migrations`, { recursive: true }); // no config.toml
    for (const args of [["install"], ["install", "--supabase-dir", `${dir}/supabase`]]) {
      const run = await runCli(args, { cwd: dir });
      assert.equal(run.code, 1, shown(run));
      assert.match(run.stderr, /is not a Supabase project folder: it has no config\.toml/);
      assert.match(run.stderr, /nothing was written\. Run `supabase init` in your project first/);
    }
    const missing = await runCli(["install", "--supabase-dir", `${dir}/nope`]);
    assert.equal(missing.code, 1, shown(missing));
    assert.match(missing.stderr, /nope is not a Supabase project folder: it does not exist/);
    const flag = await runCli(["install", "--supabase", "x"], { cwd: dir });
    assert.equal(flag.code, 2, shown(flag));
    assert.match(
      flag.stderr,
      /unknown flag "--supabase" for pgflow install \(its flags: --supabase-dir\); run "pgflow install --help"/,
    );
    assert.deepEqual([...Deno.readDirSync(`${dir}/supabase/migrations`)], [], "nothing written");
    const help = await runCli(["install", "--help"]);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /^pgflow install \[--supabase-dir DIR\]/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("install from the published files, served over HTTP, finds the migrations by their manifest", async () => {
  const served = await servePublished();
  const project = await supabaseProject();
  try {
    const run = await runCli(["install"], { cwd: project, entry: served.entry });
    assert.equal(run.code, 0, shown(run));
    assert.deepEqual(migrationsOf(project).map((f) => f.replace(/^\d+_/, "")), labels);
  } finally {
    await served.close();
    await Deno.remove(project, { recursive: true });
  }
});
