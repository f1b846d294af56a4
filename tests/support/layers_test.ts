/**
 * The layers of `src/` point one way: each folder imports only from the folders below it. The
 * order is the path of a task (ARCHITECTURE.md, Layers): shared helpers, the platform, completion (which the
 * claim's reads carry), the claim, the DSL the handlers are typed with, routing, compiling,
 * dispatch, operator reads, then the worker that ties them together, the client and the CLI.
 */
import assert from "node:assert/strict";

const LAYERS = [
  "util",
  "platform",
  "completion",
  "claim",
  "dsl",
  "routing",
  "compile",
  "dispatch",
  "operations",
  "worker",
  "client",
  "cli",
] as const;

const SRC = new URL("../../src/", import.meta.url);

function* tsFiles(dir: URL): Generator<URL> {
  for (const entry of Deno.readDirSync(dir)) {
    const url = new URL(entry.name + (entry.isDirectory ? "/" : ""), dir);
    if (entry.isDirectory) yield* tsFiles(url);
    else if (entry.name.endsWith(".ts")) yield url;
  }
}

/** The relative module specifiers a file imports or re-exports (JSDoc examples excluded). */
export function importsOf(source: string): string[] {
  const code = source.replace(/\/\*[\s\S]*?\*\//g, "");
  return [...code.matchAll(/(?:^|\n)\s*(?:import|export)[^;]*?from\s+"(\.[^"]+)"/g)].map((m) =>
    m[1]
  );
}

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
