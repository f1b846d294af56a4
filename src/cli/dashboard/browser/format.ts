/**
 * How the page writes durations, times, ids and counts: short, and the same in every panel.
 *
 * @module
 */
import type { RestartMode } from "../../../client/types.ts";

/**
 * A duration in seconds as a person reads it: `4.2 s`, `37 s`, `12 min`, `3.5 h`; `-` for none.
 *
 * @example
 * ```ts ignore
 * seconds(0.25); // "0.3 s"
 * ```
 */
export function seconds(s: number | null | undefined): string {
  if (s === null || s === undefined) return "-";
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 120) return `${Math.round(s)} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

/**
 * An ISO time as the browser's local time of day with milliseconds (`14:03:07.120`); `-` for none.
 *
 * @example
 * ```ts ignore
 * time("2026-05-01T12:03:07.120Z"); // "14:03:07.120" in Berlin
 * ```
 */
export function time(iso: string | null | undefined): string {
  if (!iso) return "-";
  const d = new Date(iso);
  return `${d.toLocaleTimeString([], { hour12: false })}.${
    String(d.getMilliseconds()).padStart(3, "0")
  }`;
}

/**
 * The duration between two ISO times, as {@link seconds} writes it; `-` unless both are known.
 *
 * @example
 * ```ts ignore
 * between("2026-05-01T12:00:00Z", "2026-05-01T12:00:04Z"); // "4.0 s"
 * ```
 */
export function between(a: string | null, b: string | null): string {
  return a && b ? seconds((new Date(b).getTime() - new Date(a).getTime()) / 1000) : "-";
}

/**
 * The first 8 characters of an id, as the lists show it; `-` for none.
 *
 * @example
 * ```ts ignore
 * shortId("2e9ff349-5f1c-4c3e-9d55-0a6b8f1e2a3b"); // "2e9ff349"
 * ```
 */
export function shortId(id: string | null | undefined): string {
  return id ? id.slice(0, 8) : "-";
}

/**
 * A count with its noun, singular or plural: `1 task`, `2 tasks`.
 *
 * @example
 * ```ts ignore
 * plural(2, "attempt"); // "2 attempts"
 * ```
 */
export function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

/**
 * What a restart did, as a past participle: `retried`, `resumed`.
 *
 * @example
 * ```ts ignore
 * `${restartedVerb("resume")} as run 1a2b3c4d`; // "resumed as run 1a2b3c4d"
 * ```
 */
export function restartedVerb(mode: RestartMode | null): string {
  return mode === "retry" ? "retried" : mode === "resume" ? "resumed" : "restarted";
}
