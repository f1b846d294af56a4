/**
 * The type-fetch guard recognises exactly postgres.js's array-type fetch rejection: errors of other
 * queries (real ones, from a real server) are not it, and in a process with the guard installed an
 * unrelated unhandled rejection still ends the process. The killed-backends end-to-end test
 * (tests/e2e/killed_backends_test.ts) shows the guard keeping a worker alive.
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import { isTypeFetchRejection } from "../../src/platform/type_fetch_guard.ts";

const db = testDatabase(import.meta.url);

/** The query postgres.js 3.4.7 runs, as it writes it (src/connection.js, fetchArrayTypes). */
const TYPE_FETCH = `
      select b.oid, b.typarray
      from pg_catalog.pg_type a
      left join pg_catalog.pg_type b on b.oid = a.typelem
      where a.typcategory = 'A'
      group by b.oid, b.typarray
      order by b.oid
    `;

function shaped(query: string, parameters: unknown[]): Error {
  // As postgres.js's queryError attaches them: own, non-enumerable.
  return Object.defineProperties(new Error("terminating connection due to administrator command"), {
    query: { value: query },
    parameters: { value: parameters },
  });
}

db.test("only the type fetch's own rejection is recognised", async ({ sql }) => {
  assert.equal(isTypeFetchRejection(shaped(TYPE_FETCH, [])), true);
  assert.equal(isTypeFetchRejection(shaped(TYPE_FETCH.replace("'A'", "'S'"), [])), false);
  assert.equal(isTypeFetchRejection(shaped(TYPE_FETCH, [1])), false);
  assert.equal(isTypeFetchRejection(new Error("boom")), false);
  assert.equal(isTypeFetchRejection({ query: TYPE_FETCH, parameters: [] }), false);
  assert.equal(isTypeFetchRejection(undefined), false);
  // A real query error from postgres.js carries its own text, not the type fetch's.
  const error = await sql`select 1 / ${0}::int`.then(() => undefined, (e: unknown) => e);
  assert.ok(error instanceof Error && "query" in error);
  assert.equal(isTypeFetchRejection(error), false);
});

async function runScript(body: string): Promise<Deno.CommandOutput> {
  const file = await Deno.makeTempFile({ suffix: ".ts" });
  const guard = new URL("../../src/platform/type_fetch_guard.ts", import.meta.url).href;
  await Deno.writeTextFile(file, `import { installTypeFetchGuard } from "${guard}";\n${body}`);
  try {
    return await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", file],
      stdout: "piped",
      stderr: "piped",
    }).output();
  } finally {
    await Deno.remove(file);
  }
}

Deno.test("with the guard installed, any other unhandled rejection still ends the process", async () => {
  const other = await runScript(`
    installTypeFetchGuard();
    Promise.reject(new Error("not the type fetch"));
    await new Promise((r) => setTimeout(r, 200));
    console.log("still alive");`);
  assert.equal(other.code, 1);
  assert.doesNotMatch(new TextDecoder().decode(other.stdout), /still alive/);

  const fetch = await runScript(`
    console.log(installTypeFetchGuard(), installTypeFetchGuard());
    Promise.reject(Object.defineProperties(new Error("terminating connection"), {
      query: { value: ${JSON.stringify(TYPE_FETCH)} },
      parameters: { value: [] },
    }));
    await new Promise((r) => setTimeout(r, 200));
    console.log("still alive");`);
  assert.equal(fetch.code, 0, new TextDecoder().decode(fetch.stderr));
  assert.equal(new TextDecoder().decode(fetch.stdout), "true false\nstill alive\n");
});
