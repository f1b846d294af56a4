/**
 * Database URLs that fail each way the parser knows, each with a password holding `s3cr`, shared
 * by the tests of every entry point (worker, EdgeWorker, client, CLI): none may print `s3cr`.
 *
 * @module
 */
import type { DatabaseUrlPart } from "../../src/platform/database_url.ts";

/** One malformed URL: what is wrong, the part an error must name, and the URL. */
export interface BadUrl {
  readonly kind: string;
  readonly part: DatabaseUrlPart;
  readonly url: string;
  /** What the error message must say. */
  readonly says: RegExp;
}

/** Every password below holds this; no output may. */
export const SECRET = /s3cr/;

/** A URL failing in each way. */
export const BAD_URLS: readonly BadUrl[] = [
  {
    kind: "port out of range",
    part: "port",
    url: "postgres://app:s3cret-pw@127.0.0.1:99999/postgres",
    says: /port 99999, out of range/,
  },
  {
    kind: "port 0",
    part: "port",
    url: "postgres://app:s3cret-pw@127.0.0.1:0/postgres",
    says: /port 0, out of range/,
  },
  {
    kind: "port not a number",
    part: "port",
    url: "postgres://app:s3cret-pw@127.0.0.1:54x/postgres",
    says: /port that is not a number/,
  },
  {
    kind: "space in the host",
    part: "host",
    url: "postgres://app:s3cret-pw@db host:5432/postgres",
    says: /in its host "db host"/,
  },
  {
    kind: "no host",
    part: "host",
    url: "postgres://app:s3cret-pw@:5432/postgres",
    says: /names no host/,
  },
  {
    kind: "several hosts",
    part: "host",
    url: "postgres://app:s3cret-pw@127.0.0.1,127.0.0.2:5432/postgres",
    says: /names several hosts .*multi-host URLs are not supported/,
  },
  {
    kind: "%zz in the password",
    part: "password",
    url: "postgres://app:s3cret%zz@127.0.0.1:5432/postgres",
    says: /invalid percent-escape in its password/,
  },
  {
    kind: "unescaped / in the password",
    part: "password",
    url: "postgres://app:s3cr/et@127.0.0.1:5432/postgres",
    says: /unescaped "\/", "\?", "#" or "@"/,
  },
  {
    kind: "%zz in the user",
    part: "user",
    url: "postgres://a%zzpp:s3cret-pw@127.0.0.1:5432/postgres",
    says: /invalid percent-escape in its user name/,
  },
  {
    kind: "%zz in the database",
    part: "database",
    url: "postgres://app:s3cret-pw@127.0.0.1:5432/post%zzgres",
    says: /invalid percent-escape in its database name/,
  },
  {
    kind: "unknown sslmode",
    part: "sslmode",
    url: "postgres://app:s3cret-pw@127.0.0.1:5432/postgres?sslmode=bogus",
    says: /sslmode "bogus" .*; use disable, allow, prefer, require, verify-ca or verify-full/,
  },
  {
    kind: "another scheme",
    part: "scheme",
    url: "mysql://app:s3cret-pw@127.0.0.1:3306/app",
    says: /is a mysql: URL/,
  },
  {
    kind: "not a URL",
    part: "form",
    url: "app:s3cret-pw@127.0.0.1:5432/postgres",
    says: /is not a URL/,
  },
  {
    kind: "host missing, password taken for a port",
    part: "port",
    url: "postgres://app:s3cret-pw",
    says: /port that is not a number/,
  },
];
