import type { WorkerEnv } from "./env.ts";
import { nonEmpty } from "./env.ts";

/** The outcome of checking a trigger request's bearer token. */
export type AuthResult =
  | { readonly ok: true }
  | { readonly ok: false; readonly status: 401 | 500; readonly error: string };

/**
 * The secret the HTTP trigger expects: `PGFLOW_AUTH_SECRET`, else `SUPABASE_SERVICE_ROLE_KEY`.
 */
export function expectedSecret(env: WorkerEnv): string | undefined {
  return nonEmpty(env.PGFLOW_AUTH_SECRET) ?? nonEmpty(env.SUPABASE_SERVICE_ROLE_KEY);
}

/**
 * Checks `Authorization: Bearer <secret>` in constant time (for equal lengths), so response
 * timing does not reveal how much of a guess was right.
 */
export function checkBearer(request: Request, secret: string | undefined): AuthResult {
  if (secret === undefined) {
    return {
      ok: false,
      status: 500,
      error: "worker misconfigured: set PGFLOW_AUTH_SECRET or SUPABASE_SERVICE_ROLE_KEY",
    };
  }
  const header = request.headers.get("authorization") ?? "";
  const match = /^Bearer (.+)$/i.exec(header);
  if (match === null || !timingSafeEqual(match[1], secret)) {
    return { ok: false, status: 401, error: "missing or invalid bearer token" };
  }
  return { ok: true };
}

/** Compares two strings without stopping at the first different byte. */
export function timingSafeEqual(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  // Compare against y's length whatever x is, so the loop's duration depends only on the secret.
  let diff = x.length ^ y.length;
  for (let i = 0; i < y.length; i++) diff |= (x[i] ?? 0) ^ y[i];
  return diff === 0;
}
