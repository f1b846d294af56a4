/**
 * The dashboard page's script: `src/cli/dashboard/browser_js.ts`, what the server serves, is what
 * `deno task dashboard:js` makes of the TypeScript in `browser/` today; the build refuses a module
 * it could not serve as written (types that cannot be erased, a runtime import from outside the
 * folder, Deno's API) naming the file; the served modules load as ES modules, and the graph's
 * boxes count attempts per task.
 */
import assert from "node:assert/strict";
import {
  BROWSER_DIR,
  BROWSER_JS,
  browserJsModule,
  BrowserModuleError,
  moduleJs,
} from "../../local/dashboard_js.ts";
import { BROWSER_MODULES } from "../../src/cli/dashboard/browser_js.ts";

Deno.test("browser_js.ts is what deno task dashboard:js makes of browser/*.ts now", async () => {
  const fresh = await browserJsModule();
  const committed = await Deno.readTextFile(BROWSER_JS);
  assert.ok(
    fresh === committed,
    "src/cli/dashboard/browser_js.ts is stale: run `deno task dashboard:js` and commit it",
  );
  const sources = [...Deno.readDirSync(BROWSER_DIR)].map((e) => e.name).filter((n) =>
    n.endsWith(".ts")
  ).sort();
  assert.deepEqual(Object.keys(BROWSER_MODULES), sources.map((n) => n.replace(/\.ts$/, ".js")));
});

Deno.test("each served module keeps the lines of its source, imports only its siblings", () => {
  for (const [file, js] of Object.entries(BROWSER_MODULES)) {
    const source = Deno.readTextFileSync(new URL(file.replace(/\.js$/, ".ts"), BROWSER_DIR));
    assert.equal(js.split("\n").length, source.split("\n").length, file);
    for (const m of js.matchAll(/^import\b[^;"]*"([^"]*)"/gm)) {
      assert.match(m[1], /^\.\/[a-z_]+\.js$/, `${file} imports ${m[1]}`);
      assert.ok(Object.hasOwn(BROWSER_MODULES, m[1].slice(2)), `${file} imports ${m[1]}`);
    }
    assert.doesNotMatch(js, /\binterface\b|import type|: string\b/, file);
  }
});

Deno.test("the build strips types in place and refuses what a browser cannot run", () => {
  const siblings = ["a.ts", "b.ts"];
  assert.equal(
    moduleJs(
      "a.ts",
      'import type { T } from "../x.ts";\nimport { b } from "./b.ts";\n' +
        "export const a: number = b as number;\n",
      siblings,
    ),
    // Blanked in place: each column is where it is in the source.
    '\nimport { b } from "./b.js";\nexport const a         = b          ;\n',
  );
  // A template literal's own trailing blanks are its text: kept.
  assert.equal(moduleJs("a.ts", "const t = `x  \ny`;\n", siblings), "const t = `x  \ny`;\n");
  // Text that looks like an import inside code is left alone.
  assert.equal(
    moduleJs("a.ts", 'const o = { "data-from": e.from };\n', siblings),
    'const o = { "data-from": e.from };\n',
  );
  const refused = (source: string, file = "a.ts") => {
    try {
      moduleJs(file, source, siblings);
    } catch (error) {
      assert.ok(error instanceof BrowserModuleError, String(error));
      return error.message;
    }
    assert.fail(`accepted: ${source}`);
  };
  assert.match(refused("enum E { A }\n"), /^browser\/a\.ts: .*no enum/);
  assert.match(
    refused('import { sql } from "../server.ts";\n'),
    /^browser\/a\.ts imports "\.\.\/server\.ts" at run time: .*`import type`/,
  );
  assert.match(refused('import { c } from "./c.ts";\n'), /imports "\.\/c\.ts" at run time/);
  assert.match(refused('export * from "npm:x";\n'), /imports "npm:x" at run time/);
  assert.match(refused('const m = await import("./b.ts");\n'), /a dynamic import\(\)/);
  assert.match(refused("Deno.exit(1);\n"), /uses Deno's API/);
});

Deno.test("the served modules load as ES modules; a step's box counts attempts per task", async () => {
  // The modules as a browser gets them (the page's own code is checked against the DOM, not
  // Deno: it is run here only for what needs no page).
  const dir = await Deno.makeTempDir({ prefix: "pgflow-browser-js-" });
  let attemptsText: (s: object) => string;
  try {
    for (const [file, js] of Object.entries(BROWSER_MODULES)) {
      if (file !== "main.js") await Deno.writeTextFile(`${dir}/${file}`, js);
    }
    ({ attemptsText } = await import(`file://${dir}/dag.js`));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  const step = (stepType: string, tasks: number, minAttempts: number, maxAttempts: number) =>
    attemptsText({ stepType, tasks, minAttempts, maxAttempts });
  assert.equal(step("single", 1, 1, 1), "");
  assert.equal(step("single", 1, 3, 3), "3 attempts");
  assert.equal(step("single", 0, 0, 0), "");
  assert.equal(step("map", 2, 1, 1), "2 tasks, 1 attempt each");
  assert.equal(step("map", 3, 2, 2), "3 tasks, 2 attempts each");
  assert.equal(step("map", 4, 1, 3), "4 tasks, up to 3 attempts");
  assert.equal(step("map", 3, 0, 1), "3 tasks, up to 1 attempt");
  assert.equal(step("map", 1, 2, 2), "1 task, 2 attempts");
  assert.equal(step("map", 5, 0, 0), "5 tasks");
});
