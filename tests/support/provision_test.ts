/**
 * The test command provisions PgBouncer and Chromium (local/provision.ts): a missing program is
 * installed with apt-get when the run is root (update once and retry on a first failure), its output
 * kept in a log file and one line printed; otherwise, and for the tests that need it, the message
 * names the exact install command. apt-get is a stub script here (the real one would change the
 * machine); the programs are fake binaries in a temporary folder.
 */
import assert from "node:assert/strict";
import { installCommand, type Program, provision } from "../../local/provision.ts";

async function setup() {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-provision-test-" });
  const program: Program = {
    name: "Fakeprog",
    aptPackage: "fakeprog",
    neededBy: "the fake tests",
    find: () => {
      try {
        return Deno.statSync(`${dir}/bin/fakeprog`).isFile ? `${dir}/bin/fakeprog` : undefined;
      } catch {
        return undefined;
      }
    },
  };
  const lines: string[] = [];
  const write = (text: string) => lines.push(text);
  return { dir, program, lines, write };
}

/** A stub apt-get: records its arguments; `install` fails until `update` ran (as on a fresh machine). */
async function stubAptGet(dir: string, { alwaysFail = false } = {}): Promise<string> {
  const path = `${dir}/apt-get`;
  await Deno.writeTextFile(
    path,
    `#!/bin/sh
echo "$@" >> ${dir}/calls
echo "apt output for $*"
case "$*" in
  *update*) touch ${dir}/updated; exit 0 ;;
esac
if [ ${
      alwaysFail ? 1 : 0
    } = 1 ] || [ ! -f ${dir}/updated ]; then echo "E: Unable to locate package" >&2; exit 100; fi
mkdir -p ${dir}/bin && touch ${dir}/bin/fakeprog
`,
  );
  await Deno.chmod(path, 0o755);
  return path;
}

const calls = (dir: string) =>
  Deno.readTextFileSync(`${dir}/calls`).trim().split("\n").map((l) =>
    l.replace("-o DPkg::Lock::Timeout=300 ", "")
  );

Deno.test("provision installs a missing program as root: update once on a first failure, one line", async () => {
  const { dir, program, lines, write } = await setup();
  try {
    const aptGet = await stubAptGet(dir);
    const result = await provision({ programs: [program], root: true, aptGet, write });
    assert.deepEqual(calls(dir), [
      "install -y --no-install-recommends fakeprog",
      "update",
      "install -y --no-install-recommends fakeprog",
    ]);
    assert.deepEqual(result, { present: ["Fakeprog"], installed: ["Fakeprog"], missing: [] });
    const printed = lines.join("");
    assert.equal(printed.split("\n").length, 2, `one line: ${printed}`);
    assert.match(
      printed,
      /^\[provision\] installing fakeprog \(apt-get; log: .*\) \.\.\. done \(\d+ s\)\n$/,
    );
    assert.doesNotMatch(printed, /apt output/, "apt-get's output goes to the log only");
    // Present now: nothing to do, nothing printed.
    lines.length = 0;
    const again = await provision({ programs: [program], root: true, aptGet, write });
    assert.deepEqual(again.installed, []);
    assert.deepEqual(lines, []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("provision that fails keeps apt-get's log and says which tests will fail", async () => {
  const { dir, program, lines, write } = await setup();
  try {
    const aptGet = await stubAptGet(dir, { alwaysFail: true });
    const result = await provision({ programs: [program], root: true, aptGet, write });
    assert.deepEqual(result.missing, ["Fakeprog"]);
    assert.ok(result.log);
    assert.match(await Deno.readTextFile(result.log), /E: Unable to locate package/);
    assert.match(lines.join(""), / FAILED \(\d+ s; see .*\): the fake tests will fail\n$/);
    await Deno.remove(result.log);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("provision without root or apt-get installs nothing and prints the install command", async () => {
  const { dir, program, lines, write } = await setup();
  try {
    const aptGet = await stubAptGet(dir);
    const user = await provision({ programs: [program], root: false, aptGet, write });
    assert.deepEqual(user.missing, ["Fakeprog"]);
    assert.equal(
      lines.join(""),
      "[provision] Fakeprog not installed and this run is not root: the fake tests will fail. " +
        "Install with: sudo apt-get install -y --no-install-recommends fakeprog\n",
    );
    lines.length = 0;
    await provision({ programs: [program], root: true, aptGet: null, write });
    assert.match(lines.join(""), /there is no apt-get: .* Install with: apt-get install -y/);
    assert.equal(await Deno.stat(`${dir}/calls`).then(() => true, () => false), false);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** Runs `code` in a fresh Deno with `env` added (the environment is the whole process's). */
async function evalWith(code: string, env: Record<string, string>): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--quiet", code],
    env,
    cwd: new URL("../..", import.meta.url).pathname,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return new TextDecoder().decode(out.stdout).trim();
}

Deno.test("a test needing PgBouncer or Chromium that is missing fails naming the install command", async () => {
  assert.equal(
    installCommand(["pgbouncer"]),
    "apt-get install -y --no-install-recommends pgbouncer",
  );
  const bouncer = await evalWith(
    `import { startPgBouncer } from "./local/pgbouncer.ts";
     await startPgBouncer({ serverPort: 5432 }).catch((e) => console.log(e.message));`,
    { PGFLOW_PGBOUNCER: "/nonexistent/pgbouncer" },
  );
  assert.equal(
    bouncer,
    "PgBouncer is not installed (the pooler tests need it): install it with " +
      "`apt-get install -y --no-install-recommends pgbouncer` as root (`deno task ci` does when " +
      "run as root), or set PGFLOW_PGBOUNCER to its binary",
  );
  const chromium = await evalWith(
    `import { openBrowser } from "./tests/support/browser.ts";
     await openBrowser().catch((e) => console.log(e.message));`,
    { CHROMIUM: "/nonexistent/chromium" },
  );
  assert.equal(
    chromium,
    "Chromium is not installed (the dashboard's browser tests need it): install it with " +
      "`apt-get install -y --no-install-recommends chromium` as root (`deno task ci` does when " +
      "run as root), or set CHROMIUM to its binary",
  );
});
