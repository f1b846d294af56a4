/**
 * The test's stand-in for pg_net's background worker: it takes the requests `net.http_post`
 * queued (the test-only pg_net, extensions/pg_net--0.0.1.sql) after their transaction committed,
 * delivers them, and records each answer in `net._http_response`, as pg_net does. It delivers only
 * to the runtime stand-in's gateway (`origin`): anything else is refused and recorded as an error.
 *
 * @module
 */
import type postgres from "postgres";

/** One request the relay handled. */
export interface Delivery {
  /** pg_net's request id. */
  readonly id: string;
  /** The URL requested. */
  readonly url: string;
  /** When it was taken from the queue (ms since the epoch). */
  readonly at: number;
  /** The HTTP status, or `undefined` when it was not delivered. */
  status?: number;
  /** The answer's body. */
  body?: string;
}

/** A running relay. */
export interface Relay {
  /** Every request handled so far. */
  readonly deliveries: Delivery[];
  /** Stops taking requests and waits for those under way. */
  stop(): Promise<void>;
}

interface QueuedRequest {
  id: string;
  method: string;
  url: string;
  headers: Record<string, string>;
  body: Uint8Array | null;
  timeout_milliseconds: number;
}

/**
 * Starts relaying `net.http_request_queue` every `intervalMs` to `origin`.
 *
 * @example
 * ```ts
 * const relay = startRelay(sql, supervisor.url);
 * // ... await relay.stop();
 * ```
 */
export function startRelay(sql: postgres.Sql, origin: string, intervalMs = 100): Relay {
  const deliveries: Delivery[] = [];
  const underway = new Set<Promise<void>>();
  let stopped = false;
  const deliver = async (request: QueuedRequest, delivery: Delivery) => {
    let status: number | null = null;
    let content: string | null = null;
    let error: string | null = null;
    if (!request.url.startsWith(`${origin}/`)) {
      error = `the test relay delivers only to ${origin}`;
    } else {
      try {
        const response = await fetch(request.url, {
          method: request.method,
          headers: request.headers,
          body: request.body === null ? undefined : new Uint8Array(request.body),
          signal: AbortSignal.timeout(Math.max(request.timeout_milliseconds, 30_000)),
        });
        status = response.status;
        content = await response.text();
      } catch (e) {
        error = (e as Error).message;
      }
    }
    delivery.status = status ?? undefined;
    delivery.body = content ?? error ?? undefined;
    await sql`
      insert into net._http_response (id, status_code, content_type, headers, content, timed_out, error_msg)
      values (${request.id}, ${status}, 'application/json', '{}'::jsonb, ${content}, false, ${error})`
      .catch(() => {});
  };
  const loop = (async () => {
    while (!stopped) {
      try {
        const taken = await sql<QueuedRequest[]>`
          delete from net.http_request_queue
          where id in (select id from net.http_request_queue order by id limit 20 for update skip locked)
          returning id::text, method, url, headers, body, timeout_milliseconds`;
        for (const request of taken) {
          const delivery: Delivery = { id: request.id, url: request.url, at: Date.now() };
          deliveries.push(delivery);
          const p = deliver(request, delivery);
          underway.add(p);
          p.finally(() => underway.delete(p));
        }
      } catch {
        // The database is going away with the test: stop quietly.
        if (stopped) break;
      }
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  })();
  return {
    deliveries,
    stop: async () => {
      stopped = true;
      await loop;
      await Promise.allSettled([...underway]);
    },
  };
}
