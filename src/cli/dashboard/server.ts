/**
 * The dashboard's HTTP server (Deno.serve): the page, its script modules (`/js/<name>.js`, from
 * `browser_js.ts`) and style, and the JSON endpoints the page polls (their answers: `api.ts`). GET and HEAD; every database read in a read-only transaction. With
 * `allowActions`, also POST `/api/runs/<id>/cancel|retry|resume`, guarded as `actions.ts` says.
 *
 * @module
 */
import type { Sql } from "../../platform/types.ts";
import {
  ActionError,
  type ActionName,
  ACTIONS,
  checkSameOrigin,
  newToken,
  readReason,
  runAction,
} from "./actions.ts";
import type { OverviewAnswer, SessionAnswer } from "./api.ts";
import { BROWSER_MODULES } from "./browser_js.ts";
import { DepthHistory } from "./history.ts";
import {
  type AllowedHost,
  allowedHosts,
  hostAllowed,
  machineAddresses,
  parseHost,
} from "./hosts.ts";
import { PAGE_CSS } from "./page_css.ts";
import { FAVICON_SVG, PAGE_HTML } from "./page_html.ts";
import { readOverview } from "./queries.ts";
import { readOnly } from "./read_only.ts";
import { readRun } from "./run_view.ts";
import { parseRunFilter, searchRuns } from "./search.ts";

/** Options of {@link startDashboard}. */
export interface DashboardOptions {
  /** The address to bind; default `127.0.0.1`. */
  readonly hostname?: string;
  /** The port; default 8765, 0 for any free port. */
  readonly port?: number;
  /**
   * Host header values answered besides the bind address and the names it implies (see
   * {@link allowedHosts}): `name` (at the dashboard's port) or `name:port`.
   */
  readonly allowHosts?: readonly string[];
  /** A worker is live if it sent a heartbeat this many seconds ago at most; default 30. */
  readonly staleAfterSeconds?: number;
  /** A queued task older than this many seconds is listed as stuck; default 60. */
  readonly queuedAfterSeconds?: number;
  /**
   * Serve the actions (cancel, retry, resume) and show their buttons; default false: no action
   * endpoint exists and the page offers none.
   */
  readonly allowActions?: boolean;
  /** Where each action is logged (one line, no reason text); default stderr. */
  readonly log?: (line: string) => void;
}

/** A running dashboard. */
export interface Dashboard {
  /** The page's address, e.g. `http://127.0.0.1:8765/`. */
  readonly url: string;
  /** The Host header values it answers (`name` at its own port, or `name:port`). */
  readonly allowedHosts: readonly AllowedHost[];
  /** Resolves when the server has stopped. */
  readonly finished: Promise<void>;
  /** Stops the server (the pool is the caller's to end). */
  shutdown(): Promise<void>;
}

/** How many recent runs, failures and stuck tasks the overview lists. */
const LIST_LIMIT = 25;
/** How long one overview read answers further requests. */
const OVERVIEW_REUSE_MS = 1000;
/** Depth samples kept per queue: five minutes at the page's 2 s refresh. */
const HISTORY_SIZE = 150;

const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  // Nothing but this server's own script and style runs: a value that slipped into markup could
  // still not execute. The page renders every value as text anyway (see browser/dom.ts).
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store",
};

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const ACTION_PATH = new RegExp(`^/api/runs/([^/]+)/(${ACTIONS.join("|")})$`);

/**
 * Serves the dashboard on `sql`'s database until {@link Dashboard.shutdown}.
 *
 * @example
 * ```ts
 * import { createPool } from "../../platform/pool.ts";
 * import { startDashboard } from "./server.ts";
 *
 * // const dashboard = startDashboard(createPool(url, { max: 2 }), { port: 0 });
 * // console.log(dashboard.url); … await dashboard.shutdown();
 * ```
 */
