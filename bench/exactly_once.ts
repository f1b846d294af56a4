/**
 * Every headline cell ends with a check, from the cell's database, that each unit it started ran
 * each of its steps exactly once. Two records are compared: the ledger (`bench_ledger`: unit,
 * step, times its function ran), which the step functions keep in memory and write to the
 * database after the measured windows, and the engine's own record of its work (tasks and their
 * attempts, jobs and their retries, workflows and their checkpoints).
 */
import type postgres from "postgres";

/** What a cell's database says about its units. */
export interface UnitCounts {
  /** Units the bench started in this database. */
  readonly started: number;
  readonly steps: number;
  /** Ledger rows (one per unit and step that ran), those that ran once, distinct units. */
  readonly ledgerRows: number;
  readonly ledgerOnce: number;
  readonly ledgerUnits: number;
  /** The engine's own record: step runs it recorded, and of them those done in one attempt. */
  readonly recorded: number;
  readonly recordedOnce: number;
  /** Work the engine still holds (queued, running or failed) after the cell. */
  readonly left: number;
}

/**
 * What is wrong with `c`, one line each; empty when every unit ran each step exactly once.
 *
 * @example
 * ```ts
 * exactlyOnceViolations({
 *   started: 2, steps: 1, ledgerRows: 2, ledgerOnce: 1, ledgerUnits: 2,
 *   recorded: 2, recordedOnce: 2, left: 0,
 * }); // ["1 unit steps ran more than once"]
 * ```
 */
export function exactlyOnceViolations(c: UnitCounts): string[] {
  const want = c.started * c.steps;
  const out: string[] = [];
  if (c.ledgerUnits !== c.started) out.push(`${c.ledgerUnits} of ${c.started} units ran`);
  if (c.ledgerRows !== want) out.push(`${c.ledgerRows} unit steps ran, not ${want}`);
  if (c.ledgerOnce !== c.ledgerRows) {
    out.push(`${c.ledgerRows - c.ledgerOnce} unit steps ran more than once`);
  }
  if (c.recorded !== want) out.push(`the engine recorded ${c.recorded} step runs, not ${want}`);
  if (c.recordedOnce !== c.recorded) {
    out.push(`the engine recorded ${c.recorded - c.recordedOnce} step runs with a retry`);
  }
  if (c.left !== 0) out.push(`${c.left} units or steps were left unfinished`);
  return out;
}

/** The ledger's counts in the cell's database. */
async function ledgerCounts(
  sql: postgres.Sql,
): Promise<{ rows: number; once: number; units: number }> {
  const [row] = await sql<{ rows: number; once: number; units: number }[]>`
    select count(*)::int as rows, count(*) filter (where n = 1)::int as once,
           count(distinct unit)::int as units
    from bench_ledger`;
  return row;
}

/**
 * Writes an in-process ledger (key `unit␟step` → runs) to `bench_ledger`.
 *
 * @example
 * ```ts
 * await writeLedger(sql, new Map([["run-1\u001fwork", 1]]));
 * ```
 */
export async function writeLedger(sql: postgres.Sql, ledger: ReadonlyMap<string, number>) {
  await sql`create table if not exists bench_ledger (unit text not null, step text not null,
                                                   n int not null)`;
  const rows = [...ledger].map(([key, n]) => [...key.split("\u001f"), n] as const);
  for (let at = 0; at < rows.length; at += 10_000) {
    const part = rows.slice(at, at + 10_000);
    await sql`insert into bench_ledger
              select * from unnest(${part.map((r) => r[0])}::text[], ${
      part.map((r) => r[1])
    }::text[],
                                   ${part.map((r) => r[2])}::int[])`;
  }
}

/** Each system's own record, read after the cell. */
export type OwnRecord = "engine" | "graphile" | "pgboss" | "dbos";

/** `recorded`, `recordedOnce`, `left` (and, for the engine, the runs started) from `system`. */
async function ownRecord(
  sql: postgres.Sql,
  system: OwnRecord,
): Promise<{ recorded: number; recordedOnce: number; left: number; units?: number }> {
  type Row = { recorded: number; once: number; left: number; units?: number };
  let row: Row;
  switch (system) {
    case "engine":
      [row] = await sql<Row[]>`
        select (select count(*) from pgflow.step_tasks)::int as recorded,
               (select count(*) from pgflow.step_tasks
                where status = 'completed' and attempts_count = 1)::int as once,
               (select count(*) from pgflow.runs where status <> 'completed')::int as left,
               (select count(*) from pgflow.runs)::int as units`;
      break;
    case "graphile":
      // Completed jobs are deleted: it keeps no record of work done, only of work left.
      [row] = await sql<Row[]>`
        select count(*)::int as left, -1 as recorded, -1 as once from graphile_worker.jobs`;
      break;
    case "pgboss":
      [row] = await sql<Row[]>`
        select count(*)::int as recorded,
               count(*) filter (where state = 'completed' and retry_count = 0)::int as once,
               count(*) filter (where state <> 'completed')::int as left
        from pgboss.job where name = 'bench'`;
      break;
    case "dbos":
      [row] = await sql<Row[]>`
        select (select count(*) from dbos.operation_outputs)::int as recorded,
               (select count(*) from dbos.operation_outputs o
                join dbos.workflow_status w on w.workflow_uuid = o.workflow_uuid
                where w.status = 'SUCCESS' and w.recovery_attempts <= 1)::int as once,
               (select count(*) from dbos.workflow_status where status <> 'SUCCESS')::int as left`;
      break;
  }
  return { recorded: row.recorded, recordedOnce: row.once, left: row.left, units: row.units };
}

/**
 * Throws, naming the cell and what went wrong, unless each of the `started` units ran each of its
 * `steps` exactly once by both the ledger and `system`'s own record. graphile-worker deletes a
 * job when it completes, so only its ledger and its empty job table count. Returns the units.
 *
 * @example
 * ```ts
 * await checkExactlyOnce(sql, "pg-boss, single job", "pgboss", 1, 1000);
 * ```
 */
export async function checkExactlyOnce(
  sql: postgres.Sql,
  cell: string,
  system: OwnRecord,
  steps: number,
  started?: number,
): Promise<number> {
  const ledger = await ledgerCounts(sql);
  const own = await ownRecord(sql, system);
  const units = started ?? own.units ?? 0;
  const recorded = own.recorded < 0 ? ledger.rows : own.recorded;
  const recordedOnce = own.recordedOnce < 0 ? ledger.once : own.recordedOnce;
  const wrong = exactlyOnceViolations({
    started: units,
    steps,
    ledgerRows: ledger.rows,
    ledgerOnce: ledger.once,
    ledgerUnits: ledger.units,
    recorded,
    recordedOnce,
    left: own.left,
  });
  if (wrong.length > 0) {
    throw new Error(`exactly-once check of "${cell}" failed: ${wrong.join("; ")}`);
  }
  return units;
}
