/** Small numeric and formatting helpers for the benchmark tables. */

/** The `p`-th percentile (0..100) of `values` by nearest rank; NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

/** The median of `values`. */
export function median(values: readonly number[]): number {
  return percentile(values, 50);
}

/** A number with `digits` decimals, or "–" when it is not finite. */
export function fixed(value: number, digits = 1): string {
  return Number.isFinite(value) ? value.toFixed(digits) : "–";
}

/** A ratio such as `0.97×`. */
export function ratio(value: number): string {
  return Number.isFinite(value) ? `${value.toFixed(2)}×` : "–";
}

/** A plain-text table: first row is the header, first column left-aligned. */
export function textTable(rows: readonly (readonly string[])[]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r, n) =>
    r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ") +
    (n === 0 ? `\n${widths.map((w) => "-".repeat(w)).join("  ")}` : "")
  ).join("\n");
}

/** A Markdown table: first row is the header. */
export function markdownTable(rows: readonly (readonly string[])[]): string {
  const [head, ...body] = rows;
  return [
    `| ${head.join(" | ")} |`,
    `|${head.map((_, i) => (i === 0 ? "---" : "---:")).join("|")}|`,
    ...body.map((r) => `| ${r.join(" | ")} |`),
  ].join("\n");
}
