/**
 * One run's steps as a graph: columns by depth, a box per step with its name, state, time and
 * attempts, arrows from each dependency. Each column is as wide as its longest text (within
 * bounds; longer text is cut with `…`, whole in the box's tooltip), so no text runs out of its box.
 *
 * @module
 */
import type { RunStep } from "../run_view.ts";
import { svg } from "./dom.ts";
import { plural, seconds } from "./format.ts";

/** The fonts of the boxes' lines, as the style sheet sets them (`svg.dag text`, `text.sub`). */
const NAME_FONT = "12px system-ui, sans-serif";
const SUB_FONT = "11px system-ui, sans-serif";
const MIN_W = 150, MAX_W = 320, PAD_X = 8, GX = 50, GY = 16, PAD = 10;
// Text measured in a canvas may differ from the SVG's by a pixel or two.
const SLACK = 4;

let context: CanvasRenderingContext2D | null | undefined;

function textWidth(text: string, font: string): number {
  context ??= document.createElement("canvas").getContext("2d");
  if (!context) return text.length * 8;
  context.font = font;
  return context.measureText(text).width;
}

/** `text`, cut with `…` to fit `width`. */
function fit(text: string, font: string, width: number): string {
  if (textWidth(text, font) <= width) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (textWidth(`${text.slice(0, mid)}…`, font) <= width) lo = mid;
    else hi = mid - 1;
  }
  return `${text.slice(0, lo)}…`;
}

/**
 * How often a step's tasks were tried, when worth saying: a single task tried more than once
 * (`3 attempts`), a map's tasks (`2 tasks, 1 attempt each`, `4 tasks, up to 3 attempts`).
 *
 * @example
 * ```ts ignore
 * attemptsText({ stepType: "map", tasks: 2, minAttempts: 1, maxAttempts: 1, … }); // "2 tasks, 1 attempt each"
 * ```
 */
export function attemptsText(
  s: Pick<RunStep, "stepType" | "tasks" | "minAttempts" | "maxAttempts">,
): string {
  if (s.stepType !== "map" && s.tasks <= 1) {
    return s.maxAttempts > 1 ? plural(s.maxAttempts, "attempt") : "";
  }
  const tasks = plural(s.tasks, "task");
  if (s.maxAttempts === 0) return tasks;
  if (s.minAttempts !== s.maxAttempts) return `${tasks}, up to ${plural(s.maxAttempts, "attempt")}`;
  return `${tasks}, ${plural(s.maxAttempts, "attempt")}${s.tasks > 1 ? " each" : ""}`;
}

/** The lines of a step's box: its name, its state and time, how often it was tried. */
function lines(s: RunStep): [string, string, string] {
  return [
    (s.stepType === "map" ? "[map] " : "") + s.stepSlug,
    s.status + (s.reused ? " · reused" : "") +
    (s.seconds === null ? "" : ` · ${seconds(s.seconds)}`),
    attemptsText(s),
  ];
}

/**
 * The graph of a run's steps. An edge that skips columns passes each column in between through a
 * slot of its own below that column's boxes, and crosses between columns in the gaps: it never
 * runs under a box that is not one of its ends.
 *
 * @example
 * ```ts ignore
 * panel.appendChild(dag(run.steps));
 * ```
 */
