/**
 * Reading a TypeScript file's relative imports without loading it: what the layer and packaging
 * tests check.
 *
 * @module
 */

/**
 * The relative module specifiers a file imports or re-exports (JSDoc examples excluded).
 *
 * @example
 * ```ts
 * importsOf(`import { a } from "../x/a.ts";`); // ["../x/a.ts"]
 * ```
 */
export function importsOf(source: string): string[] {
  const code = source.replace(/\/\*[\s\S]*?\*\//g, "");
  return [...code.matchAll(/(?:^|\n)\s*(?:import|export)[^;]*?from\s+"(\.[^"]+)"/g)].map((m) =>
    m[1]
  );
}

/** The `.ts` files under `dir`, recursively. */
export function* tsFiles(dir: URL): Generator<URL> {
  for (const entry of Deno.readDirSync(dir)) {
    const url = new URL(entry.name + (entry.isDirectory ? "/" : ""), dir);
    if (entry.isDirectory) yield* tsFiles(url);
    else if (entry.name.endsWith(".ts")) yield url;
  }
}
