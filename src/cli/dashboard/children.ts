/**
 * Child flows in the dashboard's run view: the run, step and task a child run was started for,
 * and the child runs of a parent's child-flow steps, so each links to the other.
 *
 * @module
 */
import type { RunParent, RunStatus } from "../../client/types.ts";
import type { ReadTx } from "./read_only.ts";

/** Child runs listed per run (`get_run` lists up to 1,000 per step; the page shows fewer). */
export const CHILDREN_LISTED = 200;

/** A child run as the run view lists it under its parent. */
export interface ChildLink {
  /** The parent's child-flow step. */
  readonly stepSlug: string;
  /** The task it runs for (a map's element index). */
  readonly taskIndex: number;
  /** The child run. */
  readonly runId: string;
  /** Its status. */
  readonly status: RunStatus;
}

/** A run's links to its parent and children. */
export interface ChildLinks {
  /** The run, step and task this one was started for, or `null`. */
  readonly parent: RunParent | null;
  /** Its child runs by step and task index (at most {@link CHILDREN_LISTED}). */
  readonly children: readonly ChildLink[];
  /** How many child runs it has in all. */
  readonly childCount: number;
}

/**
 * Reads the parent and children of `runId`; none on a database migrated before child flows (the
 * dashboard can be newer than the schema it looks at).
 *
 * @example
 * ```ts
 * import { readOnly } from "./read_only.ts";
 * import { readChildLinks } from "./children.ts";
 *
 * // const links = await readOnly(sql, (tx) => readChildLinks(tx, runId));
 * ```
 */
export async function readChildLinks(tx: ReadTx, runId: string): Promise<ChildLinks> {
  const [{ has }] = await tx<{ has: boolean }[]>`
    select exists (select 1 from pg_attribute
                   where attrelid = 'pgflow.runs'::regclass and attname = 'parent_run_id'
                     and not attisdropped) as has`;
  if (!has) return { parent: null, children: [], childCount: 0 };
  const [own] = await tx<
    { run_id: string | null; step_slug: string | null; task_index: number | null }[]
  >`
    select j ->> 'parent_run_id' as run_id, j ->> 'parent_step_slug' as step_slug,
           (j ->> 'parent_task_index')::int as task_index
    from pgflow.runs r cross join lateral (select to_jsonb(r) - 'input' - 'output' as j) x
    where r.run_id = ${runId}::uuid`;
  // runs_parent_idx holds only child runs, in (parent, step, task) order.
  const rows = await tx<
    { step_slug: string; task_index: number; run_id: string; status: RunStatus; total: number }[]
  >`
    select x.*, (select count(*)::int from pgflow.runs c where c.parent_run_id = ${runId}::uuid) as total
    from (select r.parent_step_slug as step_slug, r.parent_task_index as task_index, r.run_id::text, r.status
          from pgflow.runs r where r.parent_run_id = ${runId}::uuid
          order by r.parent_step_slug, r.parent_task_index limit ${CHILDREN_LISTED}) x`;
  return {
    parent: own?.run_id
      ? {
        runId: own.run_id,
        stepSlug: own.step_slug as string,
        taskIndex: own.task_index as number,
      }
      : null,
    children: rows.map((r) => ({
      stepSlug: r.step_slug,
      taskIndex: r.task_index,
      runId: r.run_id,
      status: r.status,
    })),
    childCount: rows[0]?.total ?? 0,
  };
}
