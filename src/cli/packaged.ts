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
 * How to run this CLI from the current folder, without its arguments, when that is not the
 * published module's form: `deno task pgflow` inside a checkout of this repository (its deno.json
 * has the task). Anywhere else `undefined`: the caller names the versioned `jsr:` form, which works
 * once the module is published and, before that, in a folder whose deno.json links a checkout
 * (what `pgflow init` writes). Never a path of this machine: a hint is read, copied and pasted
 * elsewhere.
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
  let cwd: string | undefined;
  try {
    cwd = Deno.cwd();
  } catch {
    return undefined;
  }
  const root = checkoutRoot();
  return cwd === root || cwd.startsWith(`${root}/`) ? "deno task pgflow" : undefined;
}

/**
 * The folder of the checkout this module runs from (no trailing slash); meaningful only when
 * {@link isLocalModule}.
 *
 * @example
 * ```ts
 * import { checkoutRoot } from "./packaged.ts";
 *
 * checkoutRoot(); // "/home/ada/pgflow-shared"
 * ```
 */
export function checkoutRoot(): string {
  return decodeURIComponent(ROOT.pathname).replace(/\/$/, "");
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
