/**
 * Repeated scenarios: each round runs every scenario once, in turn, and the tables show the median
 * across rounds with the spread (lowest–highest), so one noisy repetition cannot make a figure.
 */
import { fixed, median } from "./stats.ts";

/** A figure measured once per round. */
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly n: number;
}

/** The median and spread of `values` (NaN entries are dropped). */
export function spread(values: readonly number[]): Spread {
  const v = values.filter(Number.isFinite);
  return {
    median: median(v),
    min: v.length ? Math.min(...v) : NaN,
    max: v.length ? Math.max(...v) : NaN,
    n: v.length,
  };
}

/** `655 (584–702)`: the median and, with more than one round, the spread. */
export function spreadCell(s: Spread, digits = 1): string {
  if (s.n <= 1) return fixed(s.median, digits);
  return `${fixed(s.median, digits)} (${fixed(s.min, digits)}–${fixed(s.max, digits)})`;
}

/** Collects one result per round under a name, keeping the first-seen order of names. */
export class Rounds<T> {
  readonly #byName = new Map<string, T[]>();

  /** Adds one round's result of scenario `name`. */
  add(name: string, result: T): void {
    let list = this.#byName.get(name);
    if (list === undefined) this.#byName.set(name, list = []);
    list.push(result);
  }

  /** Every scenario's results, in first-seen order. */
  entries(): [string, T[]][] {
    return [...this.#byName.entries()];
  }
}

/** Per numeric field of `T`, the spread across `results`. */
export function combine<T extends object>(
  results: readonly T[],
): { [K in keyof T]: T[K] extends number ? Spread : T[K] } {
  const rows = results as unknown as Record<string, unknown>[];
  const first = rows[0];
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(first)) {
    out[key] = typeof first[key] === "number"
      ? spread(rows.map((r) => r[key] as number))
      : first[key];
  }
  return out as { [K in keyof T]: T[K] extends number ? Spread : T[K] };
}
