/**
 * `createClient`'s URL (`connectionString`, or `url` beside a pool): each malformed one throws a
 * `DatabaseUrlError` at once that names the option and the part, never the password.
 */
import assert from "node:assert/strict";
import { createClient, createPool, DatabaseUrlError } from "../../mod.ts";
import { BAD_URLS, SECRET } from "../platform/bad_urls.ts";

function refuses(make: (url: string) => unknown, option: string): void {
  for (const bad of BAD_URLS) {
    // A synchronous throw: nothing was awaited, so no connection was tried.
    assert.throws(() => make(bad.url), (error: unknown) => {
      const what = `${bad.kind}: ${error}`;
      assert.ok(error instanceof DatabaseUrlError, what);
      assert.equal(error.part, bad.part, what);
      assert.ok(error.message.startsWith(`createClient: ${option} `), what);
      assert.match(error.message, bad.says, what);
      assert.doesNotMatch(`${error.message}\n${error.stack}`, SECRET, what);
      return true;
    });
  }
}

Deno.test("createClient({ connectionString }) refuses each malformed URL, password masked", () => {
  refuses((url) => createClient({ connectionString: url }), "connectionString");
});

Deno.test("createClient({ sql, url }) refuses each malformed url, password masked", async () => {
  const sql = createPool("postgres://postgres@127.0.0.1:1/postgres", { max: 1 });
  try {
    refuses((url) => createClient({ sql, url }), "url");
  } finally {
    await sql.end({ timeout: 1 });
  }
});