export function dag(steps: readonly RunStep[]): SVGElement {
  const level = new Map<string, number>();
  for (const s of steps) {
    level.set(s.stepSlug, s.deps.reduce((m, d) => Math.max(m, (level.get(d) ?? 0) + 1), 0));
  }
  const text = new Map(steps.map((s) => [s.stepSlug, lines(s)]));
  const third = steps.some((s) => text.get(s.stepSlug)![2] !== "");
  const H = third ? 62 : 46;
  const maxLevel = Math.max(0, ...level.values());
  const widths: number[] = Array(maxLevel + 1).fill(MIN_W);
  for (const s of steps) {
    const [head, sub, tries] = text.get(s.stepSlug)!;
    const need = Math.max(
      textWidth(head, NAME_FONT),
      textWidth(sub, SUB_FONT),
      textWidth(tries, SUB_FONT),
    ) + 2 * PAD_X + SLACK;
    const l = level.get(s.stepSlug)!;
    widths[l] = Math.min(MAX_W, Math.max(widths[l], Math.ceil(need)));
  }
  const colX = (l: number) => PAD + widths.slice(0, l).reduce((a, w) => a + w + GX, 0);
  const rowY = (r: number) => PAD + r * (H + GY);

  const rows = new Map<number, number>();
  const pos = new Map<string, { x: number; y: number; w: number }>();
  const nextRow = (l: number) => {
    const r = rows.get(l) ?? 0;
    rows.set(l, r + 1);
    return r;
  };
  for (const s of steps) {
    const l = level.get(s.stepSlug)!;
    pos.set(s.stepSlug, { x: colX(l), y: rowY(nextRow(l)), w: widths[l] });
  }
  const edges: { from: string; to: string; via: { x: number; y: number; w: number }[] }[] = [];
  for (const s of steps) {
    for (const d of s.deps) {
      if (!pos.has(d)) continue;
      const via = [];
      for (let l = level.get(d)! + 1; l < level.get(s.stepSlug)!; l++) {
        via.push({ x: colX(l), y: rowY(nextRow(l)) + H / 2, w: widths[l] });
      }
      edges.push({ from: d, to: s.stepSlug, via });
    }
  }
  const maxRow = Math.max(0, ...rows.values()) - 1;
  const width = colX(maxLevel) + widths[maxLevel] + PAD;
  const height = rowY(Math.max(0, maxRow)) + H + PAD;
  const box = svg("svg", {
    class: "dag",
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
  });
  box.appendChild(svg("title", {}, "the run's steps and their dependencies"));
  const marker = svg("marker", {
    id: "arrow",
    viewBox: "0 0 8 8",
    refX: 8,
    refY: 4,
    markerWidth: 8,
    markerHeight: 8,
    orient: "auto",
  });
  marker.appendChild(svg("path", { d: "M0,0 L8,4 L0,8 z" }));
  box.appendChild(svg("defs")).appendChild(marker);
  const curve = (x1: number, y1: number, x2: number, y2: number) => {
    const mx = (x1 + x2) / 2;
    return ` C${mx},${y1} ${mx},${y2} ${x2},${y2}`;
  };
  for (const e of edges) {
    const a = pos.get(e.from)!, b = pos.get(e.to)!;
    let x = a.x + a.w, y = a.y + H / 2, d = `M${x},${y}`;
    for (const v of e.via) {
      d += `${curve(x, y, v.x, v.y)} L${v.x + v.w},${v.y}`;
      x = v.x + v.w;
      y = v.y;
    }
    d += curve(x, y, b.x, b.y + H / 2);
    box.appendChild(svg("path", {
      class: "edge",
      "marker-end": "url(#arrow)",
      d,
      "data-from": e.from,
      "data-to": e.to,
    }));
  }
  for (const s of steps) {
    const p = pos.get(s.stepSlug)!;
    const [head, sub, tries] = text.get(s.stepSlug)!;
    const room = p.w - 2 * PAD_X;
    const g = svg("g", {
      class: `node node-${s.status}${s.reused ? " reused" : ""}`,
      "data-step": s.stepSlug,
      "data-status": s.status,
      transform: `translate(${p.x},${p.y})`,
    });
    const why = s.error ?? (s.skipReason === null ? "" : `skipped: ${s.skipReason}`);
    g.appendChild(svg(
      "title",
      {},
      [head, sub, tries].filter(Boolean).join(" · ") +
        (why ? ` — ${why}` : ""),
    ));
    g.appendChild(svg("rect", { width: p.w, height: H }));
    g.appendChild(svg("text", { x: PAD_X, y: 18 }, fit(head, NAME_FONT, room)));
    g.appendChild(svg("text", { x: PAD_X, y: 35, class: "sub" }, fit(sub, SUB_FONT, room)));
    if (tries) {
      g.appendChild(svg("text", { x: PAD_X, y: 51, class: "sub" }, fit(tries, SUB_FONT, room)));
    }
    box.appendChild(g);
  }
  return box;
}
