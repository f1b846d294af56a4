/** The shared database-URL parser and masker: accepted forms, each failure named, no password. */
import assert from "node:assert/strict";
import {
  DatabaseUrlError,
  maskDatabaseUrl,
  maskError,
  maskSecrets,
  parseDatabaseUrl,
} from "../../src/platform/database_url.ts";
import { createPool } from "../../mod.ts";
import { BAD_URLS, SECRET } from "./bad_urls.ts";

Deno.test("accepted URLs give their parts and a masked form", () => {
  const cases: [string, Record<string, unknown>][] = [
    [
      "postgres://app:s3cret@db.example.com:6543/app?sslmode=require",
      {
        host: "db.example.com",
        port: 6543,
        user: "app",
        database: "app",
        sslmode: "require",
        masked: "postgres://app:***@db.example.com:6543/app?sslmode=require",
      },
    ],
    ["postgresql://h", { host: "h", port: 5432, masked: "postgresql://h" }],
    [
      "postgres://u:s3c%40r%2Fet@[::1]:5433/my%20db",
      {
        host: "::1",
        port: 5433,
        user: "u",
        database: "my db",
        masked: "postgres://u:***@[::1]:5433/my%20db",
      },
    ],
    // An unescaped @ in the password is read as the URL standard reads it (the last @ ends it).
    ["postgres://u:s3c@r@h/db", {
      host: "h",
      port: 5432,
      user: "u",
      database: "db",
      masked: "postgres://u:***@h/db",
    }],
    // An environment variable's trailing newline is not part of the URL.
    [" postgres://u:s3cret@h:1/db\n", {
      host: "h",
      port: 1,
      user: "u",
      database: "db",
      masked: "postgres://u:***@h:1/db",
    }],
  ];
  for (const [url, parts] of cases) {
    assert.deepEqual({ ...parseDatabaseUrl(url) }, parts, url);
  }
  for (const mode of ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]) {
    assert.equal(parseDatabaseUrl(`postgres://h/db?sslmode=${mode}`).sslmode, mode);
  }
});

Deno.test("each malformed URL is refused naming its part, the password nowhere", () => {
  for (const bad of BAD_URLS) {
    assert.throws(
      () => parseDatabaseUrl(bad.url, "DATABASE_URL"),
      (error: unknown) => {
        assert.ok(error instanceof DatabaseUrlError, `${bad.kind}: ${error}`);
        assert.equal(error.part, bad.part, `${bad.kind}: ${error.message}`);
        assert.match(error.message, /^DATABASE_URL /, bad.kind);
        assert.match(error.message, bad.says, bad.kind);
        assert.doesNotMatch(`${error.message}\n${error.stack}`, SECRET, bad.kind);
        assert.doesNotMatch(error.message, /\n/, `${bad.kind}: one line`);
        return true;
      },
      bad.kind,
    );
  }
});

Deno.test("createPool refuses each malformed URL with the part named, the password masked", () => {
  for (const bad of BAD_URLS) {
    assert.throws(
      () => createPool(bad.url),
      (error: unknown) => {
        assert.ok(error instanceof DatabaseUrlError, `${bad.kind}: ${error}`);
        assert.equal(error.part, bad.part, bad.kind);
        assert.doesNotMatch(`${error.message}\n${error.stack}`, SECRET, bad.kind);
        return true;
      },
    );
  }
});

Deno.test("masking needs no parsable URL", () => {
  const cases: [string, string][] = [
    ["postgres://u:s3cret@h:99999/db", "postgres://u:***@h:99999/db"],
    ["postgres://u:s3c/r?e#t@db host/db", "postgres://u:***@db host/db"],
    ["postgres://u:s3cr@et@h/db", "postgres://u:***@h/db"],
    ["postgres://postgres:s3cret", "postgres://postgres:***"],
    ["postgres://h:5432/db", "postgres://h:5432/db"],
    ["postgres://u@h/db?password=s3cret&x=1", "postgres://u@h/db?password=***&x=1"],
    ["u:s3cret@h/db", "u:***@h/db"],
  ];
  for (const [url, masked] of cases) assert.equal(maskDatabaseUrl(url), masked, url);
});

Deno.test("errors that echo a URL are masked in message, stack and cause", () => {
  const url = "postgres://u:s3c%2Fret@h:99999/db";
  let thrown: unknown;
  try {
    new URL(url);
  } catch (error) {
    thrown = error;
  }
  assert.match(String(thrown), /s3c/, "Deno's own error echoes the password");
  const wrapped = new Error(`could not start: ${(thrown as Error).message}`, { cause: thrown });
  const masked = maskError(wrapped, url);
  assert.equal(masked, wrapped, "masked in place, class kept");
  assert.match(masked.message, /postgres:\/\/u:\*\*\*@h:99999\/db/);
  const cause = masked.cause as Error;
  for (const text of [masked.message, masked.stack, cause.message, cause.stack]) {
    assert.doesNotMatch(String(text), /s3c/);
  }
  // The decoded password, as postgres.js would print it, and a URL not given are masked too.
  assert.equal(maskSecrets("auth as s3c/ret failed", url), "auth as *** failed");
  assert.equal(
    maskSecrets("connect postgres://x:p4ss@y/z failed"),
    "connect postgres://x:***@y/z failed",
  );
  assert.equal(maskError("postgres://x:p4ss@y").message, "postgres://x:***@y");
});

Deno.test("maskSecrets masks a URL's whole password, quoted or not, whatever it holds", () => {
  const cases: [string, string][] = [
    // Deno's Invalid URL quotes the URL: up to its last "@" before the closing quote.
    [
      "Invalid URL: 'postgres://deployer:s3cr et@db:99999/app'",
      "Invalid URL: 'postgres://deployer:***@db:99999/app'",
    ],
    [
      'Invalid URL: "postgres://deployer:s3cr@t\'x@db:99999/app" (at flows.ts:1)',
      'Invalid URL: "postgres://deployer:***@db:99999/app" (at flows.ts:1)',
    ],
    // Unquoted: the token's last "@", else (a space in the password) the line's last "@".
    ["connect postgres://x:s3cr@t@y/z failed", "connect postgres://x:***@y/z failed"],
    [
      "connect postgres://x:s3cr et@y/z failed\nnext line",
      "connect postgres://x:***@y/z failed\nnext line",
    ],
    [
      "a postgres://u:s3cr1@b and postgres://v:s3cr2@c",
      "a postgres://u:***@b and postgres://v:***@c",
    ],
    ["postgres://u:s3cret", "postgres://u:***"],
    // What holds no password stays: a usage hint's placeholder, a host and port, a stack's files.
    ["use postgres://user:password@host/db", "use postgres://user:password@host/db"],
    [
      "at http://localhost:8080/x (file:///a/b.ts:3:4)",
      "at http://localhost:8080/x (file:///a/b.ts:3:4)",
    ],
  ];
  for (const [text, masked] of cases) {
    assert.equal(maskSecrets(text), masked, text);
    assert.doesNotMatch(maskSecrets(text), /s3cr/);
  }
});
