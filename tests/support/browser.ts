/**
 * A headless Chromium for tests, driven over the Chrome DevTools Protocol with Deno's own
 * WebSocket: no driver library. `openBrowser()` starts `chromium --headless=new` on a free
 * debugging port (read from its stderr), `page.goto(url)` opens a tab, `page.evaluate(js)` runs
 * an expression in it, `page.screenshot(path)` saves a PNG of the whole page.
 *
 * Chromium comes from Debian (`apt-get install chromium`, which `deno task ci` runs when it runs
 * as root: local/provision.ts); set `CHROMIUM` to use another binary. A machine without it fails
 * the test with the install command, never skips it.
 *
 * @module
 */
import { CHROMIUM, notInstalled } from "../../local/provision.ts";

/** An open tab. */
export interface Page {
  /** Evaluates a JS expression in the page (promises awaited) and returns its JSON value. */
  evaluate<T>(expression: string): Promise<T>;
  /** Polls `expression` until it is truthy, and returns its value; throws naming `what`. */
  waitFor<T>(expression: string, what: string, timeoutMs?: number): Promise<T>;
  /** Saves a PNG of the whole page (beyond the viewport) at `path`. */
  screenshot(path: string): Promise<void>;
  /** Lays the page out for a window of this size in CSS pixels (default 1400 × 1000). */
  setViewport(width: number, height: number): Promise<void>;
  /** Console messages, uncaught exceptions and browser log entries (e.g. CSP reports), in order. */
  readonly messages: readonly string[];
}

/** A running headless Chromium. */
export interface Browser {
  /** Opens a tab at `url` and waits for its load event. */
  goto(url: string): Promise<Page>;
  /** Closes the browser and removes its profile. */
  close(): Promise<void>;
}

type Listener = (params: Record<string, unknown>, sessionId: string | undefined) => void;

/** The binary to run: `CHROMIUM`, else Debian's `chromium`. */
function chromiumPath(): string {
  return Deno.env.get("CHROMIUM") ?? "chromium";
}

/**
 * Starts headless Chromium.
 *
 * @example
 * ```ts
 * const browser = await openBrowser();
 * try {
 *   const page = await browser.goto("http://127.0.0.1:8765/");
 *   console.log(await page.evaluate<string>("document.title"));
 * } finally {
 *   await browser.close();
 * }
 * ```
 */
