/**
 * Which Host headers the dashboard answers. A web page on a name its author controls can point
 * that name at the dashboard's address (DNS rebinding) and then read the dashboard through a
 * visitor's browser as same-origin; the browser still sends the page's own name in Host, so
 * answering only names on a list defeats it, whatever address the server binds. An address
 * typed as numbers cannot be rebound, so the bind address and (on a wildcard bind) this
 * machine's own addresses are on the list; other names must be given (`--allow-host`).
 *
 * @module
 */

/** A Host value the dashboard answers: a name or address, and the port it must carry. */
export interface AllowedHost {
  /** Lower case; an IPv6 address in brackets, as in a Host header (`[::1]`). */
  readonly host: string;
  /** The port a Host header must carry; undefined: the dashboard's own port. */
  readonly port?: number;
}

const LOOPBACK_NAMES: readonly string[] = ["localhost", "127.0.0.1", "[::1]"];
const WILDCARDS: ReadonlySet<string> = new Set(["0.0.0.0", "[::]"]);
const LABEL = "[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?";
const NAME = new RegExp(`^${LABEL}(\\.${LABEL})*\\.?$`);

/**
 * Reads `name`, `name:port`, `[ipv6]`, `[ipv6]:port` or a bare IPv6 address, as in a Host
 * header or `--allow-host`; undefined when it is none of these.
 *
 * @example
 * ```ts
 * import { parseHost } from "./hosts.ts";
 *
 * parseHost("Dash.Example:8080"); // { host: "dash.example", port: 8080 }
 * parseHost("http://x");          // undefined
 * ```
 */
export function parseHost(text: string): AllowedHost | undefined {
  const lower = text.trim().toLowerCase();
  if (lower !== text.toLowerCase() || lower === "") return undefined;
  // Two colons without brackets can only be a bare IPv6 address (which takes no port).
  const bare = !lower.startsWith("[") && lower.indexOf(":") !== lower.lastIndexOf(":");
  const m = bare ? [lower, `[${lower}]`] : /^(\[[^\]]*\]|[^:\[\]]+)(?::(\d{1,5}))?$/.exec(lower);
  if (m === null) return undefined;
  const host = normalHost(m[1]);
  if (host === undefined) return undefined;
  if (m[2] === undefined) return { host };
  const port = Number(m[2]);
  return port >= 1 && port <= 65_535 ? { host, port } : undefined;
}

function normalHost(host: string): string | undefined {
  if (host.startsWith("[")) {
    try {
      // The URL parser writes an IPv6 address in its one canonical form ([::1], not [0::1]).
      return new URL(`http://${host}/`).hostname;
    } catch {
      return undefined;
    }
  }
  if (!NAME.test(host)) return undefined;
  const labels = host.replace(/\.$/, "").split(".");
  if (labels.every((l) => /^\d+$/.test(l))) {
    // All digits: an IPv4 address, written out in full.
    const ok = labels.length === 4 && labels.every((l) => Number(l) <= 255 && String(+l) === l);
    return ok ? labels.join(".") : undefined;
  }
  return host;
}

/**
 * The Host values a dashboard bound to `hostname` answers: the bind address; the loopback names
 * (`localhost`, `127.0.0.1`, `[::1]`) when it binds a loopback or wildcard address; this
 * machine's addresses (`ownAddresses`) when it binds a wildcard; and `extra` (`--allow-host`).
 *
 * @example
 * ```ts
 * import { allowedHosts } from "./hosts.ts";
 *
 * allowedHosts("0.0.0.0", [{ host: "dash.example" }], () => ["10.0.0.5"]);
 * // 0.0.0.0, localhost, 127.0.0.1, [::1], 10.0.0.5, dash.example (each at the dashboard's port)
 * ```
 */
export function allowedHosts(
  hostname: string,
  extra: readonly AllowedHost[],
  ownAddresses: () => readonly string[],
): AllowedHost[] {
  const bound = parseHost(hostname)?.host ?? hostname.toLowerCase();
  const names = [bound];
  const wildcard = WILDCARDS.has(bound);
  if (wildcard || bound === "localhost" || bound === "[::1]" || /^127\./.test(bound)) {
    names.push(...LOOPBACK_NAMES);
  }
  if (wildcard) {
    for (const a of ownAddresses()) {
      const h = parseHost(a)?.host;
      if (h !== undefined) names.push(h);
    }
  }
  const out: AllowedHost[] = [...new Set(names)].map((host) => ({ host }));
  for (const e of extra) {
    if (!out.some((o) => o.host === e.host && o.port === e.port)) out.push(e);
  }
  return out;
}

/**
 * Whether a request's Host header is on `allowed` for a server on `port`. A header without a
 * port is accepted for an allowed name: the browser then addressed the default port, i.e. a
 * proxy in front, and the name is what a rebinding page cannot fake.
 *
 * @example
 * ```ts
 * import { hostAllowed } from "./hosts.ts";
 *
 * hostAllowed("localhost:8765", [{ host: "localhost" }], 8765); // true
 * hostAllowed("evil.example:8765", [{ host: "localhost" }], 8765); // false
 * ```
 */
export function hostAllowed(
  header: string | null,
  allowed: readonly AllowedHost[],
  port: number,
): boolean {
  if (header === null) return false;
  const h = parseHost(header);
  if (h === undefined) return false;
  return allowed.some((a) =>
    a.host === h.host && (h.port === undefined || h.port === (a.port ?? port))
  );
}

/** Writes an allowed Host back as text, e.g. for the command's startup message. */
export function showHost(a: AllowedHost): string {
  return a.port === undefined ? a.host : `${a.host}:${a.port}`;
}

/**
 * The IP addresses of this machine's network interfaces; none if they cannot be read (no
 * `--allow-sys`): the operator then names them with `--allow-host`.
 */
export function machineAddresses(): string[] {
  try {
    return Deno.networkInterfaces().map((i) => i.family === "IPv6" ? `[${i.address}]` : i.address);
  } catch {
    return [];
  }
}
