import { checkBearer } from "./auth.ts";
import { flushLogs, type Logger, wasLogged } from "./logger.ts";

/** A worker the trigger made: enough to start it, report on it and stop it. */
export interface TriggeredWorker {
  /** The worker id. */
  readonly id: string;
  /** The function name. */
  readonly functionName: string;
  /** Resolves when the worker has stopped. */
  readonly done: Promise<void>;
  /**
   * Starts it; resolves once it polls (or once a stop that came during the startup has ended
   * it), rejects with the startup error.
   */
  start(): Promise<void>;
  /**
   * Stops gracefully, also while it starts (it then makes no read); with `unloading` (the
   * `beforeunload` reason) nothing it claims from then on is started.
   */
  stop(options?: { readonly unloading?: string }): Promise<void>;
}

/** The platform pieces the trigger uses; injectable so unit tests need no globals. */
export interface TriggerDeps {
  /** Serves `handler` (`Deno.serve` on the platform). */
  readonly serve: (handler: (request: Request) => Promise<Response>) => void;
  /** Keeps the isolate alive while a promise runs (`EdgeRuntime.waitUntil`), when available. */
  readonly waitUntil?: (promise: Promise<unknown>) => void;
  /**
   * Registers a function to run when the platform is about to end the isolate (`beforeunload`),
   * with its reason (`WallClockTime`, `CPUTime`, `Memory`, `EarlyDrop`) when it gives one.
   */
  readonly onUnload: (listener: (reason?: string) => void) => void;
  /** The bearer secret; `undefined` answers every request with 500 "misconfigured". */
  readonly secret: string | undefined;
  /** Logger. */
  readonly log: Logger;
  /** Makes the worker to start (not started yet). */
  readonly create: (functionName: string | undefined) => TriggeredWorker;
}

/** What `EdgeWorker.stop()` needs of the trigger. */
export interface Trigger {
  /** Stops the running worker, if any. */
  stop(): Promise<void>;
}

/**
 * The HTTP trigger of an Edge Function worker: the worker starts on the first authorised request
 * (the platform's keep-alive pings it) and later requests report on it. A failed startup is
 * answered with 500 and the error, and the next request tries again (nothing was registered). Once
 * a worker has stopped, requests get 503 `stopped`: the isolate is done.
 */
export function serveTrigger(deps: TriggerDeps): Trigger {
  let worker: TriggeredWorker | undefined;
  let finished: TriggeredWorker | undefined;
  // The worker being started, and its start: known before it polls, so a beforeunload that comes
  // meanwhile reaches it before its first read.
  let starting: { readonly worker: TriggeredWorker; readonly started: Promise<void> } | undefined;
  // The beforeunload reason, once it came: the isolate is ending, no worker may start polling.
  let unloading: string | undefined;
  const json = (status: number, body: Record<string, unknown>) =>
    new Response(JSON.stringify(body), {
      status,
      headers: { "content-type": "application/json" },
    });

  deps.onUnload((reason) => {
    // The platform is about to end the isolate: stop claiming at once, report what finishes, and
    // leave the rest to the visibility timeout or stalled recovery. Kept pending with waitUntil so
    // the drain is not cut short by an early drop. A worker still starting is told now too: it
    // ends its startup before its first read.
    if (unloading !== undefined) return;
    unloading = reason ?? "unload";
    const current = worker ?? starting?.worker;
    deps.log.info("beforeunload", { reason: unloading, worker: current?.id });
    if (current === undefined) return;
    // Log lines aggregated in this window are written once the worker has stopped, not lost. The
    // stop is called whether or not there is a waitUntil to keep it pending (plain Deno with
    // EDGE_WORKER_TRIGGER=http has none).
    const stopping = current.stop({ unloading }).finally(flushLogs);
    deps.waitUntil?.(stopping);
  });

  // Logged at the first refused request and then at most once a minute: the keep-alive pings
  // every few seconds, and one line says it all. The line names the variables, never a value.
  let misconfiguredLoggedAt: number | undefined;
  deps.serve(async (request) => {
    const auth = checkBearer(request, deps.secret);
    if (!auth.ok) {
      if (
        auth.status === 500 &&
        (misconfiguredLoggedAt === undefined || Date.now() - misconfiguredLoggedAt >= 60_000)
      ) {
        misconfiguredLoggedAt = Date.now();
        deps.log.error("trigger has no secret; answering 500", {
          error: auth.error,
          action: "set PGFLOW_AUTH_SECRET (or SUPABASE_SERVICE_ROLE_KEY) in the function's secrets",
        });
      }
      return json(auth.status, { error: auth.error });
    }
    if (finished !== undefined) {
      // A worker that ran and stopped (deprecated, or unloading) is not restarted in this isolate:
      // its id is taken, and a deprecated deployment should give way to the new one.
      return json(503, {
        status: "stopped",
        workerId: finished.id,
        functionName: finished.functionName,
      });
    }
    if (unloading !== undefined && worker === undefined && starting === undefined) {
      // Never a new worker in an isolate that is ending: the next request goes to a new isolate.
      return json(503, { status: "unloading", reason: unloading });
    }
    if (worker !== undefined) {
      return json(200, {
        status: "running",
        workerId: worker.id,
        functionName: worker.functionName,
      });
    }
    const first = starting === undefined;
    try {
      if (starting === undefined) {
        const made = deps.create(functionNameFromUrl(request.url));
        starting = { worker: made, started: made.start() };
      }
      const { worker: started, started: polling } = starting;
      await polling;
      if (worker === undefined && finished !== started) {
        worker = started;
        deps.waitUntil?.(started.done);
        started.done.then(() => {
          finished = started;
          worker = undefined;
        });
      }
      // beforeunload came while it started: it was told then, and stops (or has stopped).
      if (unloading !== undefined) return json(503, { status: "unloading", reason: unloading });
      return json(200, {
        status: first ? "started" : "running",
        workerId: started.id,
        functionName: started.functionName,
      });
    } catch (error) {
      starting = undefined;
      // The worker logged its own failure already; anything else is logged here.
      if (!wasLogged(error)) {
        deps.log.error("worker startup failed", { error: (error as Error).message });
      }
      return json(500, { status: "failed", error: (error as Error).message });
    }
  });

  return {
    stop: async () => {
      await (worker ?? starting?.worker)?.stop();
    },
  };
}

/**
 * The function name from the request path: its first segment (`/thread_processing/x` →
 * `thread_processing`), after a `functions/v1/` gateway prefix if the request still carries one.
 */
export function functionNameFromUrl(url: string): string | undefined {
  const path = new URL(url).pathname.replace(/^\/+/, "").replace(/^functions\/v1\//, "");
  const name = path.split("/")[0];
  return name !== undefined && /^[A-Za-z0-9_-]{1,128}$/.test(name) ? name : undefined;
}
