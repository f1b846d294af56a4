import { createClient, type SupabaseClient } from "@supabase/supabase-js";
import type { WorkerEnv } from "./env.ts";
import { nonEmpty } from "./env.ts";

/**
 * A getter for the Supabase client handlers see as `context.supabase`. The client is created on
 * first use, once per worker, and only when `SUPABASE_URL` and a key are set; otherwise reading
 * it throws an error that says which variables are missing.
 */
export function lazySupabaseClient(env: WorkerEnv): () => SupabaseClient {
  let client: SupabaseClient | undefined;
  return () => {
    if (client !== undefined) return client;
    const url = nonEmpty(env.SUPABASE_URL);
    const key = nonEmpty(env.SUPABASE_SERVICE_ROLE_KEY) ?? nonEmpty(env.SUPABASE_ANON_KEY);
    if (url === undefined || key === undefined) {
      throw new Error(
        "context.supabase is unavailable: set SUPABASE_URL and SUPABASE_SERVICE_ROLE_KEY (or " +
          "SUPABASE_ANON_KEY) in the worker's environment, or use context.sql",
      );
    }
    // A worker has no user session: never persist or refresh one.
    client = createClient(url, key, {
      auth: { persistSession: false, autoRefreshToken: false, detectSessionInUrl: false },
    });
    return client;
  };
}
