/**
 * The guides say what the code does: every ```ts block in README.md and docs/*.md type-checks
 * (`deno check --doc-only`), the option and variable tables list exactly what the worker and the
 * DSL accept with their real defaults and ranges, every CLI command and flag they use exists, and
 * every relative link resolves. The README starts with the demo and test commands and puts the
 * install path before the demo.
 */
import assert from "node:assert/strict";
import { CLIENT_OPTIONS } from "../../src/client/options.ts";
import { WORKER_OPTIONS } from "../../src/worker/options.ts";
import { assertSucceeded, deno, REPO_ROOT } from "../package/deno_cmd.ts";
import { codeBlocks, relativeLinks, tableRows } from "./markdown.ts";

const read = (path: string) => Deno.readTextFileSync(`${REPO_ROOT}${path}`);

const docs = [...Deno.readDirSync(`${REPO_ROOT}docs`)]
  .filter((e) => e.isFile && e.name.endsWith(".md"))
  .map((e) => `docs/${e.name}`)
  .sort();
const pages = ["README.md", ...docs];
/** The guides of issue 16: each must show real, checked code. */
const GUIDES = ["docs/getting-started.md", "docs/flows.md", "docs/workers.md"];

for (const page of pages) {
  Deno.test(`${page}: its ts blocks type-check`, async () => {
    const blocks = codeBlocks(read(page)).filter((b) => b.lang === "ts" || b.lang === "typescript");
    const checked = blocks.filter((b) => !b.attrs.includes("ignore"));
    const ignored = blocks.length - checked.length;
    if (GUIDES.includes(page) || page === "README.md") {
      assert.ok(checked.length >= 1, `${page} has no checked ts example`);
      // "ts ignore" is for fragments that cannot compile alone; use it sparingly.
      assert.ok(ignored <= 1, `${page} has ${ignored} ts ignore blocks`);
    }
    if (checked.length === 0) return;
    assertSucceeded(
      `deno check --doc-only ${page}`,
      await deno(["check", "--doc-only", page], {
        cwd: REPO_ROOT,
      }),
    );
  });
}

Deno.test("every relative link in the guides resolves", () => {
  for (const page of pages) {
    const base = new URL(page, `file://${REPO_ROOT}`);
    for (const target of relativeLinks(read(page))) {
      const path = new URL(target, base).pathname;
      assert.doesNotThrow(
        () => Deno.statSync(path),
        `${page} links to ${target}, which is missing`,
      );
    }
  }
});

