/**
 * `pgflow init [--dir DIR]`: makes a folder's deno.json resolve `@pgflow/shared`, so that
 * `import { Flow } from "@pgflow/shared"` and `deno run -A jsr:@pgflow/shared/cli …` work there.
 * Run from a checkout of this repository it also links that checkout (`"links"`), so the same
 * imports and commands work before the module is published, and keep working, unchanged, once it
 * is.
 *
 * @module
 */
import { relative, resolve } from "node:path";
import { ENGINE_VERSION } from "../util/version.ts";
import { parseArgs } from "./args.ts";
import { absolute } from "./db/cluster.ts";
import { CliError, command, progress, result } from "./output.ts";
import { checkoutRoot, isLocalModule } from "./packaged.ts";

/** The help text of `pgflow init`. */
export const INIT_HELP = `pgflow init [--dir DIR]

Makes DIR's deno.json (default: this folder's; created when missing) map the import
"@pgflow/shared" to jsr:@pgflow/shared@^${ENGINE_VERSION}. Run from a checkout of the
repository (deno run -A <checkout>/src/cli/main.ts init), it also adds the checkout to "links",
so the module and its CLI (deno run -A jsr:@pgflow/shared/cli <command>) come from the checkout:
before the module is published, and after it, until you remove the link.

Entries already there are kept: an "@pgflow/shared" import that points elsewhere is left as it is
(and said so), a link is added once. Running it again changes nothing.

  --dir DIR  the project folder; default .

Exit codes: 0 written or up to date, 1 the deno.json cannot be read or written, 2 usage error.`;

/** The import a project's deno.json needs. */
const IMPORT = "@pgflow/shared";

/**
 * Runs `pgflow init`; returns the exit code.
 *
 * @example
 * ```ts
 * import { init } from "./init.ts";
 *
 * // Deno.exit(await init(["--dir", "my-app"]));
 * ```
 */
export async function init(argv: readonly string[]): Promise<number> {
  const args = parseArgs(argv, { dir: "string" }, "pgflow init");
  if (args.help) {
    result(INIT_HELP);
    return 0;
  }
  const given = args.strings.dir ?? ".";
  const dir = absolute(given);
  const { path, config } = await readConfig(dir);
  const changes: string[] = [];
  const wanted = `jsr:${IMPORT}@^${ENGINE_VERSION}`;
  const imports = objectAt(config, "imports", path);
  if (imports[IMPORT] === undefined) {
    imports[IMPORT] = wanted;
    changes.push(`imports "${IMPORT}": "${wanted}"`);
  } else if (imports[IMPORT] !== wanted) {
    progress(
      `${path} maps "${IMPORT}" to ${JSON.stringify(imports[IMPORT])} already: left as it is ` +
        `(this CLI is ${ENGINE_VERSION})`,
    );
  }
  if (isLocalModule()) {
    const links = arrayAt(config, "links", path);
    const root = checkoutRoot();
    if (!links.some((l) => typeof l === "string" && resolve(dir, l).replace(/\/$/, "") === root)) {
      const link = relative(dir, root) || ".";
      links.push(link);
      changes.push(`links "${link}" (this checkout)`);
    }
  }
  const shown = `${given.replace(/\/$/, "")}/${path.slice(path.lastIndexOf("/") + 1)}`;
  if (changes.length === 0) {
    result(`${shown} is set up already; nothing was changed`);
  } else {
    try {
      await Deno.writeTextFile(path, `${JSON.stringify(config, null, 2)}\n`);
    } catch (error) {
      throw new CliError(`could not write ${path}: ${(error as Error).message}`);
    }
    result(`${shown}: added ${changes.join(", ")}`);
  }
  progress(
    `next: export DATABASE_URL="$(${command("db start")})", then deno run -A <your worker>.ts`,
  );
  return 0;
}

/** The folder's deno.json (or deno.jsonc) as JSON, or a new one. */
async function readConfig(dir: string): Promise<{ path: string; config: Record<string, unknown> }> {
  for (const name of ["deno.json", "deno.jsonc"]) {
    const path = `${dir}/${name}`;
    let text: string;
    try {
      text = await Deno.readTextFile(path);
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) continue;
      throw new CliError(`could not read ${path}: ${(error as Error).message}`);
    }
    let config: unknown;
    try {
      config = JSON.parse(text);
    } catch {
      throw new CliError(
        `${path} is not plain JSON (comments, trailing commas?), so it was not changed; add ` +
          `"imports": { "${IMPORT}": "jsr:${IMPORT}@^${ENGINE_VERSION}" }` +
          (isLocalModule() ? ` and "links": ["${relative(dir, checkoutRoot()) || "."}"]` : "") +
          " yourself",
      );
    }
    if (config === null || typeof config !== "object" || Array.isArray(config)) {
      throw new CliError(`${path} does not hold a JSON object; fix it, or remove it and run again`);
    }
    return { path, config: config as Record<string, unknown> };
  }
  try {
    if (!(await Deno.stat(dir)).isDirectory) throw new CliError(`${dir} is not a folder`);
  } catch (error) {
    if (error instanceof CliError) throw error;
    throw new CliError(`there is no folder ${dir}; create it, or pass --dir with another one`);
  }
  return { path: `${dir}/deno.json`, config: {} };
}

function objectAt(config: Record<string, unknown>, key: string, path: string) {
  const value = config[key] ??= {};
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new CliError(`"${key}" in ${path} is not an object; fix it and run again`);
  }
  return value as Record<string, unknown>;
}

function arrayAt(config: Record<string, unknown>, key: string, path: string): unknown[] {
  const value = config[key] ??= [];
  if (!Array.isArray(value)) {
    throw new CliError(`"${key}" in ${path} is not a list; fix it and run again`);
  }
  return value;
}
