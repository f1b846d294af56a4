/**
 * The DSL bounds every numeric option by the one shared table, tests/fixtures/option_bounds.json
 * (SQL is tested against the same table in tests/sql/option_bounds_test.ts).
 */
import assert from "node:assert/strict";
import { Flow } from "../../src/dsl/flow.ts";
import { FlowDefinitionError } from "../../src/dsl/errors.ts";
import { OPTION_BOUNDS } from "../../src/dsl/options.ts";

interface Bounds {
  readonly min: number;
  readonly max: number;
}
const fixture: {
  readonly bounds: Readonly<Record<string, Bounds>>;
  readonly cases: readonly { option: string; value: number; accepted: boolean }[];
} = JSON.parse(
  await Deno.readTextFile(new URL("../fixtures/option_bounds.json", import.meta.url)),
);

/** Every case the table implies: each end, one past each end, and the listed cases. */
function cases(): { option: string; value: number; accepted: boolean }[] {
  const all = [...fixture.cases];
  for (const [option, { min, max }] of Object.entries(fixture.bounds)) {
    all.push(
      { option, value: min - 1, accepted: false },
      { option, value: min, accepted: true },
      { option, value: max, accepted: true },
      { option, value: max + 1, accepted: false },
    );
  }
  return all;
}

function accepts(option: string, value: number, where: "flow" | "step"): boolean {
  try {
    if (where === "flow") new Flow({ slug: "bounded", [option]: value });
    else new Flow({ slug: "bounded" }).step({ slug: "a", [option]: value }, () => 1);
    return true;
  } catch (error) {
    assert.ok(error instanceof FlowDefinitionError, String(error));
    assert.ok(
      error.message.includes(`${option} is ${value}`) &&
        error.message.includes(
          `between ${fixture.bounds[option].min} and ${fixture.bounds[option].max}`,
        ),
      error.message,
    );
    return false;
  }
}

Deno.test("the DSL's bounds are the shared table", () => {
  assert.deepEqual(
    JSON.parse(JSON.stringify(OPTION_BOUNDS)),
    fixture.bounds,
    "src/dsl/options.ts OPTION_BOUNDS and tests/fixtures/option_bounds.json must not drift",
  );
});

Deno.test("every option accepts exactly its bounds, on flows and on steps", () => {
  for (const c of cases()) {
    assert.equal(accepts(c.option, c.value, "step"), c.accepted, `step ${c.option}=${c.value}`);
    if (c.option !== "startDelay") {
      assert.equal(accepts(c.option, c.value, "flow"), c.accepted, `flow ${c.option}=${c.value}`);
    }
  }
});
