/**
 * Released migrations never change: `supabase/migrations.sha256` lists each with its checksum, and
 * this test fails, naming the file, when one is changed or removed (see docs/upgrade.md).
 */
import assert from "node:assert/strict";
import {
  checkReleasedMigrations,
  MANIFEST_PATH,
  readManifest,
  releaseDrafts,
} from "../../local/manifest.ts";
import { MIGRATIONS_DIR } from "../../local/db_push.ts";

/** A copy of the migrations folder and its manifest. */
async function copy(): Promise<{ dir: string; manifest: string; root: string }> {
  const root = await Deno.makeTempDir({ prefix: "pgflow-manifest-" });
  const dir = `${root}/migrations`;
  await Deno.mkdir(dir);
  for await (const entry of Deno.readDir(MIGRATIONS_DIR)) {
    if (entry.isFile) await Deno.copyFile(`${MIGRATIONS_DIR}${entry.name}`, `${dir}/${entry.name}`);
  }
  const manifest = `${root}/migrations.sha256`;
  await Deno.copyFile(MANIFEST_PATH, manifest);
  return { dir, manifest, root };
}

/** The baseline of 0.1.0: released, so later changes are new migrations. */
const BASELINE = (await readManifest(MANIFEST_PATH))[0]?.file ?? "no released migration";

Deno.test("every released migration is present and unchanged; the baseline is released", async () => {
  const check = await checkReleasedMigrations();
  assert.deepEqual(check.problems, [], check.problems.join("\n"));
  assert.match(BASELINE, /^\d{14}_pgflow_base\.sql$/);
  assert.equal(check.released[0], BASELINE);
});

Deno.test("a changed released migration is named, with what to do instead", async () => {
  const { dir, manifest, root } = await copy();
  try {
    await Deno.writeTextFile(`${dir}/${BASELINE}`, "\n-- one more line\n", { append: true });
    const { problems } = await checkReleasedMigrations(dir, manifest);
    assert.equal(problems.length, 1, problems.join("\n"));
    assert.match(problems[0], new RegExp(`${BASELINE} is released and was changed`));
    assert.match(problems[0], /new migration instead: deno task migration:new/);
    // Line endings are not a change.
    const text = await Deno.readTextFile(`${MIGRATIONS_DIR}${BASELINE}`);
    await Deno.writeTextFile(`${dir}/${BASELINE}`, text.replaceAll("\n", "\r\n"));
    assert.deepEqual((await checkReleasedMigrations(dir, manifest)).problems, []);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("a removed released migration is named", async () => {
  const { dir, manifest, root } = await copy();
  try {
    await Deno.remove(`${dir}/${BASELINE}`);
    const { problems } = await checkReleasedMigrations(dir, manifest);
    assert.equal(problems.length, 1, problems.join("\n"));
    assert.match(problems[0], new RegExp(`${BASELINE} is released .* but is missing`));
    assert.match(problems[0], /new migration instead/);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("an unlisted migration is a draft only after every released one", async () => {
  const { dir, manifest, root } = await copy();
  try {
    await Deno.writeTextFile(`${dir}/20200101000000_sneaked_in.sql`, "select 1;\n");
    await Deno.writeTextFile(`${dir}/29990101000000_next.sql`, "select 1;\n");
    const check = await checkReleasedMigrations(dir, manifest);
    assert.equal(check.problems.length, 1, check.problems.join("\n"));
    assert.match(
      check.problems[0],
      /20200101000000_sneaked_in\.sql is not released .* comes before the released .*pgflow_base/,
    );
    assert.ok(check.drafts.includes("29990101000000_next.sql"), check.drafts.join(", "));
    // A draft may still change.
    await Deno.writeTextFile(`${dir}/29990101000000_next.sql`, "select 2;\n");
    assert.ok(
      (await checkReleasedMigrations(dir, manifest)).drafts.includes("29990101000000_next.sql"),
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("releasing lists every draft, which then may not change", async () => {
  const { dir, manifest, root } = await copy();
  try {
    const before = (await checkReleasedMigrations(dir, manifest)).drafts;
    await Deno.writeTextFile(`${dir}/29990101000000_next.sql`, "select 1;\n");
    assert.deepEqual(await releaseDrafts(dir, manifest), [...before, "29990101000000_next.sql"]);
    assert.deepEqual(await releaseDrafts(dir, manifest), [], "nothing left to release");
    const entries = await readManifest(manifest);
    assert.ok(entries.some((e) => e.file === "29990101000000_next.sql"));
    assert.deepEqual(entries.map((e) => e.file), entries.map((e) => e.file).sort(), "sorted");
    await Deno.writeTextFile(`${dir}/29990101000000_next.sql`, "select 2;\n");
    const { problems } = await checkReleasedMigrations(dir, manifest);
    assert.match(problems.join("\n"), /29990101000000_next\.sql is released and was changed/);
    await assert.rejects(() => releaseDrafts(dir, manifest), /cannot release while/);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("a malformed manifest line is an error naming the line", async () => {
  const { dir, manifest, root } = await copy();
  try {
    await Deno.writeTextFile(manifest, "not a checksum  x.sql\n", { append: true });
    await assert.rejects(
      () => checkReleasedMigrations(dir, manifest),
      /migrations\.sha256:2 is not "<sha256> {2}<file>\.sql"/,
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