Deno.test("README: what it is, the demo and test commands, then install before the demo", () => {
  const readme = read("README.md");
  const firstHeading = readme.indexOf("\n## ");
  const intro = readme.slice(0, firstHeading);
  assert.ok(intro.includes("workflow engine for Supabase"), "the first lines say what it is");
  const commands = codeBlocks(intro).filter((b) => b.lang === "sh").map((b) => b.code.trim());
  assert.deepEqual(commands, ["npx -y deno@2 task -q demo", "npx -y deno@2 task ci"]);
  const headings = [...readme.matchAll(/^## (.+)$/gm)].map((m) => m[1]);
  assert.match(headings[0], /^Install/, `the first section is the install path: ${headings}`);
  assert.ok(
    headings.indexOf("The demo") > 0 && headings.indexOf("Guides") > headings.indexOf("The demo"),
    `install, then the demo, then the guides: ${headings}`,
  );
  const install = readme.slice(readme.indexOf("## Install"), readme.indexOf("## The demo"));
  const [threeCommands] = codeBlocks(install).filter((b) => b.lang === "sh");
  const lines = threeCommands.code.trim().split("\n").filter((l) => !l.startsWith("#"));
  assert.equal(lines.length, 3, `three commands to a running worker: ${lines}`);
  // Every guide is in the list.
  const guides = readme.slice(readme.indexOf("## Guides"));
  for (const doc of docs) assert.ok(guides.includes(`](${doc})`), `README's guides list ${doc}`);
  // The README's worker is the getting-started function, so the guide's run proves both.
  const worker = codeBlocks(install).find((b) => b.lang === "ts")!;
  const fn = codeBlocks(read("docs/getting-started.md")).find((b) =>
    b.lang === "ts" && b.attrs[0] === "supabase/functions/greet/index.ts"
  )!;
  assert.equal(worker.code, fn.code);
});

Deno.test("README's layout names every folder of src/, every top-level folder and every entry point", () => {
  const readme = read("README.md");
  const start = readme.indexOf("## Layout");
  assert.ok(start >= 0, "README has a Layout section");
  const end = readme.indexOf("\n## ", start + 1);
  const layout = readme.slice(start, end < 0 ? undefined : end);
  const dirs = (path: string) =>
    [...Deno.readDirSync(`${REPO_ROOT}${path}`)]
      .filter((e) => e.isDirectory && !e.name.startsWith("."))
      .map((e) => e.name);
  const named = [
    ...dirs("src").map((d) => `src/${d}`),
    ...dirs("").filter((d) => d !== "node_modules"),
    ...dirs("supabase").map((d) => `supabase/${d}`),
  ];
  const exports = JSON.parse(read("deno.json")).exports as Record<string, string>;
  for (const [name, path] of Object.entries(exports)) {
    named.push(path.replace(/^\.\//, ""), `@pgflow/shared${name.slice(1)}`);
  }
  // `src/x` or `bench` alone, or a folder named through one of its paths (`supabase/schemas`).
  const missing = named.filter((n) => !layout.includes(`\`${n}\``) && !layout.includes(`\`${n}/`));
  assert.deepEqual(missing, [], "README's Layout section does not name these");
});

/** The `readonly name?:` members of one interface in a source file. */
function interfaceKeys(path: string, name: string): string[] {
  const source = read(path);
  const start = source.search(new RegExp(`export interface ${name}\\b`));
  assert.ok(start >= 0, `${name} in ${path}`);
  const body = source.slice(start, source.indexOf("\n}\n", start));
  return [...body.matchAll(/^ {2}readonly ([A-Za-z_]+)\??:/gm)].map((m) => m[1]);
}

/** "20,000 ms" → 20000; "1–1,000" → [1, 1000]. */
const num = (text: string) => Number(text.replace(/[^\d]/g, ""));
const range = (text: string) => text.split(/\s*[–-]\s*/).map(num);

Deno.test("workers.md lists every worker option with its real default and range", () => {
  const rows = new Map(tableRows(read("docs/workers.md"), "option").map((r) => [r[0], r]));
  const configKeys = interfaceKeys("src/worker/config.ts", "EdgeWorkerConfig");
  assert.deepEqual(
    [...rows.keys()].sort(),
    [...configKeys, "queueName", "stepSlug"].sort(),
    "one row per EdgeWorkerConfig option, plus the queue selection",
  );
  for (const [key, option] of Object.entries(WORKER_OPTIONS)) {
    const [, defaultCell, rangeCell] = rows.get(key)!;
    assert.equal(num(defaultCell), option.default, `${key} default`);
    assert.deepEqual(range(rangeCell), [option.min, option.max], `${key} range`);
  }
});

Deno.test("client.md lists every client timing option with its real default and range", () => {
  const rows = new Map(tableRows(read("docs/client.md"), "option").map((r) => [r[0], r]));
  assert.deepEqual(
    [...rows.keys()].sort(),
    interfaceKeys("src/client/client.ts", "ClientTiming").sort(),
    "one row per ClientTiming option",
  );
  for (const [key, option] of Object.entries(CLIENT_OPTIONS)) {
    const [, defaultCell, rangeCell] = rows.get(key)!;
    assert.equal(num(defaultCell), option.default, `${key} default`);
    assert.deepEqual(range(rangeCell), [option.min, option.max], `${key} range`);
  }
});

Deno.test("workers.md lists exactly the environment variables the worker reads", () => {
  const rows = tableRows(read("docs/workers.md"), "variable").map((r) => r[0]);
  assert.deepEqual(rows.sort(), interfaceKeys("src/platform/env.ts", "WorkerEnv").sort());
});

Deno.test("flows.md documents every option with the SQL defaults and the shared bounds", () => {
  const flows = read("docs/flows.md");
  const source = read("src/dsl/flow.ts");
  const stepKeys = /STEP_KEYS[^=]*= new Set\(\[([^\]]*)\]/.exec(source)![1];
  for (const key of [...stepKeys.matchAll(/"([A-Za-z]+)"/g)].map((m) => m[1]).concat("array")) {
    if (key === "slug") continue;
    assert.ok(flows.includes(`\`${key}`), `flows.md mentions the option ${key}`);
  }
  const bounds = JSON.parse(read("tests/fixtures/option_bounds.json")).bounds as Record<
    string,
    { min: number; max: number }
  >;
  const sql = read("supabase/schemas/0030_definitions.sql");
  const rows = new Map(tableRows(flows, "option").map((r) => [r[0], r]));
  assert.deepEqual([...rows.keys()].sort(), Object.keys(bounds).sort());
  for (const [key, { min, max }] of Object.entries(bounds)) {
    const [, defaultCell, rangeCell] = rows.get(key)!;
    const column = `opt_${key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}`;
    // A literal default, or the flow default pgflow.flow_option_default gives.
    const stored = new RegExp(`${column} integer not null default (\\d+)`).exec(sql) ??
      new RegExp(`when '${key}' then (\\d+)`).exec(
        new RegExp(`${column} integer not null default pgflow\\.flow_option_default\\('${key}'\\)`)
            .test(sql)
          ? read("supabase/schemas/0025_option_bounds.sql")
          : "",
      );
    assert.ok(stored, `${column} has a default in SQL`);
    assert.equal(num(defaultCell), Number(stored[1]), `${key} default`);
    assert.deepEqual(range(rangeCell.replace(" to ", "–")), [min, max], `${key} range`);
  }
  const context = tableRows(flows, "key").map((r) => r[0]).sort();
  // The DSL's context and what the platform adds to it (the StepContext of @pgflow/shared).
  const keys = [
    ...interfaceKeys("src/dsl/context.ts", "StepContext"),
    ...interfaceKeys("src/platform/supabase.ts", "StepContext"),
  ];
  assert.deepEqual(context, keys.sort());
});

Deno.test("a page showing `supabase db push --db-url` says the CLI needs sslmode=disable", () => {
  const showing = pages.filter((page) => read(page).includes("db push --db-url"));
  assert.ok(showing.length > 0, "some guide shows db push --db-url");
  for (const page of showing) {
    // The Supabase CLI asks for TLS; a local server without it refuses the connection.
    assert.ok(read(page).includes("?sslmode=disable"), `${page} shows --db-url without sslmode`);
  }
});

Deno.test("a page pushing migrations with the Supabase CLI gives the form each version needs", () => {
  // Supabase CLI 3 targets the local stack unless given --remote, which replaced --db-url.
  const pushing = pages.filter((page) =>
    codeBlocks(read(page)).some((b) => b.lang === "sh" && /^supabase db push\b/m.test(b.code))
  );
  assert.ok(pushing.length > 0, "some guide pushes migrations");
  for (const page of pushing) {
    assert.match(read(page), /supabase db push --remote/, `${page} shows no CLI 3 form`);
    assert.match(read(page), /CLI 2/, `${page} does not say which form CLI 2 takes`);
  }
  for (const page of pages.filter((p) => read(p).includes("db push --db-url"))) {
    assert.match(read(page), /db push --remote="/, `${page} shows --db-url without --remote`);
  }
});

Deno.test("every CLI command and flag the guides use exists", async () => {
  const used = new Map<string, Set<string>>();
  for (const page of pages) {
    const text = read(page);
    for (
      const m of text.matchAll(
        /(?:jsr:@pgflow\/shared\/cli|deno task pgflow|`pgflow) ([a-z]+)(?: (start|stop|status|url)\b)?([^`\n]*)/g,
      )
    ) {
      // `pgflow worker` and `pgflow client` are application_names of LISTEN connections.
      if (m[0] === "`pgflow worker" || m[0] === "`pgflow client") continue;
      const command = m[2] === undefined || m[1] !== "db" ? m[1] : "db";
      const flags = used.get(command) ?? new Set<string>();
      for (const flag of m[3].matchAll(/(?<![\w-])--[a-z][a-z-]*/g)) {
        if (flag[0] !== "--help") flags.add(flag[0]);
      }
      used.set(command, flags);
    }
  }
  assert.ok(used.has("install") && used.has("db"), `commands found: ${[...used.keys()]}`);
  for (const [command, flags] of used) {
    const help = await deno(["run", "-A", "src/cli/main.ts", command, "--help"], {
      cwd: REPO_ROOT,
    });
    assertSucceeded(`pgflow ${command} --help`, help);
    for (const flag of flags) {
      assert.ok(help.stdout.includes(flag), `pgflow ${command} has no ${flag}:\n${help.stdout}`);
    }
  }
});
