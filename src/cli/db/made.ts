/**
 * What one command made on disk, so that a failure removes exactly that: never a file or folder
 * that existed before, and never a folder that something else has since put files in.
 *
 * @module
 */

/**
 * A record of the files and folders one command made, newest last.
 *
 * @example
 * ```ts
 * import { Made } from "./made.ts";
 *
 * const made = new Made();
 * try {
 *   await made.folders("/tmp/app/db");
 *   await made.file("/tmp/app/db/.gitignore", "*\n");
 * } catch (error) {
 *   await made.undo(); // removes the file, then the folders it made while they are empty
 *   throw error;
 * }
 * ```
 */
export class Made {
  readonly #entries: { path: string; folder: boolean; whole: boolean }[] = [];

  /** Makes `dir` and its missing parents one level at a time, recording the levels this made. */
  async folders(dir: string): Promise<void> {
    const levels: string[] = [];
    for (let d = dir; d !== "/" && d !== ""; d = d.slice(0, d.lastIndexOf("/")) || "/") {
      levels.unshift(d);
    }
    for (const level of levels) {
      try {
        await Deno.mkdir(level);
        this.#entries.push({ path: level, folder: true, whole: false });
      } catch (error) {
        // Made by someone else (or there before): not ours to remove.
        if (!(error instanceof Deno.errors.AlreadyExists)) throw error;
      }
    }
  }

  /** Makes the folder `dir`, which must not exist yet (else `Deno.errors.AlreadyExists`). */
  async folder(dir: string, mode?: number): Promise<void> {
    await Deno.mkdir(dir, { mode });
    this.#entries.push({ path: dir, folder: true, whole: false });
  }

  /** Creates the file `path`, which must not exist yet (else `Deno.errors.AlreadyExists`). */
  async file(path: string, text: string): Promise<void> {
    await Deno.writeTextFile(path, text, { createNew: true });
    this.#entries.push({ path, folder: false, whole: false });
  }

  /** Renames the recorded `from` to `to` (which must not exist); the record follows it. */
  async move(from: string, to: string): Promise<void> {
    await Deno.rename(from, to);
    for (const entry of this.#entries) if (entry.path === from) entry.path = to;
  }

  /** Marks the recorded folder `path` as filled by this command alone: undo removes it whole. */
  own(path: string): void {
    for (const entry of this.#entries) if (entry.path === path) entry.whole = true;
  }

  /**
   * Removes what was made, newest first: files, folders marked with {@link own}, and other folders
   * only while empty. Returns the folders it left because they hold something it did not make.
   */
  async undo(): Promise<string[]> {
    const left: string[] = [];
    for (const { path, folder, whole } of this.#entries.reverse()) {
      try {
        await Deno.remove(path, { recursive: whole });
      } catch (error) {
        if (folder && !(error instanceof Deno.errors.NotFound)) left.push(path);
      }
    }
    this.#entries.length = 0;
    return left;
  }
}
