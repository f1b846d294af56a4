/**
 * The module's own files (migrations, their manifest, the PGMQ-compatible SQL), read by URL next to
 * this module: the same code reads them from a checkout (`file:`) and from the published module
 * (`https://jsr.io/...`). A remote folder cannot be listed, so the migrations are known from their
 * manifest.
 *
 * @module
 */
import { CliError } from "./output.ts";

const ROOT = new URL("../../", import.meta.url);

/**
 * The URL of a file of the module, by its path from the module's root.
 *
 * @example
 * ```ts
 * import { packagedUrl } from "./packaged.ts";
 *
 * packagedUrl("supabase/migrations.sha256").href; // file:///…/supabase/migrations.sha256
 * ```
 */
export function packagedUrl(path: string): URL {
  return new URL(path, ROOT);
}

/**
 * Whether the module runs from a local checkout (its files can be listed), not a published copy.
 *
 * @example
 * ```ts
 * import { isLocalModule } from "./packaged.ts";
 *
 * console.log(isLocalModule()); // true in a checkout, false from jsr:
 * ```
 */
export function isLocalModule(): boolean {
  return ROOT.protocol === "file:";
}

/**
 * How to run this CLI from the current folder, without its arguments: `deno task pgflow` inside
 * a checkout of this repository (its deno.json has the task), `deno run -A <path>/src/cli/main.ts`
 * from a checkout elsewhere (the task does not exist in the user's folder), `undefined` for the
 * published module (the caller names the versioned `jsr:` form).
 *
 * @example
 * ```ts
 * import { localInvocation } from "./packaged.ts";
 *
 * localInvocation(); // "deno task pgflow" when run in this repository
 * ```
 */
export function localInvocation(): string | undefined {
  if (!isLocalModule()) return undefined;
  const root = decodeURIComponent(ROOT.pathname).replace(/\/$/, "");
  let cwd: string | undefined;
  try {
    cwd = Deno.cwd();
  } catch {
    cwd = undefined;
  }
  if (cwd !== undefined && (cwd === root || cwd.startsWith(`${root}/`))) return "deno task pgflow";
  const main = decodeURIComponent(new URL("src/cli/main.ts", ROOT).pathname);
  return `deno run -A ${/^[\w./@+-]+$/.test(main) ? main : JSON.stringify(main)}`;
}

/**
 * Reads a file of the module as text; a missing or unreadable file is a {@link CliError} that names
 * its URL.
 *
 * @example
 * ```ts
 * import { readPackagedText } from "./packaged.ts";
 *
 * const manifest = await readPackagedText("supabase/migrations.sha256");
 * ```
 */
export async function readPackagedText(path: string): Promise<string> {
  const url = packagedUrl(path);
  let response: Response;
  try {
    response = await fetch(url);
  } catch (error) {
    throw new CliError(
      `could not read ${url.href}: ${(error as Error).message}; the @pgflow/shared module is ` +
        `incomplete or unreachable: run it again from jsr:@pgflow/shared/cli`,
    );
  }
  if (!response.ok) {
    await response.body?.cancel();
    throw new CliError(
      `could not read ${url.href}: HTTP ${response.status}; the @pgflow/shared module is ` +
        `incomplete or unreachable: run it again from jsr:@pgflow/shared/cli`,
    );
  }
  return await response.text();
}
