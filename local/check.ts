/**
 * `deno task check`: type-checks the module, its tools and every folder of the repository, and the
 * dashboard's browser modules in a program of their own, against the browser's libraries (DOM)
 * their `deno.json` names, so the rest of `src/` never sees the DOM.
 *
 * The browser folder is not a workspace member on purpose: a workspace root makes Deno warn, on
 * every start, that the edge functions' own `deno.json` files (`supabase/functions/*`) are not
 * members, and those configs link the root as a user's project does, which a member may not.
 *
 * @module
 */

const BROWSER = "src/cli/dashboard/browser";

/** Every `.ts` file under `dir`, the browser folder left out. */
async function serverFiles(dir: string): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory && path !== BROWSER) files.push(...await serverFiles(path));
    else if (entry.isFile && path.endsWith(".ts")) files.push(path);
  }
  return files.sort();
}

const programs: string[][] = [
  ["check", "--doc", "mod.ts", "tools.ts", "dsl.ts", ...await serverFiles("src")],
  ["check", "--config", `${BROWSER}/deno.json`, `${BROWSER}/`],
  ["check", "local/", "tests/", "demo/", "bench/", "supabase/functions/"],
];
for (const args of programs) {
  const { code } = await new Deno.Command(Deno.execPath(), { args }).spawn().status;
  if (code !== 0) Deno.exit(code);
}
