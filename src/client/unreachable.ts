/**
 * A database the client cannot reach says so as the CLI does: every call of a backend that fails
 * to connect (refused, unknown host, no answer, bad password, no such database) rejects with a
 * `DatabaseConnectionError` naming the target, what to check, and the command that starts a local
 * database, without a stack.
 *
 * @module
 */
import { connectionProblem, DatabaseConnectionError } from "../operations/connection_problem.ts";
import type { Backend } from "./backend.ts";

/**
 * `backend`, whose connection failures become `DatabaseConnectionError`s explained for `url`
 * (the URL the client was given, when it was given one).
 *
 * @example
 * ```ts
 * import { explainUnreachable } from "./unreachable.ts";
 *
 * // const backend = explainUnreachable(sqlBackend(sql, options), url);
 * ```
 */
export function explainUnreachable(backend: Backend, url: string | undefined): Backend {
  const explained = <A extends unknown[], R>(call: (...args: A) => Promise<R>) =>
  async (
    ...args: A
  ): Promise<R> => {
    try {
      return await call(...args);
    } catch (error) {
      const problem = connectionProblem(error, url);
      if (problem === undefined) throw error;
      throw new DatabaseConnectionError(problem, (error as { code: string }).code);
    }
  };
  return {
    ...backend,
    startFlow: explained(backend.startFlow),
    startFlows: explained(backend.startFlows),
    getRun: explained(backend.getRun),
    cancelRun: explained(backend.cancelRun),
    sendEvent: explained(backend.sendEvent),
    restartRun: explained(backend.restartRun),
    listRuns: explained(backend.listRuns),
    aliasTarget: explained(backend.aliasTarget),
    callSchedule: explained(backend.callSchedule),
  };
}
