/**
 * The engine version this code was built for, and how two versions compare.
 *
 * @module
 */

/**
 * The version of `@pgflow/shared` this code is, and the engine version its migrations set in the
 * database (`pgflow.engine_version()`). A worker refuses to start on a database whose recorded
 * version differs. Kept equal to `deno.json`'s `version` and to the SQL by
 * `tests/sql/engine_version_test.ts`.
 *
 * @example
 * ```ts
 * import { ENGINE_VERSION } from "@pgflow/shared";
 *
 * console.log(`built for pgflow engine ${ENGINE_VERSION}`); // "0.1.0"
 * ```
 */
export const ENGINE_VERSION = "0.1.0";

/**
 * Compares two `major.minor.patch` versions (a `-pre` suffix sorts before the release): negative
 * when `a` is older, zero when equal, positive when newer. A version that is not of that form
 * throws, naming it.
 *
 * @example
 * ```ts
 * import { compareVersions } from "./version.ts";
 *
 * compareVersions("0.1.0", "0.2.0"); // < 0
 * ```
 */
export function compareVersions(a: string, b: string): number {
  const [pa, pb] = [parse(a), parse(b)];
  for (let i = 0; i < 3; i++) {
    if (pa.parts[i] !== pb.parts[i]) return pa.parts[i] - pb.parts[i];
  }
  if (pa.pre === pb.pre) return 0;
  if (pa.pre === "") return 1;
  if (pb.pre === "") return -1;
  return pa.pre < pb.pre ? -1 : 1;
}

function parse(version: string): { parts: number[]; pre: string } {
  const match = /^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$/.exec(version);
  if (!match) throw new Error(`version ${JSON.stringify(version)} is not major.minor.patch`);
  return { parts: [Number(match[1]), Number(match[2]), Number(match[3])], pre: match[4] ?? "" };
}
