/**
 * A stand-in for PostgREST, since the tests run no Supabase stack: the real supabase-js client
 * against a small HTTP server that answers `rpc` the way PostgREST does (POST
 * /rest/v1/rpc/<function> with the schema in Content-Profile, named arguments in the body, the
 * result as the database wrote it, a database error as { code, message, hint }), running the call
 * as service_role on the real database. Like PostgREST it never round-trips data through
 * JSON.parse: what a client reads is the database's text.
 *
 * @module
 */
import postgres from "postgres";
import { parseJson } from "../../mod.ts";

/** The arguments each exposed function takes, with their SQL types (as PostgREST reads them). */
const RPC: Record<string, Record<string, string>> = {
  start_flow: { flow_slug: "text", input: "jsonb", run_id: "uuid" },
  start_flows: { flow_slug: "text", inputs: "jsonb", priority: "integer", traceparent: "text" },
  get_run: { run_id: "uuid" },
  get_run_text: { run_id: "uuid" },
  cancel_run: { run_id: "uuid", reason: "text" },
  retry_run: { run_id: "uuid", again: "boolean" },
  resume_run: { run_id: "uuid", again: "boolean" },
  list_runs: {
    flow_slug: "text",
    status: "text",
    since: "timestamptz",
    run_id_prefix: "text",
    max_rows: "integer",
    restarted: "boolean",
  },
  waiting_tasks: { queue_name: "text" },
  send_event: {
    event_name: "text",
    payload: "jsonb",
    run_id: "uuid",
    step_slug: "text",
    key: "text",
    keep: "interval",
  },
};

/** Functions returning a set: PostgREST answers with an array of their rows. */
const RETURNS_SET = new Set(["list_runs"]);
/** Functions returning a table: each row is an object of its columns. */
const RETURNS_TABLE = new Set(["waiting_tasks"]);

/** Answers supabase-js rpc calls on schema pgflow as service_role, like PostgREST. */
export function fakePostgrest(
  url: string,
): { url: string; calls: string[]; close(): Promise<void> } {
  const sql = postgres(url, { max: 4, onnotice: () => {} });
  const calls: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    const fn = new URL(req.url).pathname.match(/^\/rest\/v1\/rpc\/(\w+)$/)?.[1];
    if (req.headers.get("content-profile") !== "pgflow" || fn === undefined || !(fn in RPC)) {
      return Response.json({ code: "PGRST202", message: `no function ${fn}` }, { status: 404 });
    }
    // Read as PostgREST does, exactly: JSON.parse could change the keys and numbers of an input.
    const args = parseJson(await req.text()) as Record<string, unknown>;
    calls.push(`${fn}(${Object.keys(args).sort().join(", ")})`);
    const names = Object.keys(args).filter((k) => k in RPC[fn]);
    const list = names.map((n, i) =>
      `${n} => $${i + 1}::${RPC[fn][n] === "jsonb" ? "text::jsonb" : RPC[fn][n]}`
    ).join(", ");
    const values = names.map((n) =>
      RPC[fn][n] === "jsonb" ? JSON.stringify(args[n]) : args[n] as string | number | null
    );
    try {
      const [row] = await sql.begin(async (tx) => {
        await tx`set local role service_role`;
        return await tx.unsafe(
          RETURNS_SET.has(fn)
            ? `select coalesce(jsonb_agg(doc), '[]')::text as result from pgflow.${fn}(${list}) as r(doc)`
            : RETURNS_TABLE.has(fn)
            ? `select coalesce(jsonb_agg(to_jsonb(r)), '[]')::text as result from pgflow.${fn}(${list}) r`
            : `select to_jsonb(pgflow.${fn}(${list}))::text as result`,
          values as never[],
        );
      });
      // The database's own text, as PostgREST sends it (no JSON.parse and JSON.stringify here).
      return new Response(row.result, { headers: { "content-type": "application/json" } });
    } catch (e) {
      const error = e as { code?: string; message: string; hint?: string };
      return Response.json({
        code: error.code,
        message: error.message,
        hint: error.hint ?? null,
        details: null,
      }, {
        status: 400,
      });
    }
  });
  const { port } = server.addr as Deno.NetAddr;
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    close: async () => {
      await server.shutdown();
      await sql.end({ timeout: 1 });
    },
  };
}
