/**
 * The functions the Edge tests run in the runtime stand-in: the repository's example functions
 * (supabase/functions/, with their own deno.json) and the soak's (tests/edge/functions/).
 *
 * @module
 */
import type { EdgeFunctionSpec } from "./runtime/supervisor.ts";

/** The repository's deno.json (the soak's and probe functions run with it). */
export const ROOT_CONFIG: string = new URL("../../deno.json", import.meta.url).pathname;

/** The bearer secret every test function checks. */
export const SECRET = "edge-test-secret";

/** An example function of supabase/functions/, as deployed: its own deno.json, its secrets. */
export function workerFunction(
  name: string,
  databaseUrl: string,
  env: Record<string, string> = {},
): EdgeFunctionSpec {
  const dir = new URL(`../../supabase/functions/${name}/`, import.meta.url).pathname;
  return {
    name,
    entry: `${dir}index.ts`,
    config: `${dir}deno.json`,
    env: {
      EDGE_WORKER_DB_URL: databaseUrl,
      PGFLOW_AUTH_SECRET: SECRET,
      EDGE_WORKER_LOG_LEVEL: "info",
      ...env,
    },
  };
}

/** Sends the keep-alive's request to a function through the gateway; returns its JSON answer. */
export async function triggerFunction(
  gateway: string,
  fn: EdgeFunctionSpec,
): Promise<Record<string, unknown>> {
  const response = await fetch(`${gateway}/functions/v1/${fn.name}`, {
    method: "POST",
    headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
    body: "{}",
  });
  const body = await response.json();
  if (response.status !== 200) {
    throw new Error(`${fn.name}: ${response.status} ${JSON.stringify(body)}`);
  }
  return body;
}
