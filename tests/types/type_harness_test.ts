// Runs the type tests: `deno check` over every `*.types.ts` file in this folder must pass with no
// error at all (an unused `@ts-expect-error`, TS2578, is an error too, so a negative check that
// stops failing is caught). A canary that must fail proves the harness still detects errors.
import assert from "node:assert/strict";
import { fileURLToPath as fromFileUrl } from "node:url";

const here = new URL(".", import.meta.url);
const config = fromFileUrl(new URL("../../deno.json", import.meta.url));

interface CheckResult {
  readonly success: boolean;
  readonly output: string;
}

async function denoCheck(files: readonly string[]): Promise<CheckResult> {
  const command = new Deno.Command(Deno.execPath(), {
    args: ["check", "--config", config, ...files],
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  });
  const { success, stdout, stderr } = await command.output();
  const decoder = new TextDecoder();
  return { success, output: decoder.decode(stdout) + decoder.decode(stderr) };
}

async function typeTestFiles(): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(here)) {
    if (entry.isFile && entry.name.endsWith(".types.ts")) {
      files.push(fromFileUrl(new URL(entry.name, here)));
    }
  }
  return files.sort();
}

Deno.test("type tests: every *.types.ts file passes deno check, with no unused @ts-expect-error", async () => {
  const files = await typeTestFiles();
  assert.ok(files.length >= 2, `expected type test files in ${fromFileUrl(here)}`);
  const { success, output } = await denoCheck(files);
  assert.doesNotMatch(output, /TS2578/, `an @ts-expect-error is unused:\n${output}`);
  assert.doesNotMatch(output, /\bTS\d{4}\b/, `type errors:\n${output}`);
  assert.ok(success, `deno check failed:\n${output}`);
});

Deno.test("type tests: the canary fails, with a type error and an unused @ts-expect-error", async () => {
  const dir = await Deno.makeTempDir({ prefix: "pgflow_type_canary_" });
  try {
    const canary = `${dir}/canary.ts`;
    await Deno.copyFile(new URL("canary.ts.txt", here), canary);
    const { success, output } = await denoCheck([canary]);
    assert.equal(
      success,
      false,
      `the canary passed deno check, so the harness is blind:\n${output}`,
    );
    assert.match(output, /TS2322/, `the canary's type error was not reported:\n${output}`);
    assert.match(
      output,
      /TS2578/,
      `the canary's unused @ts-expect-error was not reported:\n${output}`,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
