/**
 * docs/design.md stays true where a test can tell: every invariant says where it is enforced and
 * which tests prove it, each test it names is a test of the file it names, and each schema file and
 * source file it names exists.
 */
import assert from "node:assert/strict";
import { REPO_ROOT } from "../package/deno_cmd.ts";

const design = Deno.readTextFileSync(`${REPO_ROOT}docs/design.md`);

/** The "### …" subsections of "## Invariants", by heading. */
function invariants(): Map<string, string> {
  const start = design.indexOf("\n## Invariants\n");
  assert.ok(start >= 0, "docs/design.md has an Invariants section");
  const end = design.indexOf("\n## ", start + 1);
  const body = design.slice(start, end < 0 ? undefined : end);
  const parts = body.split(/\n### /).slice(1);
  return new Map(parts.map((p) => [p.slice(0, p.indexOf("\n")).trim(), p]));
}

/** The invariants the design page must state (docs/design.md, Invariants). */
const REQUIRED = [
  "Identity",
  "Timing",
  "Claim",
  "Bodies",
  "Names",
  "Provisioning",
  "Deletion",
  "Production",
  "Order",
  "Runs are never changed backwards",
  "Aliases",
  "Nothing waits for ever",
  "A NOTIFY only for a waiter",
  "The PGMQ rule",
];

Deno.test("docs/design.md states every invariant, each with where it is enforced and its tests", () => {
  const found = invariants();
  for (const name of REQUIRED) {
    const text = found.get(name);
    assert.ok(text !== undefined, `an invariant "${name}"`);
    assert.match(text, /Enforced:/, `${name} says where it is enforced`);
    assert.match(text, /Proved by:[\s\S]*`tests\/[\w/]+\.ts`/, `${name} names its tests`);
  }
});

Deno.test("every test docs/design.md cites is a test of the file it names", () => {
  const problems: string[] = [];
  let titles = 0;
  for (const [name, text] of invariants()) {
    // From "Proved by:" to the end of its bullet (a line that starts another bullet or paragraph).
    for (const m of text.matchAll(/Proved by:([\s\S]*?)(?=\n- |\n\d+\. |\n\n|\n?$)/g)) {
      const proof = m[1].replace(/\s*\n\s*/g, " ");
      // Each file, then the quoted names of its tests up to the next file.
      const parts = proof.split(/`(tests\/[\w/]+\.ts)`/);
      for (let i = 1; i < parts.length; i += 2) {
        const file = parts[i];
        let source: string;
        try {
          source = Deno.readTextFileSync(`${REPO_ROOT}${file}`);
        } catch {
          problems.push(`${name}: ${file} does not exist`);
          continue;
        }
        for (const [, title] of parts[i + 1].matchAll(/"([^"]+)"/g)) {
          titles++;
          if (!source.includes(`"${title}"`) && !source.includes(`\`${title}\``)) {
            problems.push(`${name}: ${file} has no test "${title}"`);
          }
        }
      }
    }
  }
  assert.ok(titles >= 40, `found ${titles} test names`);
  assert.deepEqual(problems, []);
});

Deno.test("every file docs/design.md names exists", () => {
  const missing: string[] = [];
  // Paths from the root, and schema files by name (`0400_start_tasks.sql`).
  for (const [, path] of design.matchAll(/`((?:src|tests|local|supabase)\/[\w./-]+\.\w+)`/g)) {
    try {
      Deno.statSync(`${REPO_ROOT}${path}`);
    } catch {
      missing.push(path);
    }
  }
  for (const [, file] of design.matchAll(/`(\d{4}_\w+\.sql)`/g)) {
    try {
      Deno.statSync(`${REPO_ROOT}supabase/schemas/${file}`);
    } catch {
      missing.push(file);
    }
  }
  assert.deepEqual(missing, []);
});
