/**
 * The layers of `src/` point one way: each folder imports only from the folders before it in
 * this order (ARCHITECTURE.md, Layers). The order is one of dependency, not of a task's path:
 * shared helpers first; the DSL and routing next, which import nothing of a runtime or platform,
 * so a flow definition needs neither; the platform (pools, environment, logs, and the DSL's
 * preset with the platform's handler context); compiling a flow; the task path, one folder from a
 * task's read to its report; operator reads; the worker, whose lifecycle starts the task path;
 * the client; runs in memory for tests, which reuse the task path's input and context; and the
 * CLI, which nothing else imports.
 */
import assert from "node:assert/strict";
import { importsOf, tsFiles } from "./imports.ts";

const LAYERS = [
  "util",
  "dsl",
  "routing",
  "platform",
  "telemetry",
  "compile",
  "task",
  "operations",
  "worker",
  "client",
  "testing",
  "cli",
] as const;

const SRC = new URL("../../src/", import.meta.url);

function layerOf(url: URL): string {
  const rel = url.pathname.slice(SRC.pathname.length);
  return rel.split("/")[0];
}

Deno.test("every folder of src/ is a known layer", () => {
  for (const entry of Deno.readDirSync(SRC)) {
    if (entry.isDirectory) {
      assert.ok(
        (LAYERS as readonly string[]).includes(entry.name),
        `src/${entry.name}/ is not in the layer order of tests/support/layers_test.ts`,
      );
    }
  }
});

Deno.test("src/ imports point down the layers only", () => {
  const wrong: string[] = [];
  let edges = 0;
  for (const file of tsFiles(SRC)) {
    const from = layerOf(file);
    for (const specifier of importsOf(Deno.readTextFileSync(file))) {
      const target = new URL(specifier, file);
      if (!target.pathname.startsWith(SRC.pathname)) {
        wrong.push(`${file.pathname}: imports ${specifier}, outside src/`);
        continue;
      }
      const to = layerOf(target);
      edges++;
      const rank = (l: string) => (LAYERS as readonly string[]).indexOf(l);
      if (rank(to) > rank(from)) wrong.push(`src/${from}/ → src/${to}/ (${specifier})`);
    }
  }
  assert.ok(edges > 50, "the imports were read");
  assert.deepEqual(wrong, []);
});

Deno.test("the import reader sees what it must", () => {
  assert.deepEqual(
    importsOf(`import { a } from "../x/a.ts";\nimport type {\n  B,\n} from "./b.ts";
export { c } from "../c.ts";\n/** import { z } from "../z.ts"; */\nimport postgres from "postgres";`),
    ["../x/a.ts", "./b.ts", "../c.ts"],
  );
});
