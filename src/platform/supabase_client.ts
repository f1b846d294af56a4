import type { SupabaseClient } from "npm:@supabase/supabase-js@2.119.2";
import type { WorkerEnv } from "./env.ts";
import { nonEmpty } from "./env.ts";

/**
 * Prepares the Supabase client handlers see as `context.supabase` and returns its getter. The
 * client (and the supabase-js module itself) is loaded only when `SUPABASE_URL` and a key are set,
 * so workers that never use it pay nothing at cold start; without them, reading the getter throws
 * an error that says which variables are missing.
 */
export async function prepareSupabaseClient(env: WorkerEnv): Promise<() => SupabaseClient> {
  const url = nonEmpty(env.SUPABASE_URL);
  const key = nonEmpty(env.SUPABASE_SERVICE_ROLE_KEY) ?? nonEmpty(env.SUPABASE_ANON_KEY);
  if (url === undefined || key === undefined) {
    return () => {
      throw new Error(
        "context.supabase is unavailable: set SUPABASE_URL and SUPABASE_SERVICE_ROLE_KEY (or " +
          "SUPABASE_ANON_KEY) in the worker's environment, or use context.sql",
      );
    };
  }
  const { createClient } = await import("npm:@supabase/supabase-js@2.119.2");
  let client: SupabaseClient | undefined;
  return () =>
    // A worker has no user session: never persist or refresh one.
    client ??= createClient(url, key, {
      auth: { persistSession: false, autoRefreshToken: false, detectSessionInUrl: false },
    });
}
