/**
 * A bare function for the runtime stand-in's own tests (no worker): it answers each request at
 * once and, by `?mode=`, keeps working after the response under `EdgeRuntime.waitUntil`: `burn`
 * (CPU until the isolate ends), `grow` (memory, 8 MB every 20 ms), `hold` (nothing, until
 * `beforeunload`). It prints one line per `beforeunload`, with the reason.
 *
 * @module
 */
interface Runtime {
  waitUntil(promise: Promise<unknown>): void;
}
const runtime = (globalThis as unknown as { EdgeRuntime: Runtime }).EdgeRuntime;
const unloaded = Promise.withResolvers<void>();
addEventListener("beforeunload", (event) => {
  const reason = (event as CustomEvent<{ reason?: string }>).detail?.reason;
  console.log(JSON.stringify({ event: "beforeunload", reason }));
  unloaded.resolve();
});

const kept: Uint8Array[] = [];
async function burn(): Promise<void> {
  for (;;) {
    const until = performance.now() + 20;
    while (performance.now() < until) Math.sqrt(Math.random());
    await new Promise((r) => setTimeout(r, 0));
  }
}
async function grow(): Promise<void> {
  for (;;) {
    kept.push(new Uint8Array(8 * 1024 * 1024).fill(1));
    await new Promise((r) => setTimeout(r, 20));
  }
}

Deno.serve((request) => {
  const mode = new URL(request.url).searchParams.get("mode");
  if (mode === "burn") runtime.waitUntil(burn());
  else if (mode === "grow") runtime.waitUntil(grow());
  else if (mode === "hold") runtime.waitUntil(unloaded.promise);
  return new Response("ok");
});
