/**
 * Reads the subset of TOML that `supabase/config.toml` uses: `[table.name]` headers and
 * `key = value` lines with strings, booleans and numbers. Anything else is an error, so the test
 * never silently misreads the file.
 *
 * @module
 */

/** A scalar value of the subset. */
export type TomlValue = string | boolean | number;

/** Tables by dotted name (`""` for the keys before the first header). */
export type TomlTables = Map<string, Map<string, TomlValue>>;

/**
 * Parses `text`; throws naming the line it cannot read.
 *
 * @example
 * ```ts
 * const tables = parseToml('[functions.a]\nverify_jwt = false\n');
 * tables.get("functions.a")?.get("verify_jwt"); // false
 * ```
 */
export function parseToml(text: string): TomlTables {
  const tables: TomlTables = new Map([["", new Map()]]);
  let current = tables.get("")!;
  text.split("\n").forEach((raw, i) => {
    const line = raw.replace(/^\s+|\s+$/g, "");
    if (line === "" || line.startsWith("#")) return;
    const header = /^\[([A-Za-z0-9_.-]+)\]$/.exec(line);
    if (header !== null) {
      if (tables.has(header[1])) throw new Error(`line ${i + 1}: table [${header[1]}] repeated`);
      current = new Map();
      tables.set(header[1], current);
      return;
    }
    const pair = /^([A-Za-z0-9_-]+)\s*=\s*(.+?)\s*(#.*)?$/.exec(line);
    if (pair === null) throw new Error(`line ${i + 1}: cannot read ${JSON.stringify(raw)}`);
    current.set(pair[1], scalar(pair[2], i + 1));
  });
  return tables;
}

function scalar(text: string, line: number): TomlValue {
  if (text === "true" || text === "false") return text === "true";
  if (/^-?\d+(\.\d+)?$/.test(text)) return Number(text);
  const quoted = /^"([^"\\]*)"$/.exec(text) ?? /^'([^']*)'$/.exec(text);
  if (quoted !== null) return quoted[1];
  throw new Error(`line ${line}: unsupported value ${text}`);
}
