// Extension membership and detach_archive, and the compatible SQL's counterpart: no extension at
// all, so detaching is a no-op and dropping always works.
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import {
  freshQueue,
  ON_COMPATIBLE,
  ON_EXTENSION,
  pgError,
  pgmqTarget,
  relationExists,
} from "./helpers.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

db.test("48 [ext] queue tables are extension members until detached", async ({ sql }) => {
  const target = await pgmqTarget(sql);
  const q = freshQueue("t_members");
  await sql`select pgmq.create(${q}::text)`;
  const members = async () =>
    (await sql`
      select c.relname from pg_depend d join pg_class c on c.oid = d.objid
      join pg_extension e on e.oid = d.refobjid
      where d.classid = 'pg_class'::regclass and d.deptype = 'e' and e.extname = 'pgmq'
        and c.relname in (${"q_" + q}, ${"a_" + q}, ${"q_" + q + "_msg_id_seq"})
      order by 1`).map((r) => r.relname);
  const expected = [`a_${q}`, `q_${q}`];
  if (target.has15) expected.push(`q_${q}_msg_id_seq`);
  assert.deepEqual(await members(), expected.sort());
  await sql`select pgmq.detach_archive(${q}::text)`;
  assert.deepEqual(await members(), expected.filter((m) => m !== `a_${q}`).sort());
  await sql`drop extension pgmq cascade`;
  assert.equal(await relationExists(sql, `pgmq.a_${q}`), true);
  assert.equal(await relationExists(sql, `pgmq.q_${q}`), false);
}, { fresh: true, ignore: ON_COMPATIBLE });

db.test(
  "49 [ext] detaching twice fails; drop_queue after detach is an upstream quirk",
  async ({ sql }) => {
    const q = freshQueue("t_detach");
    await sql`select pgmq.create(${q}::text)`;
    await sql`select pgmq.detach_archive(${q}::text)`;
    await assert.rejects(
      () => sql`select pgmq.detach_archive(${q}::text)`,
      (e) => /is not a member of extension "pgmq"/.test(String(e)),
    );
    // Upstream 1.4.4–1.5.2 fails the same way; Supabase's replacement drop_queue succeeds.
    try {
      const [{ dropped }] = await sql`select pgmq.drop_queue(${q}::text) as dropped`;
      assert.equal(dropped, true);
    } catch (e) {
      assert.match(String(e), /is not a member of extension "pgmq"/);
    }
  },
  { ignore: ON_COMPATIBLE },
);

db.test(
  "[compatible] no extension: nothing is a member, detach is a no-op, drop works",
  async ({ sql }) => {
    const [{ ext }] = await sql`
    select exists (select 1 from pg_extension where extname = 'pgmq') as ext`;
    assert.equal(ext, false);
    const q = freshQueue("t_noext");
    await sql`select pgmq.create(${q}::text)`;
    await sql`select pgmq.detach_archive(${q}::text)`;
    await sql`select pgmq.detach_archive(${q}::text)`;
    const [{ belongs }] = await sql`select pgmq._belongs_to_pgmq(${"q_" + q}::text) as belongs`;
    assert.equal(belongs, false);
    const [{ dropped }] = await sql`select pgmq.drop_queue(${q}::text) as dropped`;
    assert.equal(dropped, true);
    assert.equal(await relationExists(sql, `pgmq.a_${q}`), false);
    await assert.rejects(
      () => sql`select pgmq.detach_archive('x$y'::text)`,
      pgError("P0001"),
    );
  },
  { ignore: ON_EXTENSION },
);

db.test(
  "[compatible] the deprecated drop_queue on a missing queue also returns false",
  async ({ sql, notices }) => {
    const q = freshQueue("t_dep_missing");
    const [{ dropped }] = await sql`select pgmq.drop_queue(${q}::text, false) as dropped`;
    assert.equal(dropped, false);
    assert.ok(notices.some((n) => n.severity === "WARNING" && /deprecated/.test(n.message)));
    assert.ok(notices.some((n) => n.severity === "NOTICE" && n.message.includes(q)));
  },
  { ignore: ON_EXTENSION },
);