export async function openBrowser(): Promise<Browser> {
  const profile = await Deno.makeTempDir({ prefix: "pgflow-chromium-" });
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(chromiumPath(), {
      args: [
        "--headless=new",
        "--remote-debugging-port=0",
        `--user-data-dir=${profile}`,
        // Tests run as root in CI containers, where Chromium's sandbox cannot start.
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--window-size=1400,1000",
        "about:blank",
      ],
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
  } catch (error) {
    await Deno.remove(profile, { recursive: true }).catch(() => {});
    if (error instanceof Deno.errors.NotFound) {
      throw new Error(notInstalled(CHROMIUM, "CHROMIUM"));
    }
    throw error;
  }
  const stderr: string[] = [];
  let wsUrl: string;
  try {
    wsUrl = await devToolsUrl(child, stderr);
  } catch (error) {
    try {
      child.kill("SIGKILL");
    } catch { /* already gone */ }
    await child.status;
    await Deno.remove(profile, { recursive: true }).catch(() => {});
    throw error;
  }
  const cdp = await Cdp.connect(wsUrl);

  return {
    async goto(url) {
      const { targetId } = await cdp.send<{ targetId: string }>("Target.createTarget", {
        url: "about:blank",
      });
      const { sessionId } = await cdp.send<{ sessionId: string }>("Target.attachToTarget", {
        targetId,
        flatten: true,
      });
      const messages: string[] = [];
      cdp.on("Runtime.consoleAPICalled", (p, s) => {
        if (s !== sessionId) return;
        const args = (p.args as { value?: unknown; description?: string }[]) ?? [];
        messages.push(`console.${p.type}: ${args.map((a) => a.value ?? a.description).join(" ")}`);
      });
      cdp.on("Runtime.exceptionThrown", (p, s) => {
        if (s !== sessionId) return;
        const d = p.exceptionDetails as { text?: string; exception?: { description?: string } };
        messages.push(`exception: ${d.exception?.description ?? d.text}`);
      });
      cdp.on("Log.entryAdded", (p, s) => {
        if (s !== sessionId) return;
        const e = p.entry as { level: string; text: string };
        messages.push(`log.${e.level}: ${e.text}`);
      });
      await cdp.send("Page.enable", {}, sessionId);
      await cdp.send("Runtime.enable", {}, sessionId);
      await cdp.send("Log.enable", {}, sessionId);
      const loaded = cdp.once("Page.loadEventFired", sessionId, 30_000);
      const nav = await cdp.send<{ errorText?: string }>("Page.navigate", { url }, sessionId);
      if (nav.errorText) throw new Error(`could not open ${url}: ${nav.errorText}`);
      await loaded;

      const evaluate = async <T>(expression: string): Promise<T> => {
        const r = await cdp.send<
          {
            result: { value?: unknown };
            exceptionDetails?: { text: string; exception?: { description?: string } };
          }
        >("Runtime.evaluate", { expression, returnByValue: true, awaitPromise: true }, sessionId);
        if (r.exceptionDetails) {
          throw new Error(
            `page threw: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text}`,
          );
        }
        return r.result.value as T;
      };
      return {
        messages,
        evaluate,
        async waitFor<T>(expression: string, what: string, timeoutMs = 30_000): Promise<T> {
          const deadline = Date.now() + timeoutMs;
          for (;;) {
            const value = await evaluate<T>(expression);
            if (value) return value;
            if (Date.now() > deadline) {
              throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
            }
            await new Promise((r) => setTimeout(r, 100));
          }
        },
        async setViewport(width: number, height: number) {
          await cdp.send("Emulation.setDeviceMetricsOverride", {
            width,
            height,
            deviceScaleFactor: 1,
            mobile: false,
          }, sessionId);
        },
        async screenshot(path: string) {
          const { data } = await cdp.send<{ data: string }>("Page.captureScreenshot", {
            format: "png",
            captureBeyondViewport: true,
            clip: await pageClip(cdp, sessionId),
          }, sessionId);
          await Deno.writeFile(path, Uint8Array.from(atob(data), (c) => c.charCodeAt(0)));
        },
      };
    },
    async close() {
      await cdp.send("Browser.close", {}).catch(() => {});
      await cdp.close();
      const timer = setTimeout(() => {
        try {
          child.kill("SIGKILL");
        } catch { /* already gone */ }
      }, 5_000);
      await child.status;
      clearTimeout(timer);
      await Deno.remove(profile, { recursive: true }).catch(() => {});
    },
  };
}

async function pageClip(cdp: Cdp, sessionId: string) {
  const m = await cdp.send<{ cssContentSize: { width: number; height: number } }>(
    "Page.getLayoutMetrics",
    {},
    sessionId,
  );
  const { width, height } = m.cssContentSize;
  return { x: 0, y: 0, width: Math.ceil(width), height: Math.ceil(height), scale: 1 };
}

/** Reads stderr until Chromium prints its DevTools URL; keeps draining it afterwards. */
async function devToolsUrl(child: Deno.ChildProcess, lines: string[]): Promise<string> {
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  const timeout = setTimeout(() => reader.cancel("timeout").catch(() => {}), 30_000);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += value;
      const parts = buffered.split("\n");
      buffered = parts.pop()!;
      for (const line of parts) {
        lines.push(line);
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(line);
        if (m) {
          clearTimeout(timeout);
          // Keep reading so a chatty Chromium never blocks on a full pipe.
          (async () => {
            try {
              while (!(await reader.read()).done) { /* drain */ }
            } catch { /* closed */ }
          })();
          return m[1];
        }
      }
    }
  } finally {
    clearTimeout(timeout);
  }
  throw new Error(
    `${chromiumPath()} exited or printed no DevTools URL within 30 s; its stderr:\n` +
      lines.concat(buffered).slice(-20).join("\n"),
  );
}

/** A DevTools connection: commands by id, events to listeners, flat sessions for tabs. */
class Cdp {
  #next = 1;
  readonly #pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  readonly #listeners = new Map<string, Set<Listener>>();

  private constructor(private readonly ws: WebSocket) {
    ws.onmessage = (event) => {
      const msg = JSON.parse(String(event.data));
      if (typeof msg.id === "number") {
        const p = this.#pending.get(msg.id);
        this.#pending.delete(msg.id);
        if (msg.error) p?.reject(new Error(`CDP ${msg.error.message} (${msg.error.code})`));
        else p?.resolve(msg.result);
        return;
      }
      for (const l of this.#listeners.get(msg.method) ?? []) l(msg.params ?? {}, msg.sessionId);
    };
    ws.onclose = () => {
      for (const p of this.#pending.values()) p.reject(new Error("DevTools connection closed"));
      this.#pending.clear();
    };
  }

  static connect(url: string): Promise<Cdp> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      ws.onopen = () => resolve(new Cdp(ws));
      ws.onerror = (e) => reject(new Error(`cannot reach DevTools at ${url}: ${String(e)}`));
    });
  }

  send<T = unknown>(method: string, params: unknown, sessionId?: string): Promise<T> {
    const id = this.#next++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    });
  }

  on(method: string, listener: Listener): void {
    const set = this.#listeners.get(method) ?? new Set();
    set.add(listener);
    this.#listeners.set(method, set);
  }

  once(method: string, sessionId: string, timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no ${method} within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const listener: Listener = (_p, s) => {
        if (s !== sessionId) return;
        clearTimeout(timer);
        this.#listeners.get(method)?.delete(listener);
        resolve();
      };
      this.on(method, listener);
    });
  }

  /** Closes the socket (if Chromium has not already) and waits until it is closed. */
  async close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    const closed = new Promise<void>((resolve) =>
      this.ws.addEventListener("close", () => resolve())
    );
    if (this.ws.readyState === WebSocket.OPEN) this.ws.close();
    await closed;
  }
}
