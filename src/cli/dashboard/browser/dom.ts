/**
 * The page's building blocks. Every value from the database becomes a text node
 * (`createTextNode`, `textContent`), in HTML and in SVG alike, never markup: a step output or an
 * error holding `<script>` shows as those characters.
 *
 * @module
 */
import { openRun, runHref } from "./nav.ts";
import { shortId } from "./format.ts";

/** What a cell or an element holds: text, a number, elements, or nothing; nested lists flatten. */
export type Content = string | number | Node | null | undefined | readonly Content[];

/** The attributes {@link el} sets. */
export interface Props {
  /** The `class` attribute. */
  readonly className?: string;
  /** The tooltip. */
  readonly title?: string;
  /** A link's target (same page: `#…`). */
  readonly href?: string;
  /** Called on a click. */
  readonly onclick?: (event: MouseEvent) => void;
  /** `data-*` attributes, by their dataset name. */
  readonly data?: Readonly<Record<string, string | number>>;
}

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * An HTML element with its props and children.
 *
 * @example
 * ```ts ignore
 * el("p", { className: "empty" }, "No runs yet.");
 * ```
 */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  children?: Content,
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  const element: HTMLElement = node;
  if (props.className) node.className = props.className;
  if (props.title) node.title = props.title;
  if (props.href && node instanceof HTMLAnchorElement) node.href = props.href;
  if (props.onclick) element.addEventListener("click", props.onclick);
  for (const [k, v] of Object.entries(props.data ?? {})) node.dataset[k] = String(v);
  append(node, children);
  return node;
}

/**
 * Appends `children` to `node`, strings and numbers as text nodes.
 *
 * @example
 * ```ts ignore
 * append(document.body, ["run ", el("code", {}, runId)]);
 * ```
 */
export function append(node: Node, children: Content): void {
  if (children === null || children === undefined) return;
  if (Array.isArray(children)) {
    for (const c of children as readonly Content[]) append(node, c);
  } else if (typeof children === "string" || typeof children === "number") {
    node.appendChild(document.createTextNode(String(children)));
  } else {
    node.appendChild(children as Node);
  }
}

/**
 * An SVG element with its attributes and, optionally, its text.
 *
 * @example
 * ```ts ignore
 * svg("text", { x: 8, y: 18 }, stepSlug);
 * ```
 */
export function svg(
  tag: string,
  attrs: Readonly<Record<string, string | number>> = {},
  text?: string | number,
): SVGElement {
  const node = document.createElementNS(SVG_NS, tag) as SVGElement;
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

/**
 * A coloured status word (`.s-<status>` in the style sheet).
 *
 * @example
 * ```ts ignore
 * badge("failed");
 * ```
 */
export function badge(status: string): HTMLSpanElement {
  return el("span", { className: `badge s-${status}` }, status);
}

// Where a name may wrap: after `_`, `.`, `/` or `-`, and between a lower-case letter or digit and
// an upper-case one (`send|Receipt`).
const NAME_BREAK = /(?<=[_./-])|(?<=[a-z0-9])(?=[A-Z])/;

// Names up to this long never wrap: cut in two, a short name reads worse than the room it saves.
const SHORT_NAME = 24;

/**
 * A name (flow, step, queue, function, alias) that never breaks inside a part: a long one wraps
 * only between its parts (`dash_browser_customer_` / `onboarding`), a short one not at all.
 *
 * @example
 * ```ts ignore
 * name("dash_browser_customer_onboarding");
 * ```
 */
export function name(text: string): HTMLSpanElement {
  const span = el("span", { className: "name" });
  const parts = text.length <= SHORT_NAME ? [text] : text.split(NAME_BREAK);
  parts.forEach((part, i) => {
    if (i > 0) span.appendChild(document.createElement("wbr"));
    span.appendChild(document.createTextNode(part));
  });
  return span;
}

/**
 * Text that may wrap at its spaces (the cells of a table do not wrap otherwise).
 *
 * @example
 * ```ts ignore
 * prose("1 MISSING, 2 ok");
 * ```
 */
export function prose(text: string): HTMLSpanElement {
  return el("span", { className: "prose" }, text);
}

/**
 * A link to a run, showing its short id; it opens the run (not the row it sits in).
 *
 * @example
 * ```ts ignore
 * ["retried as run ", runLink(restart.runId)];
 * ```
 */
export function runLink(runId: string): HTMLAnchorElement {
  return el("a", {
    href: runHref(runId),
    data: { run: runId },
    onclick: (e) => {
      e.preventDefault();
      e.stopPropagation();
      openRun(runId);
    },
  }, shortId(runId));
}

/**
 * Replaces the content of the panel `#<id> .body`.
 *
 * @example
 * ```ts ignore
 * fill("runs", el("p", { className: "empty" }, "No runs yet."));
 * ```
 */
export function fill(id: string, content: Content): void {
  const body = document.querySelector(`#${id} .body`);
  if (body === null) return;
  body.replaceChildren();
  append(body, content);
}

/** A column of {@link table}: its header, and whether it holds numbers (right-aligned). */
export interface Column {
  /** The header. */
  readonly head: string;
  /** Numbers: header and cells aligned right, so the digits line up under the header's end. */
  readonly numeric: boolean;
}

/**
 * A column of numbers.
 *
 * @example
 * ```ts ignore
 * table(["queue", num("messages")], rows);
 * ```
 */
export function num(head: string): Column {
  return { head, numeric: true };
}

/** One row of {@link table}. */
export interface Row {
  /** Its cells, one per column. */
  readonly cells: readonly Content[];
  /** `data-*` attributes of the row. */
  readonly data?: Readonly<Record<string, string | number>>;
  /** The run a click on the row opens. */
  readonly runId?: string;
}

/**
 * A table with a header row; a header and its cells share their alignment (numbers right, the
 * rest left).
 *
 * @example
 * ```ts ignore
 * table(["flow", num("runs")], [{ cells: [name("order_v2"), 3] }]);
 * ```
 */
export function table(columns: readonly (string | Column)[], rows: readonly Row[]): HTMLElement {
  const cols = columns.map((c) => typeof c === "string" ? { head: c, numeric: false } : c);
  const align = (c: Column) => c.numeric ? "num" : "";
  return el("table", {}, [
    el("thead", {}, el("tr", {}, cols.map((c) => el("th", { className: align(c) }, c.head)))),
    el(
      "tbody",
      {},
      rows.map((r) => {
        const runId = r.runId;
        return el("tr", {
          className: runId ? "link" : "",
          data: r.data,
          onclick: runId ? () => openRun(runId) : undefined,
        }, r.cells.map((c, i) => el("td", { className: cols[i] ? align(cols[i]) : "" }, c)));
      }),
    ),
  ]);
}

/**
 * `build()` when there are rows, else a grey line saying there are none.
 *
 * @example
 * ```ts ignore
 * orEmpty(o.failures, () => table(…), "No failures.");
 * ```
 */
export function orEmpty(
  rows: readonly unknown[],
  build: () => Content,
  emptyText: string,
): Content {
  return rows.length ? build() : el("p", { className: "empty" }, emptyText);
}
