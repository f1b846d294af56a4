/**
 * The one reading of a database URL that every entry point uses (the worker, `createPool`,
 * `createClient`, the CLI): it checks the URL up front and says which part is wrong, and it
 * masks the password in anything shown, even in a URL that does not parse.
 *
 * A password is never shown: not in an error, not in a log line. Masking works by string
 * scanning, not by `new URL`, because the URLs that most need it are the ones that do not parse
 * (Deno's own "Invalid URL" error echoes the whole string, password included).
 *
 * @module
 */

/** The part of a database URL that an error is about. */
export type DatabaseUrlPart =
  | "form"
  | "scheme"
  | "user"
  | "password"
  | "host"
  | "port"
  | "database"
  | "sslmode";

/** The `sslmode` values accepted (libpq's). */
export const SSL_MODES: readonly SslMode[] = [
  "disable",
  "allow",
  "prefer",
  "require",
  "verify-ca",
  "verify-full",
];

/** One of libpq's `sslmode` values. */
export type SslMode = "disable" | "allow" | "prefer" | "require" | "verify-ca" | "verify-full";

/** A checked database URL; the password is left out on purpose. */
export interface DatabaseUrl {
  /** The host, percent-decoded, without an IPv6 address's brackets. */
  readonly host: string;
  /** The port; 5432 when the URL gives none. */
  readonly port: number;
  /** The user name, percent-decoded; absent when the URL gives none. */
  readonly user?: string;
  /** The database name, percent-decoded; absent when the URL gives none. */
  readonly database?: string;
  /** The URL's `sslmode` parameter, if any. */
  readonly sslmode?: SslMode;
  /** The URL as it may be shown: the password replaced by `***`. */
  readonly masked: string;
}

/**
 * A database URL that cannot be used, with the part that is wrong. Its message never holds the
 * password: it shows the URL masked ({@link maskDatabaseUrl}).
 *
 * @example
 * ```ts
 * import { DatabaseUrlError, createPool } from "@pgflow/shared";
 *
 * try {
 *   createPool("postgres://app:secret@db.example.com:99999/app");
 * } catch (error) {
 *   if (error instanceof DatabaseUrlError) console.log(error.part); // "port"
 * }
 * ```
 */
export class DatabaseUrlError extends Error {
  /** Which part of the URL is wrong. */
  readonly part: DatabaseUrlPart;

  /**
   * A refusal of one part of a database URL.
   *
   * @param part the part of the URL that is wrong
   * @param message what is wrong and the fix, with the URL masked
   */
  constructor(part: DatabaseUrlPart, message: string) {
    super(message);
    this.name = "DatabaseUrlError";
    this.part = part;
  }
}

const FORM = "postgres://user:password@host:port/database";
const ENCODE =
  "percent-encode special characters: @ as %40, / as %2F, ? as %3F, # as %23, % as %25";

/**
 * Checks a database URL and returns its parts (never the password). Accepted: `postgres://` or
 * `postgresql://`, one host (a name, an IPv4 address or a bracketed IPv6 address) without spaces,
 * a port from 1 to 65535 (default 5432), valid percent-escapes in the user, password and database,
 * and an `sslmode` among {@link SSL_MODES}. A URL naming several hosts (`h1:5432,h2:5432`) is
 * refused: the pool connects through a socket of its own that takes one host.
 *
 * @param text the URL
 * @param label how errors name the URL (`--database-url`, `DATABASE_URL`, `connectionString`)
 * @throws {DatabaseUrlError} naming the part that is wrong, with the URL masked
 * @example
 * ```ts
 * import { parseDatabaseUrl } from "./database_url.ts";
 *
 * parseDatabaseUrl("postgres://app:secret@db.example.com:6543/app?sslmode=require");
 * // { host: "db.example.com", port: 6543, user: "app", database: "app", sslmode: "require",
 * //   masked: "postgres://app:***@db.example.com:6543/app?sslmode=require" }
 * ```
 */
