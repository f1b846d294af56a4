/** The CLI's argument parser: every wrong command line is a usage error that names what to fix. */
import assert from "node:assert/strict";
import { parseArgs } from "../../src/cli/args.ts";
import { UsageError } from "../../src/cli/output.ts";

const spec = { "database-url": "string", "pgmq-sql": "boolean" } as const;

Deno.test("flags with values, with =, booleans and --help are read", () => {
  const a = parseArgs(["--database-url", "postgres://a", "--pgmq-sql"], spec, "pgflow migrate");
  assert.equal(a.strings["database-url"], "postgres://a");
  assert.ok(a.booleans.has("pgmq-sql"));
  assert.equal(a.help, false);
  const b = parseArgs(["--database-url=postgres://b?x=1", "-h"], spec, "pgflow migrate");
  assert.equal(b.strings["database-url"], "postgres://b?x=1");
  assert.equal(b.help, true);
});

Deno.test("a wrong command line is a usage error naming the argument and the help", () => {
  const cases: [string[], RegExp][] = [
    [
      ["--databse-url", "x"],
      /unknown flag "--databse-url" for pgflow migrate \(its flags: --database-url, --pgmq-sql\); run "pgflow migrate --help"/,
    ],
    [["-d"], /unknown flag "-d"/],
    [["--database-url"], /--database-url needs a value/],
    [["--database-url", "--pgmq-sql"], /--database-url needs a value/],
    [["--database-url="], /--database-url needs a value/],
    [["--pgmq-sql=yes"], /--pgmq-sql takes no value/],
    [["--database-url", "a", "--database-url", "b"], /--database-url is given twice/],
    [["extra"], /pgflow migrate takes no arguments, got "extra"/],
    [["--constructor"], /unknown flag "--constructor"/],
  ];
  for (const [argv, message] of cases) {
    assert.throws(() => parseArgs(argv, spec, "pgflow migrate"), (e: unknown) => {
      assert.ok(e instanceof UsageError, String(e));
      assert.equal(e.exitCode, 2);
      assert.match(e.message, message);
      return true;
    }, argv.join(" "));
  }
});

Deno.test('a "list" flag may be repeated: its values are kept in order', () => {
  const listSpec = { "allow-host": "list", "host": "string" } as const;
  const a = parseArgs(
    ["--allow-host", "a.example", "--host", "h", "--allow-host=b.example:9000"],
    listSpec,
    "pgflow dashboard",
  );
  assert.deepEqual(a.lists["allow-host"], ["a.example", "b.example:9000"]);
  assert.equal(a.strings.host, "h");
  assert.deepEqual(parseArgs([], listSpec, "pgflow dashboard").lists, {});
  assert.throws(
    () => parseArgs(["--allow-host", "--host", "h"], listSpec, "pgflow dashboard"),
    /--allow-host needs a value/,
  );
});
