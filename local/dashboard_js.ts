/**
 * `deno task dashboard:js`: writes `src/cli/dashboard/browser_js.ts`, the dashboard page's
 * script modules as the server serves them, from their TypeScript in `src/cli/dashboard/browser/`.
 *
 * Each module's types are removed by Deno's own `stripTypeScriptTypes` (`node:module`), which
 * blanks them out in place: every line and column stays where it is in the `.ts` file, so a
 * browser's `main.js:120:7` points into `main.ts`, and there is no source map to ship. It accepts
 * only TypeScript whose types can simply be erased (no enums, namespaces, parameter properties or
 * `<T>x` casts) and refuses the rest naming the place. Nothing is fetched: no bundler, no network.
 *
 * A module may import at run time only the other modules of the folder (`./name.ts`, served as
 * `./name.js`); the server's types come in by `import type`, which disappears. The folder's own
 * `deno.json` gives it the browser's libraries (DOM), and `deno task check` (`local/check.ts`)
 * checks it against the browser's API in a program of its own, so the rest of `src/` never sees
 * the DOM.
 * That program has Deno's namespace too, only because server types it imports reach it (through
 * the DSL's handler context); the build refuses a module that uses it.
 *
 * `tests/cli/dashboard_script_test.ts` fails while the generated file differs from what this
 * writes: change the TypeScript, then run the task and commit both.
 *
 * @module
 */
import { stripTypeScriptTypes } from "node:module";

/** The browser modules' folder. */
export const BROWSER_DIR: URL = new URL("../src/cli/dashboard/browser/", import.meta.url);
/** The generated file. */
export const BROWSER_JS: URL = new URL("../src/cli/dashboard/browser_js.ts", import.meta.url);

// The module specifier of each import and re-export statement left once types are gone (they
// begin a line: the modules are formatted): everything up to the statement's first quote.
const RUNTIME_IMPORT = /^(import\b[^;"]*?|export\s*(?:\*|\{[^;"}]*\})\s*from\s*)"([^"]*)"/gm;

/** A browser module that cannot be served as it is written. */
export class BrowserModuleError extends Error {
  /** @param message what is wrong, naming the file and the fix */
  constructor(message: string) {
    super(message);
    this.name = "BrowserModuleError";
  }
}

/**
 * One module's JavaScript: its types blanked out, its imports of `./name.ts` pointed at
 * `./name.js`, trailing blanks left by removed types trimmed.
 *
 * @example
 * ```ts
 * import { moduleJs } from "./dashboard_js.ts";
 *
 * moduleJs("a.ts", 'import { b } from "./b.ts";\nexport const a: number = b;\n', ["a.ts", "b.ts"]);
 * // 'import { b } from "./b.js";\nexport const a         = b;\n' (every column in place)
 * ```
 */
export function moduleJs(file: string, source: string, siblings: readonly string[]): string {
  let js: string;
  try {
    js = stripTypeScriptTypes(source, { mode: "strip" });
  } catch (error) {
    throw new BrowserModuleError(
      `browser/${file}: ${(error as Error).message.split("\n")[0]} ` +
        "(write TypeScript whose types can be erased: no enum, namespace, parameter property " +
        "or <T>x cast)",
    );
  }
  if (/\bimport\s*\(/.test(js)) {
    throw new BrowserModuleError(
      `browser/${file}: a dynamic import(); import the page's modules statically`,
    );
  }
  js = js.replace(RUNTIME_IMPORT, (_, head: string, specifier: string) => {
    const m = /^\.\/([a-z0-9_]+)\.ts$/.exec(specifier);
    if (m === null || !siblings.includes(`${m[1]}.ts`)) {
      throw new BrowserModuleError(
        `browser/${file} imports ${JSON.stringify(specifier)} at run time: the page may import ` +
          "only its own modules (./name.ts); take the server's types with `import type`",
      );
    }
    // The same length: every column after it stays where it is in the source.
    return `${head}"./${m[1]}.js"`;
  });
  if (/\bDeno\./.test(js)) {
    throw new BrowserModuleError(`browser/${file} uses Deno's API, which a browser does not have`);
  }
  // Erased types leave blanks at line ends; a line that had none in the source (it is formatted,
  // so only a template literal's text could) is trimmed.
  const sourceLines = source.split("\n");
  return js.split("\n").map((line, i) => /\s$/.test(sourceLines[i] ?? "") ? line : line.trimEnd())
    .join("\n");
}

/**
 * The generated file's text, from the modules in `dir` (every `*.ts`, by name).
 *
 * @example
 * ```ts
 * import { browserJsModule } from "./dashboard_js.ts";
 *
 * const text = await browserJsModule();
 * text.includes('"main.js": `'); // true
 * ```
 */
export async function browserJsModule(dir: URL = BROWSER_DIR): Promise<string> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (entry.isFile && entry.name.endsWith(".ts")) files.push(entry.name);
  }
  files.sort();
  if (!files.includes("main.ts")) {
    throw new BrowserModuleError("browser/main.ts is missing: it is the page's entry");
  }
  const entries: string[] = [];
  for (const file of files) {
    const source = await Deno.readTextFile(new URL(file, dir));
    const js = moduleJs(file, source, files);
    // One line per module: the file is read by no one, and a copy of the source's lines in it
    // would read as duplicated code to tools that look for it.
    entries.push(`  "${file.replace(/\.ts$/, ".js")}": ${JSON.stringify(js)},\n`);
  }
  return `// Generated by \`deno task dashboard:js\` (local/dashboard_js.ts) from
// src/cli/dashboard/browser/*.ts: do not edit; change those, then run the task.
/**
 * The dashboard page's script modules, as the server serves them at \`/js/<name>.js\`: the
 * TypeScript of \`browser/\` with its types blanked out in place, so each line and column is where
 * it is in the \`.ts\` file. Each module is one string, on one line.
 *
 * @module
 */

/**
 * The page's modules by file name; \`main.js\` is the entry, the others are what it imports.
 *
 * @example
 * \`\`\`ts
 * import { BROWSER_MODULES } from "./browser_js.ts";
 *
 * new Response(BROWSER_MODULES["main.js"], {
 *   headers: { "content-type": "text/javascript; charset=utf-8" },
 * });
 * \`\`\`
 */
export const BROWSER_MODULES: Readonly<Record<string, string>> = {
${entries.join("")}};
`;
}

if (import.meta.main) {
  try {
    const text = await browserJsModule();
    const before = await Deno.readTextFile(BROWSER_JS).catch(() => "");
    if (before === text) {
      console.log(`${BROWSER_JS.pathname}: up to date`);
    } else {
      await Deno.writeTextFile(BROWSER_JS, text);
      console.log(`${BROWSER_JS.pathname}: written`);
    }
  } catch (error) {
    if (!(error instanceof BrowserModuleError)) throw error;
    console.error(error.message);
    Deno.exit(1);
  }
}
