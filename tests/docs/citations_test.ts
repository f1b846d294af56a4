/**
 * Comments cite only the repository's own pages: no code, SQL, migration, test, benchmark or page
 * cites the design document that lives outside the repository (or its PGMQ reference), and every
 * citation of a section ("docs/design.md, Claim table", "ARCHITECTURE.md, Layers") names a
 * heading that page has.
 */
import assert from "node:assert/strict";
import { REPO_ROOT } from "../package/deno_cmd.ts";

/** Where comments and pages live (the whole repository but .git and generated output). */
const ROOTS = [
  "src",
  "supabase",
  "local",
  "tests",
  "bench",
  "demo",
  "docs",
  "mod.ts",
  "tools.ts",
  "ARCHITECTURE.md",
  "README.md",
  "CHANGELOG.md",
  "deno.json",
];
const TEXT = /\.(ts|sql|md|json|toml|txt)$/;

/** Citations of documents outside the repository; written in parts so this file cites none. */
const OUTSIDE = [
  ["DESIGN", " §"],
  ["shared/", "DESIGN"],
  ["shared/", "reference"],
  ["reference", " §"],
].map(([a, b]) => a + b);

function files(path: string): string[] {
  const full = `${REPO_ROOT}${path}`;
  const info = Deno.statSync(full);
  if (info.isFile) return TEXT.test(path) ? [path] : [];
  // Not what git ignores and tools install beside the code (the bench's peers in bench/.peers).
  return [...Deno.readDirSync(full)]
    .filter((e) => !e.name.startsWith(".") && e.name !== "node_modules")
    .flatMap((e) => files(`${path}/${e.name}`));
}

const all = ROOTS.flatMap(files);

/** The headings of a page, without their #s. */
function headings(page: string): Set<string> {
  const text = Deno.readTextFileSync(`${REPO_ROOT}${page}`);
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => m[1].trim()));
}

Deno.test("no comment or page cites a document outside the repository", () => {
  assert.ok(all.length > 200, `read ${all.length} files`);
  const found: string[] = [];
  for (const file of all) {
    const lines = Deno.readTextFileSync(`${REPO_ROOT}${file}`).split("\n");
    lines.forEach((line, i) => {
      for (const citation of OUTSIDE) {
        if (line.includes(citation)) found.push(`${file}:${i + 1}: ${line.trim()}`);
      }
    });
  }
  assert.deepEqual(found, [], "cite docs/design.md or ARCHITECTURE.md instead");
});

Deno.test("every citation of a section of docs/design.md or ARCHITECTURE.md names one of its headings", () => {
  const pages = new Map(["docs/design.md", "ARCHITECTURE.md"].map((p) => [p, headings(p)]));
  // "docs/design.md, Claim table" in a comment, a JSDoc line or a page; a line break may fall
  // after the comma.
  const citation =
    /(docs\/design\.md|ARCHITECTURE\.md),\s*(?:(?:--|\/\/|\*)\s+)?([A-Z][^)\].;:,"\n]*)/g;
  const wrong: string[] = [];
  let seen = 0;
  for (const file of all) {
    for (const m of Deno.readTextFileSync(`${REPO_ROOT}${file}`).matchAll(citation)) {
      seen++;
      const [, page, section] = m;
      if (!pages.get(page)!.has(section.trim())) wrong.push(`${file}: ${page}, ${section.trim()}`);
    }
  }
  assert.ok(seen >= 5, `found ${seen} citations`);
  assert.deepEqual(wrong, [], "each must name a heading of the page it cites");
});

Deno.test("every repository file a comment in the code names exists", () => {
  // Paths from the repository's root, as comments write them. Not the pages: the guides name files
  // of the reader's project (supabase/functions/greet/), and the changelog and benchmark results
  // name files as they were then.
  const path =
    /(?<![\w./-])((?:src|local|tests|bench|demo|docs|supabase)\/[\w./-]*\w\.(?:ts|sql|md|json|toml))\b/g;
  const code = all.filter((f) => /\.(ts|sql)$/.test(f) && f !== "tests/docs/guides_test.ts");
  const missing: string[] = [];
  for (const file of code) {
    for (const m of Deno.readTextFileSync(`${REPO_ROOT}${file}`).matchAll(path)) {
      try {
        Deno.statSync(`${REPO_ROOT}${m[1]}`);
      } catch {
        missing.push(`${file}: ${m[1]}`);
      }
    }
  }
  assert.deepEqual(missing, []);
});
