/**
 * Serialises the `pgflow db` commands that change one database folder (`start`, `stop`, and so
 * creating or removing it). The lock is a file next to the folder, `<dir>.lock`, where initdb and
 * the folder's own check never see it, held with `flock`: the OS drops it when its process ends, so
 * a crashed command never blocks the next one. The file exists only while held (no stray file in
 * the project): the holder removes it before unlocking, and a waiter that then gets the lock on a
 * file no longer at that path opens the path again.
 *
 * @module
 */
import { CliError, progress } from "../output.ts";
import { Made } from "./made.ts";

/** How long a command waits for the lock before it says what it waits for. */
const NOTICE_AFTER_MS = 1000;

/**
 * Runs `fn` holding the lock of the folder `dir` (absolute); `holder` names the command for a
 * waiting one, e.g. `db start`. Waits as long as another command holds it, saying so after a second.
 *
 * @example
 * ```ts
 * import { withFolderLock } from "./lock.ts";
 *
 * await withFolderLock("/tmp/app/.pgflow/db", "db start", async () => {
 *   // create or start the cluster: no other pgflow db command changes the folder meanwhile
 * });
 * ```
 */
export async function withFolderLock<T>(
  dir: string,
  holder: string,
  fn: () => Promise<T>,
): Promise<T> {
  const path = `${dir}.lock`;
  const parent = path.slice(0, path.lastIndexOf("/")) || "/";
  // Folders made only to hold the lock file go again with it, unless something else is in them.
  const made = new Made();
  await made.folders(parent).catch((error) => {
    throw new CliError(
      `cannot make ${parent} for the lock file ${path} (${(error as Error).message}): pass ` +
        "--data-dir with a folder you can write in",
    );
  });
  let file: Deno.FsFile;
  for (;;) {
    const opened = await openLockFile(path, parent, made);
    const notice = setTimeout(() => {
      const other = (() => {
        try {
          return Deno.readTextFileSync(path).trim() || "a pgflow db command";
        } catch {
          return "a pgflow db command";
        }
      })();
      progress(
        `waiting for another pgflow db command on ${dir} (${other}) to finish; it holds ${path}`,
      );
    }, NOTICE_AFTER_MS);
    try {
      await opened.file.lock(true);
    } finally {
      clearTimeout(notice);
    }
    if (await stillAt(opened.file, path)) {
      file = opened.file;
      if (opened.writable) {
        await file.truncate(0);
        await file.write(new TextEncoder().encode(`pid ${Deno.pid}: ${holder}\n`));
      }
      break;
    }
    opened.file.close(); // the holder removed it: lock the file now at the path
  }
  try {
    return await fn();
  } finally {
    await Deno.remove(path).catch(() => {});
    file.close();
    await made.undo();
  }
}

async function openLockFile(
  path: string,
  parent: string,
  made: Made,
): Promise<{ file: Deno.FsFile; writable: boolean }> {
  for (;;) {
    try {
      return {
        file: await Deno.open(path, { read: true, write: true, create: true }),
        writable: true,
      };
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) {
        await made.folders(parent); // a holder just removed the folder it had made for its lock
        continue;
      }
      if (!(error instanceof Deno.errors.PermissionDenied)) throw error;
      // Another user's lock file (e.g. root's, read by the postgres user): flock needs no write.
      try {
        return { file: await Deno.open(path, { read: true }), writable: false };
      } catch {
        throw new CliError(
          `cannot create the lock file ${path} (${(error as Error).message}): pgflow db writes ` +
            `it next to the database folder. Run it as a user who can write in ${parent}, or ` +
            "pass --data-dir with a folder of yours",
        );
      }
    }
  }
}

/** Whether the locked file is still the one at `path` (its holder removes it before unlocking). */
async function stillAt(file: Deno.FsFile, path: string): Promise<boolean> {
  const held = await file.stat();
  const now = await Deno.stat(path).catch(() => undefined);
  return now !== undefined && now.ino === held.ino && now.dev === held.dev;
}
