/**
 * A unified line diff of two texts, for drift reports: a one-word change in a 300-line function
 * prints the few lines around it, not both bodies.
 *
 * @module
 */

/** Options of {@link lineDiff}. */
export interface LineDiffOptions {
  /** Unchanged lines shown around each change; default 2. */
  context?: number;
  /** Label of the first text (its lines start with `-`). */
  aName?: string;
  /** Label of the second text (its lines start with `+`). */
  bName?: string;
}

/**
 * The lines that differ between `a` and `b`, in unified-diff form (`@@ -line,count +line,count @@`
 * hunks); empty when the texts are equal. Quadratic in the line counts, which is fine for function
 * bodies of a few hundred lines.
 *
 * @example
 * ```ts
 * lineDiff("a\nb\nc", "a\nB\nc", { aName: "schemas", bName: "migrations" });
 * // "--- schemas\n+++ migrations\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c"
 * ```
 */
export function lineDiff(a: string, b: string, options: LineDiffOptions = {}): string {
  if (a === b) return "";
  const context = options.context ?? 2;
  const x = a.split("\n");
  const y = b.split("\n");
  // lcs[i][j]: length of the longest common subsequence of x[i..] and y[j..].
  const lcs = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
  for (let i = x.length - 1; i >= 0; i--) {
    for (let j = y.length - 1; j >= 0; j--) {
      lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  // Each line with its kind and its line numbers on both sides (1-based, of the next line there).
  const ops: { kind: " " | "-" | "+"; text: string; ai: number; bi: number }[] = [];
  let i = 0;
  let j = 0;
  while (i < x.length || j < y.length) {
    if (i < x.length && j < y.length && x[i] === y[j]) {
      ops.push({ kind: " ", text: x[i], ai: i++, bi: j++ });
    } else if (i < x.length && (j === y.length || lcs[i + 1][j] >= lcs[i][j + 1])) {
      ops.push({ kind: "-", text: x[i], ai: i++, bi: j });
    } else {
      ops.push({ kind: "+", text: y[j], ai: i, bi: j++ });
    }
  }
  const out = [`--- ${options.aName ?? "a"}`, `+++ ${options.bName ?? "b"}`];
  let k = 0;
  while (k < ops.length) {
    if (ops[k].kind === " ") {
      k++;
      continue;
    }
    // A hunk: from `context` lines before this change to `context` lines after the last change
    // that is at most 2 * context unchanged lines away.
    const start = Math.max(0, k - context);
    let end = k;
    for (let m = k; m < ops.length; m++) {
      if (ops[m].kind !== " ") end = m;
      else if (m - end > 2 * context) break;
    }
    const stop = Math.min(ops.length, end + context + 1);
    const hunk = ops.slice(start, stop);
    const aCount = hunk.filter((o) => o.kind !== "+").length;
    const bCount = hunk.filter((o) => o.kind !== "-").length;
    const aStart = aCount ? hunk[0].ai + 1 : hunk[0].ai;
    const bStart = bCount ? hunk[0].bi + 1 : hunk[0].bi;
    out.push(`@@ -${aStart},${aCount} +${bStart},${bCount} @@`);
    for (const o of hunk) out.push(`${o.kind}${o.text}`);
    k = stop;
  }
  return out.join("\n");
}
