/**
 * Reads the parts of the guides the docs tests check: fenced code blocks (with their info string)
 * and pipe tables.
 *
 * @module
 */

/** One fenced code block. */
export interface CodeBlock {
  /** The language, the info string's first word (`ts`, `sql`, `sh`, or `""`). */
  readonly lang: string;
  /** The rest of the info string (`ignore`, a file path, a label). */
  readonly attrs: readonly string[];
  /** The block's text, without the fences. */
  readonly code: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
}

/**
 * Every fenced block of a Markdown text, in order.
 *
 * @example
 * ```ts
 * const blocks = codeBlocks("```ts ignore\nx\n```\n");
 * // [{ lang: "ts", attrs: ["ignore"], code: "x\n", line: 1 }]
 * ```
 */
export function codeBlocks(markdown: string): CodeBlock[] {
  const blocks: CodeBlock[] = [];
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^(`{3,})(.*)$/.exec(lines[i]);
    if (open === null) continue;
    const [lang = "", ...attrs] = open[2].trim().split(/\s+/).filter(Boolean);
    const body: string[] = [];
    let j = i + 1;
    while (j < lines.length && !lines[j].startsWith(open[1])) body.push(lines[j++]);
    if (j === lines.length) throw new Error(`line ${i + 1}: code block never closed`);
    blocks.push({ lang, attrs, code: body.map((l) => `${l}\n`).join(""), line: i + 1 });
    i = j;
  }
  return blocks;
}

/** The one block whose info string is exactly `lang attr`; throws when there is not exactly one. */
export function blockNamed(blocks: readonly CodeBlock[], lang: string, attr: string): CodeBlock {
  const found = blocks.filter((b) => b.lang === lang && b.attrs.join(" ") === attr);
  if (found.length !== 1) {
    throw new Error(`expected one \`\`\`${lang} ${attr} block, found ${found.length}`);
  }
  return found[0];
}

/**
 * The rows of every pipe table whose header's first cell is `firstHeader`, as cell arrays with
 * backticks and surrounding spaces removed; the header and separator rows are left out.
 */
export function tableRows(markdown: string, firstHeader: string): string[][] {
  const rows: string[][] = [];
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const header = cells(lines[i]);
    if (header === undefined || header[0] !== firstHeader) continue;
    for (let j = i + 2; j < lines.length; j++) {
      const row = cells(lines[j]);
      if (row === undefined) break;
      rows.push(row);
    }
  }
  return rows;
}

function cells(line: string): string[] | undefined {
  if (!line.startsWith("|")) return undefined;
  return line.replace(/^\|/, "").replace(/\|\s*$/, "").split("|").map((c) =>
    c.trim().replace(/^`([^`]*)`$/, "$1")
  );
}

/** Every relative link target `[text](target)` of a Markdown text (no URLs, no anchors alone). */
export function relativeLinks(markdown: string): string[] {
  const links: string[] = [];
  for (const match of markdown.matchAll(/\]\(([^)\s]+)\)/g)) {
    const target = match[1];
    if (/^[a-z]+:/i.test(target) || target.startsWith("#")) continue;
    links.push(target.replace(/#.*$/, ""));
  }
  return links;
}