export function startDashboard(sql: Sql, options: DashboardOptions = {}): Dashboard {
  const hostname = options.hostname ?? "127.0.0.1";
  const extra = (options.allowHosts ?? []).map((text) => {
    const parsed = parseHost(text);
    if (parsed === undefined) throw new TypeError(`not a host name or address: ${text}`);
    return parsed;
  });
  const allowed = allowedHosts(hostname, extra, machineAddresses);
  const overviewOptions = {
    staleAfterSeconds: options.staleAfterSeconds ?? 30,
    queuedAfterSeconds: options.queuedAfterSeconds ?? 60,
    limit: LIST_LIMIT,
  };
  const history = new DepthHistory(HISTORY_SIZE);
  const allowActions = options.allowActions ?? false;
  // Per process: a page loaded before a restart must reload to act again.
  const token = allowActions ? newToken() : undefined;
  const log = options.log ?? ((line: string) => console.error(line));
  let port = 0;
  // One overview read a second at most, however many tabs poll: their requests share it.
  let cached: { at: number; body: Promise<OverviewAnswer> } | undefined;
  function overview(): Promise<OverviewAnswer> {
    const now = Date.now();
    if (cached === undefined || now - cached.at >= OVERVIEW_REUSE_MS) {
      const body = readOnly(sql, (tx) => readOverview(tx, overviewOptions)).then((o) => {
        history.record(Date.now(), o.queues);
        return { ...o, queues: o.queues.map((q) => ({ ...q, history: history.of(q.name) })) };
      });
      cached = { at: now, body };
      // A failed read is not reused: the next request tries again.
      body.catch(() => {
        if (cached?.body === body) cached = undefined;
      });
    }
    return cached.body;
  }

  async function route(request: Request): Promise<Response> {
    if (!hostAllowed(request.headers.get("host"), allowed, port)) {
      return text(
        421,
        "unexpected Host header; open the dashboard by the address it printed, " +
          "or start it with --allow-host for this name",
      );
    }
    const { pathname: path, search, searchParams } = new URL(request.url);
    const action = allowActions ? ACTION_PATH.exec(path) : null;
    if (action) {
      if (request.method !== "POST") {
        return problem(405, "an action is a POST", { allow: "POST" });
      }
      return await act(request, action[1], action[2] as ActionName);
    }
    if (request.method !== "GET" && request.method !== "HEAD") {
      const what = allowActions
        ? "only the actions (POST /api/runs/<id>/cancel|retry|resume) change anything"
        : "the dashboard only reads: GET and HEAD only";
      return text(405, what, { allow: "GET, HEAD" });
    }
    // A malformed escape (%, %zz, a cut UTF-8 sequence) is the client's mistake, not a crash.
    if (decoded(path) === undefined || decoded(search) === undefined) {
      const message = "malformed percent-escape in the URL";
      return path.startsWith("/api/") ? problem(400, message) : text(400, message);
    }
    if (path === "/") return asset(PAGE_HTML, "text/html; charset=utf-8");
    const script = /^\/js\/([a-z0-9_]+\.js)$/.exec(path);
    if (script && Object.hasOwn(BROWSER_MODULES, script[1])) {
      return asset(BROWSER_MODULES[script[1]], "text/javascript; charset=utf-8");
    }
    if (path === "/dashboard.css") return asset(PAGE_CSS, "text/css; charset=utf-8");
    if (path === "/favicon.svg") return asset(FAVICON_SVG, "image/svg+xml");
    if (path === "/api/overview") return await json(overview);
    // No CORS headers anywhere: another site's script cannot read this answer, so the token
    // reaches only the dashboard's own page.
    if (path === "/api/session") {
      const session: SessionAnswer = token ? { actions: true, token } : { actions: false };
      return await json(() => Promise.resolve(session));
    }
    if (path === "/api/runs") {
      let filter;
      try {
        filter = parseRunFilter(searchParams);
      } catch (error) {
        return problem(400, (error as Error).message);
      }
      return await json(() => readOnly(sql, (tx) => searchRuns(tx, filter)));
    }
    const run = /^\/api\/runs\/([^/]+)$/.exec(path);
    if (run) {
      const runId = decoded(run[1]);
      if (runId === undefined || !UUID.test(runId)) return problem(400, "a run id is a UUID");
      return await json(async () => {
        const detail = await readOnly(
          sql,
          (tx) => readRun(tx, runId, { staleAfterSeconds: overviewOptions.staleAfterSeconds }),
        );
        return detail ?? new NotFound(`no run ${runId}`);
      });
    }
    return text(404, "not found");
  }

  async function act(request: Request, rawId: string, name: ActionName): Promise<Response> {
    try {
      checkSameOrigin(request, token!);
      const runId = decoded(rawId);
      if (runId === undefined || !UUID.test(runId)) {
        throw new ActionError(400, "a run id is a UUID");
      }
      const reason = name === "cancel" ? await readReason(request) : null;
      const done = await runAction(sql, name, runId, reason);
      log(
        `pgflow dashboard: ${name} run ${runId} (${done.flowSlug}): ` +
          (done.newRunId
            ? `new run ${done.newRunId}`
            : `${done.cancelled === false ? "already" : "now"} ${done.status}`),
      );
      // The overview read before this action would show the old state for up to a second.
      cached = undefined;
      return new Response(JSON.stringify(done), {
        headers: { ...SECURITY_HEADERS, "content-type": "application/json" },
      });
    } catch (error) {
      if (error instanceof ActionError) return problem(error.status, error.message);
      throw error;
    }
  }

  const server = Deno.serve(
    {
      hostname,
      port: options.port ?? 8765,
      onListen: () => {},
      // Deno's default logs the whole stack; one line is enough, and a short answer for the page.
      onError: (error) => {
        console.error(`pgflow dashboard: a request failed: ${(error as Error)?.message ?? error}`);
        return problem(500, "the dashboard failed to answer; see its log");
      },
    },
    route,
  );
  port = server.addr.port;
  const shown = hostname.includes(":") ? `[${hostname}]` : hostname;
  return {
    url: `http://${shown}:${port}/`,
    allowedHosts: allowed,
    finished: server.finished,
    shutdown: () => server.shutdown(),
  };
}

class NotFound {
  constructor(readonly message: string) {}
}

function asset(body: string, type: string): Response {
  return new Response(body, { headers: { ...SECURITY_HEADERS, "content-type": type } });
}

function text(status: number, body: string, extra: Record<string, string> = {}): Response {
  return new Response(`${body}\n`, {
    status,
    headers: { ...SECURITY_HEADERS, "content-type": "text/plain; charset=utf-8", ...extra },
  });
}

function problem(status: number, message: string, extra: Record<string, string> = {}): Response {
  return new Response(JSON.stringify({ error: message }), {
    status,
    headers: { ...SECURITY_HEADERS, "content-type": "application/json", ...extra },
  });
}

async function json(read: () => Promise<unknown>): Promise<Response> {
  try {
    const body = await read();
    if (body instanceof NotFound) return problem(404, body.message);
    return new Response(JSON.stringify(body), {
      headers: { ...SECURITY_HEADERS, "content-type": "application/json" },
    });
  } catch (error) {
    // The message and SQLSTATE only: details can quote row values.
    const e = error as { message?: string; code?: string };
    const code = e.code && /^[0-9A-Z]{5}$/.test(e.code) ? ` (SQLSTATE ${e.code})` : "";
    return problem(503, `could not read the database: ${e.message ?? String(error)}${code}`);
  }
}

/** `part` with its percent-escapes decoded; undefined if one is malformed. */
function decoded(part: string): string | undefined {
  try {
    return decodeURIComponent(part);
  } catch {
    return undefined;
  }
}
