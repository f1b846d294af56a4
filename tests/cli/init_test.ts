/**
 * `pgflow init`: a folder's deno.json gains the `@pgflow/shared` import and, run from a checkout,
 * a link to it; what was there stays; a second run changes nothing; a deno.json it cannot read as
 * JSON is left alone with the lines to add. With that deno.json, the module and its CLI resolve to
 * the checkout from the folder (README's install section runs the whole path).
 */
import assert from "node:assert/strict";
import { relative } from "node:path";
import { runCli, shown } from "./helpers.ts";

const REPO = new URL("../../", import.meta.url).pathname.replace(/\/$/, "");

Deno.test("init writes a deno.json that imports the module and links this checkout, once", async () => {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-init-" });
  try {
    const first = await runCli(["init"], { cwd: dir });
    assert.equal(first.code, 0, shown(first));
    const config = JSON.parse(await Deno.readTextFile(`${dir}/deno.json`));
    assert.deepEqual(config, {
      imports: { "@pgflow/shared": "jsr:@pgflow/shared@^0.1.0" },
      links: [relative(dir, REPO)],
    });
    assert.match(first.stdout, /^\.\/deno\.json: added imports "@pgflow\/shared"/);
    assert.ok(!first.stderr.includes(REPO), `a hint names a path: ${shown(first)}`);

    const again = await runCli(["init"], { cwd: dir });
    assert.equal(again.code, 0, shown(again));
    assert.match(again.stdout, /set up already; nothing was changed/);
    assert.deepEqual(JSON.parse(await Deno.readTextFile(`${dir}/deno.json`)), config);

    // The folder now resolves the published name to this checkout, for imports and the CLI.
    await Deno.writeTextFile(
      `${dir}/main.ts`,
      'import { ENGINE_VERSION } from "@pgflow/shared";\nconsole.log(ENGINE_VERSION);\n',
    );
    const run = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "main.ts"],
      cwd: dir,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(new TextDecoder().decode(run.stdout).trim(), "0.1.0");
    const cli = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "jsr:@pgflow/shared/cli", "--version"],
      cwd: dir,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(
      new TextDecoder().decode(cli.stdout).trim(),
      "0.1.0",
      new TextDecoder().decode(cli.stderr),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("init keeps what a deno.json holds and leaves a different import as it is", async () => {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-init-" });
  try {
    await Deno.writeTextFile(
      `${dir}/deno.json`,
      JSON.stringify({
        tasks: { dev: "deno run -A main.ts" },
        imports: { "@pgflow/shared": "jsr:@pgflow/shared@^0.2.0", "zod": "npm:zod@3" },
        links: [REPO],
      }),
    );
    const run = await runCli(["init", "--dir", dir]);
    assert.equal(run.code, 0, shown(run));
    assert.match(run.stderr, /maps "@pgflow\/shared" to "jsr:@pgflow\/shared@\^0\.2\.0" already/);
    assert.match(run.stdout, /set up already; nothing was changed/);
    assert.deepEqual(JSON.parse(await Deno.readTextFile(`${dir}/deno.json`)), {
      tasks: { dev: "deno run -A main.ts" },
      imports: { "@pgflow/shared": "jsr:@pgflow/shared@^0.2.0", "zod": "npm:zod@3" },
      links: [REPO],
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("init refuses a deno.json with comments, naming what to add, and a missing folder", async () => {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-init-" });
  try {
    const text = '{\n  // my settings\n  "tasks": {}\n}\n';
    await Deno.writeTextFile(`${dir}/deno.jsonc`, text);
    const run = await runCli(["init"], { cwd: dir });
    assert.equal(run.code, 1, shown(run));
    assert.match(
      run.stderr,
      /deno\.jsonc is not plain JSON .*add "imports": \{ "@pgflow\/shared": "jsr:@pgflow\/shared@\^0\.1\.0" \} and "links"/,
    );
    assert.equal(await Deno.readTextFile(`${dir}/deno.jsonc`), text);
    const missing = await runCli(["init", "--dir", `${dir}/nope`]);
    assert.equal(missing.code, 1, shown(missing));
    assert.match(missing.stderr, /there is no folder .*nope; create it/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
