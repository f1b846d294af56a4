/**
 * A comparable snapshot of the `pgflow` schema's catalog: tables and columns, constraints,
 * indexes, functions with their definitions, types, views, triggers and sequences. The schema-first
 * check builds one from the declarative schema and one from the migrations and names every drift.
 *
 * @module
 */
import type { Sql } from "postgres";

/** Object key (kind and name) → its definition text. */
export type CatalogSnapshot = Map<string, string>;

const QUERIES: Record<string, string> = {
  column: `
    select c.relname || '.' || a.attname as name,
           format_type(a.atttypid, a.atttypmod) || case when a.attnotnull then ' not null' else '' end
             || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
             || case when a.attidentity <> '' then ' identity ' || a.attidentity::text else '' end
             || case when a.attgenerated <> '' then ' generated' else '' end as def
    from pg_attribute a
    join pg_class c on c.oid = a.attrelid
    left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
    where c.relnamespace = $1::regnamespace and c.relkind in ('r', 'p', 'v', 'm')
      and a.attnum > 0 and not a.attisdropped`,
  table: `
    select relname as name, relkind::text || ' ' || relpersistence::text as def
    from pg_class where relnamespace = $1::regnamespace and relkind in ('r', 'p', 'v', 'm', 'S')`,
  constraint: `
    select c.relname || '.' || k.conname as name, pg_get_constraintdef(k.oid) as def
    from pg_constraint k join pg_class c on c.oid = k.conrelid
    where k.connamespace = $1::regnamespace`,
  index: `
    select i.relname as name, pg_get_indexdef(i.oid) as def
    from pg_index x join pg_class i on i.oid = x.indexrelid
    where i.relnamespace = $1::regnamespace`,
  function: `
    select p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' as name,
           pg_get_functiondef(p.oid) as def
    from pg_proc p where p.pronamespace = $1::regnamespace and p.prokind in ('f', 'p')`,
  type: `
    select t.typname as name,
           t.typtype::text || ' ' || coalesce((
             select string_agg(e.enumlabel, ',' order by e.enumsortorder) from pg_enum e
             where e.enumtypid = t.oid), '') || coalesce((
             select string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ',' order by a.attnum)
             from pg_attribute a where a.attrelid = t.typrelid and a.attnum > 0), '') as def
    from pg_type t
    where t.typnamespace = $1::regnamespace and t.typtype in ('e', 'c', 'd')
      and (t.typrelid = 0 or (select relkind from pg_class where oid = t.typrelid) = 'c')`,
  view: `
    select c.relname as name, pg_get_viewdef(c.oid) as def
    from pg_class c where c.relnamespace = $1::regnamespace and c.relkind in ('v', 'm')`,
  trigger: `
    select c.relname || '.' || t.tgname as name, pg_get_triggerdef(t.oid) as def
    from pg_trigger t join pg_class c on c.oid = t.tgrelid
    where c.relnamespace = $1::regnamespace and not t.tgisinternal`,
  privilege: `
    select 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' as name,
           coalesce(array_to_string(p.proacl, ','), 'default') as def
    from pg_proc p where p.pronamespace = $1::regnamespace`,
};

/**
 * Reads the catalog of one schema.
 *
 * @example
 * ```ts
 * const snapshot = await catalogSnapshot(sql, "pgflow");
 * ```
 */
export async function catalogSnapshot(sql: Sql, schema: string): Promise<CatalogSnapshot> {
  const snapshot: CatalogSnapshot = new Map();
  const [{ exists }] = await sql<{ exists: boolean }[]>`
    select exists (select 1 from pg_namespace where nspname = ${schema}) as exists`;
  if (!exists) return snapshot;
  for (const [kind, query] of Object.entries(QUERIES)) {
    for (const row of await sql.unsafe<{ name: string; def: string }[]>(query, [schema])) {
      snapshot.set(`${kind} ${schema}.${row.name}`, row.def);
    }
  }
  return snapshot;
}

/**
 * Lists the differences between two snapshots, one line per object, naming it.
 *
 * @example
 * ```ts
 * const drift = diffCatalogs(fromSchemas, fromMigrations, "schemas", "migrations");
 * ```
 */
export function diffCatalogs(
  a: CatalogSnapshot,
  b: CatalogSnapshot,
  aName: string,
  bName: string,
): string[] {
  const drift: string[] = [];
  for (const key of new Set([...a.keys(), ...b.keys()])) {
    const left = a.get(key);
    const right = b.get(key);
    if (left === right) continue;
    if (left === undefined) drift.push(`${key}: only in ${bName}`);
    else if (right === undefined) drift.push(`${key}: only in ${aName}`);
    else drift.push(`${key}: differs\n  ${aName}: ${left}\n  ${bName}: ${right}`);
  }
  return drift.sort();
}
