/**
 * The soak's flows (tests/edge/soak.ts), run by the functions soak_a (queue edge_a) and soak_b
 * (queue edge_b) in the runtime stand-in. Two versions of a fan-out flow spread over both queues,
 * and a storm flow whose task fails on its first two attempts (a storm of failing tasks for the
 * log-rate check). Every handler first records its execution in `public.edge_exec`: the task, the
 * attempt (read from the task row in the same statement), the isolate it ran in, and whether the
 * isolate's `beforeunload` had been dispatched when it started (read before any await).
 *
 * @module
 */
import { Flow, routeFlow } from "../../../../mod.ts";

interface StandIn {
  readonly isolateId: string;
  readonly unloadReason: string | undefined;
}

interface Ctx {
  readonly sql: import("../../../../src/platform/types.ts").Sql;
  readonly stepTask: {
    readonly run_id: string;
    readonly step_slug: string;
    readonly task_index: number;
  };
}

/** Memory kept by `work` handlers, so an isolate that runs many of them reaches its memory limit. */
const kept: Uint8Array[] = [];

function burn(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) Math.sqrt(Math.random());
}

/** Records this execution; returns whether the handler must fail (storm: attempts 1 and 2). */
async function record(ctx: Ctx, failFirst = 0): Promise<boolean> {
  const standIn = (globalThis as { __edgeStandIn?: StandIn }).__edgeStandIn;
  const late = standIn?.unloadReason !== undefined;
  const t = ctx.stepTask;
  const [row] = await ctx.sql<{ failed: boolean }[]>`
    insert into public.edge_exec (run_id, step_slug, task_index, attempt, isolate, late, failed)
    select t.run_id, t.step_slug, t.task_index, t.attempts_count, ${standIn?.isolateId ?? "none"},
           ${late}, t.attempts_count <= ${failFirst}
    from pgflow.step_tasks t
    where t.run_id = ${t.run_id}::uuid and t.step_slug = ${t.step_slug}
      and t.task_index = ${t.task_index}
    returning failed`;
  return row?.failed ?? false;
}

function soakFlow(slug: string) {
  return new Flow<{ n: number }>({ slug, maxAttempts: 5, baseDelay: 1, timeout: 3 })
    .array({ slug: "split" }, async (input, ctx) => {
      await record(ctx as unknown as Ctx);
      return Array.from({ length: input.n }, (_, i) => i);
    })
    .map({ slug: "work", array: "split" }, async (item, ctx) => {
      await record(ctx as unknown as Ctx);
      burn(5);
      kept.push(new Uint8Array(512 * 1024).fill(item + 1));
      return item * 2;
    })
    .step({ slug: "total", dependsOn: ["work"] }, async (deps, ctx) => {
      await record(ctx as unknown as Ctx);
      burn(40);
      return deps.work.reduce((a, b) => a + b, 0);
    });
}

/** Version 1: split and total on edge_a, the map on edge_b. */
export const soakV1 = routeFlow(soakFlow("edge_soak_v1"), {
  queues: { split: "edge_a", work: "edge_b", total: "edge_a" },
});

/** Version 2: the mirror image. */
export const soakV2 = routeFlow(soakFlow("edge_soak_v2"), {
  queues: { split: "edge_b", work: "edge_a", total: "edge_b" },
});

/** The storm: one task on edge_a that fails its first two attempts. */
export const storm = routeFlow(
  new Flow<{ n: number }>({ slug: "edge_storm_v1", maxAttempts: 6, baseDelay: 1, timeout: 3 })
    .step({ slug: "flaky" }, async (_input, ctx) => {
      if (await record(ctx as unknown as Ctx, 2)) {
        throw new Error("storm: this attempt fails on purpose");
      }
      return "ok";
    }),
  { queues: { flaky: "edge_a" } },
);

/** The execution log's table. */
export const EXEC_TABLE = `
  create table if not exists public.edge_exec (
    run_id uuid not null, step_slug text not null, task_index integer not null,
    attempt integer not null, isolate text not null, late boolean not null, failed boolean not null,
    at timestamptz not null default clock_timestamp()
  )`;
