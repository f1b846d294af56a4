/**
 * Splits SQL text into statements, aware of comments, quoted strings and identifiers, and
 * dollar-quoted bodies. Each statement keeps the comment lines written above it. Used by
 * `deno task migration:new` to copy statements from the schema files as their authors wrote them.
 *
 * @module
 */

/** One statement of a SQL file. */
export interface SqlStatement {
  /** The statement, from its first word to its `;` (included). */
  text: string;
  /** The comment lines between the previous statement and this one, trimmed (may be empty). */
  comment: string;
}

const DOLLAR_TAG = /^\$([A-Za-z_][A-Za-z0-9_]*)?\$/;

/**
 * Splits `sql` into statements. A `begin atomic ... end` body is not understood (its inner `;`
 * end the statement): the schema files do not use one.
 *
 * @example
 * ```ts
 * splitStatements("-- one\nselect 1;\nselect ';';"); // two statements, the first with "-- one"
 * ```
 */
export function splitStatements(sql: string): SqlStatement[] {
  const out: SqlStatement[] = [];
  let leadStart = 0;
  let start = -1;
  let i = 0;
  const n = sql.length;
  const push = (end: number) => {
    out.push({ text: sql.slice(start, end), comment: commentLines(sql.slice(leadStart, start)) });
    leadStart = end;
    start = -1;
  };
  while (i < n) {
    const c = sql[i];
    if (c === "-" && sql[i + 1] === "-") {
      const end = sql.indexOf("\n", i);
      i = end < 0 ? n : end + 1;
      continue;
    }
    if (c === "/" && sql[i + 1] === "*") {
      let depth = 1;
      i += 2;
      while (i < n && depth > 0) {
        if (sql[i] === "/" && sql[i + 1] === "*") (depth++, i += 2);
        else if (sql[i] === "*" && sql[i + 1] === "/") (depth--, i += 2);
        else i++;
      }
      continue;
    }
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    if (start < 0) start = i;
    if (c === "'") {
      const escapes = i > 0 && /[eE]/.test(sql[i - 1]) && !/[A-Za-z0-9_]/.test(sql[i - 2] ?? "");
      i++;
      while (i < n) {
        if (escapes && sql[i] === "\\") i += 2;
        else if (sql[i] === "'" && sql[i + 1] === "'") i += 2;
        else if (sql[i] === "'") break;
        else i++;
      }
      i++;
      continue;
    }
    if (c === '"') {
      i++;
      while (i < n) {
        if (sql[i] === '"' && sql[i + 1] === '"') i += 2;
        else if (sql[i] === '"') break;
        else i++;
      }
      i++;
      continue;
    }
    if (c === "$" && !/[A-Za-z0-9_]/.test(sql[i - 1] ?? "")) {
      const tag = DOLLAR_TAG.exec(sql.slice(i, i + 64));
      if (tag) {
        const close = sql.indexOf(tag[0], i + tag[0].length);
        i = close < 0 ? n : close + tag[0].length;
        continue;
      }
    }
    if (c === ";") {
      push(i + 1);
      i++;
      continue;
    }
    i++;
  }
  if (start >= 0) push(n);
  return out;
}

/** The comment lines of the text between two statements, blank lines at either end removed. */
function commentLines(between: string): string {
  const lines = between.split("\n").map((l) => l.trim());
  while (lines.length && !lines[0].trim().startsWith("--")) lines.shift();
  while (lines.length && !lines.at(-1)!.trim().startsWith("--")) lines.pop();
  return lines.join("\n");
}
