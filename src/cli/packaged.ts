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