export function parseDatabaseUrl(text: unknown, label = "the database URL"): DatabaseUrl {
  if (typeof text !== "string") {
    throw new DatabaseUrlError(
      "form",
      `${label} must be a string of the form ${FORM}, got ${
        text === null ? "null" : Array.isArray(text) ? "an array" : `a ${typeof text}`
      }`,
    );
  }
  const input = text.trim();
  const masked = maskDatabaseUrl(input);
  const fail = (part: DatabaseUrlPart, problem: string, fix: string): never => {
    throw new DatabaseUrlError(part, `${label} ${problem} (${masked}); ${fix}`);
  };
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(input);
  if (scheme === null) {
    // Not echoed at all: a keyword/value string or a mistyped URL may hold the password anywhere.
    throw new DatabaseUrlError(
      "form",
      `${label} is not a URL (not shown, as it may hold a password); give ${FORM}`,
    );
  }
  const protocol = scheme[1].toLowerCase();
  if (protocol !== "postgres" && protocol !== "postgresql") {
    fail("scheme", `is a ${scheme[1]}: URL`, `give a postgres:// or postgresql:// URL: ${FORM}`);
  }
  const rest = input.slice(scheme[0].length);
  const authorityEnd = firstOf(rest, "/?#");
  const at = rest.lastIndexOf("@", authorityEnd - 1);
  const greedyAt = rest.lastIndexOf("@");
  if (greedyAt !== at && rest.slice(0, greedyAt).includes(":")) {
    // A "/", "?" or "#" in the password ends the authority early: the host would be read out of
    // the password. Which one was meant cannot be told, so nothing of it is used.
    fail("password", 'has an unescaped "/", "?", "#" or "@" in its user name or password', ENCODE);
  }
  const userinfo = at < 0 ? "" : rest.slice(0, at);
  const colon = userinfo.indexOf(":");
  const rawUser = colon < 0 ? userinfo : userinfo.slice(0, colon);
  const user = decode(rawUser);
  if (user === undefined) {
    fail("user", "has an invalid percent-escape in its user name", ENCODE);
  }
  if (colon >= 0 && decode(userinfo.slice(colon + 1)) === undefined) {
    fail("password", "has an invalid percent-escape in its password", ENCODE);
  }
  const hostport = rest.slice(at + 1, authorityEnd);
  if (hostport.includes(",")) {
    fail(
      "host",
      "names several hosts",
      "multi-host URLs are not supported: give one host (the primary's, or the pooler's)",
    );
  }
  const { rawHost, rawPort } = splitHostPort(hostport);
  if (rawHost === "" || rawHost === "[]") {
    fail("host", "names no host", `give ${FORM}`);
  }
  // deno-lint-ignore no-control-regex -- control characters are what it looks for
  if (/[\s\x00-\x1f\x7f<>\\^|"'`{}]/.test(rawHost)) {
    fail(
      "host",
      `has a space or another character a host name cannot hold in its host ${
        JSON.stringify(rawHost)
      }`,
      `give ${FORM}`,
    );
  }
  const host = decode(rawHost);
  if (host === undefined) {
    fail("host", `has an invalid percent-escape in its host ${JSON.stringify(rawHost)}`, ENCODE);
  }
  let port = 5432;
  if (rawPort !== "") {
    if (!/^[0-9]+$/.test(rawPort)) {
      fail("port", "has a port that is not a number", "give a port from 1 to 65535, e.g. 5432");
    }
    port = Number(rawPort);
    if (port < 1 || port > 65535) {
      fail("port", `has port ${rawPort}, out of range`, "give a port from 1 to 65535, e.g. 5432");
    }
  }
  const tail = rest.slice(authorityEnd);
  const queryAt = firstOf(tail, "?#");
  const rawDatabase = tail.slice(1, queryAt);
  const database = decode(rawDatabase);
  if (database === undefined) {
    fail("database", "has an invalid percent-escape in its database name", ENCODE);
  }
  const query = tail[queryAt] === "?" ? tail.slice(queryAt + 1).split("#")[0] : "";
  const sslmode = new URLSearchParams(query).get("sslmode") ?? undefined;
  if (sslmode !== undefined && !(SSL_MODES as readonly string[]).includes(sslmode)) {
    fail("sslmode", `has sslmode ${JSON.stringify(sslmode)}`, `use ${listOf(SSL_MODES)}`);
  }
  try {
    new URL(input);
  } catch {
    // Deno's message echoes the input: replaced, never wrapped.
    fail("form", "is not a valid URL", `give ${FORM}; ${ENCODE}`);
  }
  return {
    host: host!.replace(/^\[|\]$/g, ""),
    port,
    ...(user ? { user } : {}),
    ...(database ? { database } : {}),
    ...(sslmode === undefined ? {} : { sslmode: sslmode as SslMode }),
    masked,
  };
}

/**
 * The URL with its password replaced by `***`, for messages. It needs no valid URL: whatever sits
 * between `://user:` and the last `@` is masked, and so is a `password=` parameter. Without an
 * `@`, what follows `host:` is masked unless it is a port number (`postgres://user:secret`).
 *
 * @example
 * ```ts
 * import { maskDatabaseUrl } from "./database_url.ts";
 *
 * maskDatabaseUrl("postgres://app:s3cret@db.example.com:99999/app");
 * // "postgres://app:***@db.example.com:99999/app"
 * ```
 */
export function maskDatabaseUrl(text: string): string {
  const scheme = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.exec(text);
  const start = scheme === null ? 0 : scheme[0].length;
  const rest = text.slice(start);
  const at = rest.lastIndexOf("@");
  let masked: string;
  if (at >= 0) {
    const colon = rest.slice(0, at).indexOf(":");
    masked = colon < 0 ? rest : `${rest.slice(0, colon + 1)}***${rest.slice(at)}`;
  } else {
    // No user part: "host:port" stays, but "user:secret" (a URL missing its host) does not.
    masked = rest.replace(/^([^:/?#]*:)(?![0-9]*(?:[/?#]|$))[^/?#]*/, "$1***");
  }
  return text.slice(0, start) + masked.replace(/([?&]password=)[^&#]*/gi, "$1***");
}

/**
 * `text` with every password of a URL in it masked: each occurrence of the password of `url`
 * (as written, decoded, or encoded as `new URL` writes it), then the password of any
 * `scheme://user:…@` in the text, and any `password=` parameter. For errors from postgres.js, Deno
 * or a user's module that may echo a URL: a URL in quotes (Deno's `Invalid URL: '…'`) is masked
 * up to its last `@` before the closing quote, so a password holding a space or an `@` is masked
 * whole; an unquoted one up to its last `@` before a space, else the line's last `@`.
 *
 * @example
 * ```ts
 * import { maskSecrets } from "./database_url.ts";
 *
 * maskSecrets("Invalid URL: 'postgres://u:pw@h:99999/db'"); // "Invalid URL: 'postgres://u:***@h:99999/db'"
 * ```
 */
export function maskSecrets(text: string, url?: string): string {
  let out = text;
  for (const secret of url === undefined ? [] : passwordForms(url)) {
    out = out.split(secret).join("***");
  }
  return maskUserinfo(out).replace(/(password=)[^&#\s'"]*/gi, "$1***");
}

// The start of a URL's user part: `scheme://user:` (the password follows the colon).
const USERINFO = /[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s:@/'"`]*:/g;
const QUOTES = `'"\``;

/** Masks the password after each `scheme://user:` of `text` (see {@link maskSecrets}). */
function maskUserinfo(text: string): string {
  let out = "";
  let done = 0;
  for (const match of text.matchAll(USERINFO)) {
    const from = match.index + match[0].length;
    if (from <= done) continue; // inside a part already masked
    const lineEnd = endOfLine(text, from);
    const quote = QUOTES.includes(text[match.index - 1] ?? "") ? text[match.index - 1] : "";
    const close = quote === "" ? -1 : text.indexOf(quote, from);
    let at: number;
    if (close >= 0 && close < lineEnd) at = text.lastIndexOf("@", close - 1);
    else {
      const space = text.slice(from, lineEnd).search(/\s/);
      const tokenEnd = space < 0 ? lineEnd : from + space;
      at = text.lastIndexOf("@", tokenEnd - 1);
      if (at < from) at = text.lastIndexOf("@", lineEnd - 1);
    }
    let end: number;
    if (at >= from) end = at;
    else {
      // No "@": `host:port` stays, but `user:secret` (a URL missing its host) does not.
      const rest = /^[^\s/?#'"`]*/.exec(text.slice(from))![0];
      if (/^\d*$/.test(rest)) continue;
      end = from + rest.length;
    }
    // The placeholder of a usage hint ("postgres://user:password@host") is left as it is.
    if (text.slice(from, end) === "password") continue;
    out += text.slice(done, from) + "***";
    done = end;
  }
  return out + text.slice(done);
}

function endOfLine(text: string, from: number): number {
  const newline = text.indexOf("\n", from);
  return newline < 0 ? text.length : newline;
}

/**
 * Masks passwords ({@link maskSecrets}) in an error's message and stack, and in its causes', in
 * place, and returns it; anything thrown that is not an `Error` becomes one.
 *
 * @example
 * ```ts
 * import { maskError } from "./database_url.ts";
 *
 * const url = "postgres://u:pw@h:99999/db";
 * try { new URL(url); } catch (error) { throw maskError(error, url); }
 * ```
 */
export function maskError(error: unknown, url?: string, depth = 0): Error {
  if (!(error instanceof Error)) return new Error(maskSecrets(String(error), url));
  try {
    error.message = maskSecrets(error.message, url);
    if (error.stack !== undefined) error.stack = maskSecrets(error.stack, url);
  } catch {
    // A frozen error cannot be fixed in place: a plain one carries the masked message instead.
    return new Error(maskSecrets(error.message, url));
  }
  const holder = error as { cause?: unknown };
  if (holder.cause !== undefined) {
    if (depth < 4) holder.cause = maskError(holder.cause, url, depth + 1);
    else delete holder.cause;
  }
  return error;
}

/** The password of `url` in each form it may be printed in; empty when it has none. */
function passwordForms(url: string): string[] {
  const scheme = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.exec(url);
  const rest = url.slice(scheme === null ? 0 : scheme[0].length);
  const at = rest.lastIndexOf("@");
  const colon = at < 0 ? -1 : rest.slice(0, at).indexOf(":");
  const raw = colon < 0 ? "" : rest.slice(colon + 1, at);
  const forms = new Set([raw, decode(raw) ?? ""]);
  try {
    forms.add(new URL(url).password);
  } catch {
    // Unparsable: the raw form is the one an error would echo.
  }
  forms.delete("");
  // Longest first, so a shorter form inside a longer one does not leave the rest behind.
  return [...forms].sort((a, b) => b.length - a.length);
}

function firstOf(text: string, characters: string): number {
  for (let i = 0; i < text.length; i++) if (characters.includes(text[i])) return i;
  return text.length;
}

function splitHostPort(hostport: string): { rawHost: string; rawPort: string } {
  if (hostport.startsWith("[")) {
    const close = hostport.indexOf("]");
    if (close < 0) return { rawHost: hostport, rawPort: "" };
    const after = hostport.slice(close + 1);
    return { rawHost: hostport.slice(0, close + 1), rawPort: after.replace(/^:/, "") };
  }
  const colon = hostport.lastIndexOf(":");
  return colon < 0
    ? { rawHost: hostport, rawPort: "" }
    : { rawHost: hostport.slice(0, colon), rawPort: hostport.slice(colon + 1) };
}

function decode(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

function listOf(values: readonly string[]): string {
  return `${values.slice(0, -1).join(", ")} or ${values[values.length - 1]}`;
}
