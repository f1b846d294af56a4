import { FlowDefinitionError } from "./errors.ts";

/** The longest slug SQL accepts (`pgflow.is_valid_slug`). */
export const MAX_SLUG_LENGTH = 128;

/**
 * Letters and digits in groups joined by single underscores, starting with a letter. This one
 * expression encodes "no leading or trailing `_`" and "no `__`", exactly like the SQL check.
 */
const SLUG_PATTERN = /^[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*$/;

/** Reserved because dependent step inputs once carried a `run` key; SQL still refuses it. */
const RESERVED_SLUGS: ReadonlySet<string> = new Set(["run"]);

/**
 * Suggests a slug close to `value` that passes {@link validateSlug}, so error messages can say
 * what to write instead.
 */
function suggestSlug(value: string): string {
  const cleaned = value
    .replace(/[^A-Za-z0-9]+/g, "_")
    .replace(/_+/g, "_")
    .replace(/^[^A-Za-z]+/, "")
    .replace(/_+$/, "")
    .slice(0, MAX_SLUG_LENGTH)
    .replace(/_+$/, "");
  if (cleaned === "" || RESERVED_SLUGS.has(cleaned)) return `${cleaned || "step"}_1`;
  return cleaned;
}

/**
 * Checks a flow or step slug against the same rules as SQL's `pgflow.is_valid_slug`: 1 to 128
 * characters of letters, digits and single underscores, starting with a letter, not ending with
 * `_`, and not the reserved word `run`. Throws a {@link FlowDefinitionError} that names the value
 * and suggests a valid spelling.
 *
 * @param slug the slug to check
 * @param what what the slug names, used in the error message (for example `"step slug"`)
 * @example
 * ```ts
 * import { validateSlug } from "@pgflow/shared";
 *
 * validateSlug("thread_triage_v1"); // ok
 * try {
 *   validateSlug("thread-triage");
 * } catch (error) {
 *   console.log((error as Error).message); // ... write "thread_triage" instead
 * }
 * ```
 */
export function validateSlug(slug: string, what: string = "slug"): void {
  if (typeof slug !== "string") {
    throw new FlowDefinitionError(
      `${what} must be a string, got ${typeof slug}; write a name such as "process_order"`,
    );
  }
  if (slug.length === 0) {
    throw new FlowDefinitionError(
      `${what} is empty; write a name such as "process_order" (a letter first, then letters, digits or single underscores)`,
    );
  }
  if (slug.length > MAX_SLUG_LENGTH) {
    throw new FlowDefinitionError(
      `${what} "${slug.slice(0, 40)}..." is ${slug.length} characters long; ` +
        `the limit is ${MAX_SLUG_LENGTH}, so shorten it, e.g. "${suggestSlug(slug)}"`,
    );
  }
  if (RESERVED_SLUGS.has(slug)) {
    throw new FlowDefinitionError(
      `${what} "${slug}" is reserved; pick another name, e.g. "${slug}_step"`,
    );
  }
  if (!SLUG_PATTERN.test(slug)) {
    throw new FlowDefinitionError(
      `${what} "${slug}" is invalid: use letters, digits and single underscores, starting with a ` +
        `letter and not ending with "_"; write "${suggestSlug(slug)}" instead`,
    );
  }
}
