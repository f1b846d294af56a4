import type { Env } from "../dsl/context.ts";

/**
 * The environment variables the worker itself reads. Every key is optional: a missing database
 * URL is reported when the worker starts, not when the module loads.
 *
 * @example
 * ```ts
 * import { readWorkerEnv } from "./env.ts";
 *
 * const env = readWorkerEnv({ DATABASE_URL: "postgres://postgres@127.0.0.1:5432/postgres" });
 * console.log(env.DATABASE_URL !== undefined); // true
 * ```
 */
export interface WorkerEnv extends Env {
  /** Database URL preferred by the worker (e.g. a pooler URL). */
  readonly EDGE_WORKER_DB_URL?: string;
  /** Database URL used when `EDGE_WORKER_DB_URL` is absent. */
  readonly DATABASE_URL?: string;
  /** `error`, `warn`, `info` (default) or `debug`. */
  readonly EDGE_WORKER_LOG_LEVEL?: string;
  /** `http` makes a plain Deno worker wait for an authorised HTTP request, like on Supabase. */
  readonly EDGE_WORKER_TRIGGER?: string;
  /** Bearer secret for the HTTP trigger; an empty value counts as unset. */
  readonly PGFLOW_AUTH_SECRET?: string;
  /** Supabase project URL (enables `context.supabase`). */
  readonly SUPABASE_URL?: string;
  /** Service-role key: the trigger's fallback secret and the Supabase client's key. */
  readonly SUPABASE_SERVICE_ROLE_KEY?: string;
  /** Anonymous key, used for `context.supabase` only when no service-role key is set. */
  readonly SUPABASE_ANON_KEY?: string;
  /** Port of the HTTP trigger in plain Deno; default 8000. */
  readonly PORT?: string;
  /** The Edge runtime's execution id; used as the worker id when it is a UUID. */
  readonly SB_EXECUTION_ID?: string;
}

/**
 * A frozen copy of an environment record (default: the process environment, when readable), typed
 * with the keys the worker understands.
 *
 * @param source the variables to read; defaults to `Deno.env.toObject()`
 * @example
 * ```ts
 * import { readWorkerEnv } from "./env.ts";
 *
 * const env = readWorkerEnv();
 * console.log(typeof env.EDGE_WORKER_LOG_LEVEL);
 * ```
 */
export function readWorkerEnv(source?: Env): WorkerEnv {
  return Object.freeze({ ...(source ?? processEnv()) });
}

/** The keys of {@link WorkerEnv}: what is read one by one when the whole environment is not. */
const WORKER_ENV_KEYS: readonly (keyof WorkerEnv & string)[] = [
  "EDGE_WORKER_DB_URL",
  "DATABASE_URL",
  "EDGE_WORKER_LOG_LEVEL",
  "EDGE_WORKER_TRIGGER",
  "PGFLOW_AUTH_SECRET",
  "SUPABASE_URL",
  "SUPABASE_SERVICE_ROLE_KEY",
  "SUPABASE_ANON_KEY",
  "PORT",
  "SB_EXECUTION_ID",
];

function processEnv(): Env {
  try {
    return Deno.env.toObject();
  } catch {
    // Without --allow-env the worker still runs when everything comes from the config; with
    // --allow-env=NAME,... only those names can be read, one at a time.
    const env: Record<string, string> = {};
    for (const key of WORKER_ENV_KEYS) {
      try {
        const value = Deno.env.get(key);
        if (value !== undefined) env[key] = value;
      } catch {
        // Not allowed: as if unset; envUnreadable() names it when it matters.
      }
    }
    return env;
  }
}

/**
 * Which of `variables` this process may not read (Deno without `--allow-env`, or with it for
 * other names): a missing setting is then reported as a missing permission, not as unset.
 * Empty where the runtime has no permission API (the Supabase Edge runtime reads everything).
 *
 * @example
 * ```ts
 * import { envUnreadable } from "./env.ts";
 *
 * envUnreadable(["DATABASE_URL"]); // [] under `deno run -A`; ["DATABASE_URL"] without --allow-env
 * ```
 */
export function envUnreadable(variables: readonly string[]): string[] {
  return variables.filter((variable) => {
    try {
      return Deno.permissions.querySync({ name: "env", variable }).state !== "granted";
    } catch {
      return false;
    }
  });
}

/**
 * The database URL from the environment: `EDGE_WORKER_DB_URL`, then `DATABASE_URL`; empty
 * values count as unset.
 *
 * @example
 * ```ts
 * import { databaseUrlFromEnv } from "./env.ts";
 *
 * databaseUrlFromEnv({ DATABASE_URL: "postgres://localhost/db" }); // "postgres://localhost/db"
 * ```
 */
export function databaseUrlFromEnv(env: WorkerEnv): string | undefined {
  return databaseUrlSource(env)?.url;
}

/**
 * The environment variables that name the database, in the order they are read: the one order of
 * the worker and of every CLI command.
 *
 * @example
 * ```ts
 * import { DATABASE_URL_VARIABLES } from "./env.ts";
 *
 * DATABASE_URL_VARIABLES[0]; // "EDGE_WORKER_DB_URL"
 * ```
 */
export const DATABASE_URL_VARIABLES: readonly ["EDGE_WORKER_DB_URL", "DATABASE_URL"] = [
  "EDGE_WORKER_DB_URL",
  "DATABASE_URL",
];

/**
 * The database URL from the environment and the variable it came from (the first set, non-empty
 * one of {@link DATABASE_URL_VARIABLES}); `undefined` when none is set.
 *
 * @example
 * ```ts
 * import { databaseUrlSource } from "./env.ts";
 *
 * databaseUrlSource({ DATABASE_URL: "postgres://a/db", EDGE_WORKER_DB_URL: "postgres://b/db" });
 * // { variable: "EDGE_WORKER_DB_URL", url: "postgres://b/db" }
 * ```
 */
export function databaseUrlSource(
  env: Env,
): { variable: (typeof DATABASE_URL_VARIABLES)[number]; url: string } | undefined {
  for (const variable of DATABASE_URL_VARIABLES) {
    const url = nonEmpty(env[variable]);
    if (url !== undefined) return { variable, url };
  }
  return undefined;
}

/** `undefined` for missing and empty strings. */
export function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === "" ? undefined : value;
}
