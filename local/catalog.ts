/**
 * A comparable snapshot of the `pgflow` schema's catalog: tables and columns, constraints,
 * indexes, functions with their definitions, types, views, triggers and sequences, and the security
 * surface: the privileges on the schema, its tables, sequences, columns, functions and types,
 * default privileges, row-level security flags and policies, and comments on the schema and
 * everything in it. The drift check (`local/drift.ts`) builds one from the schema files and one from
 * the migrations and names every difference, with a line diff of what differs.
 *
 * @module
 */
import type { Sql } from "postgres";
import { lineDiff } from "./line_diff.ts";

/** Object key (kind and name) → its definition text. */
export type CatalogSnapshot = Map<string, string>;

/** Sorted ACL of `acl` (`none` when every privilege was revoked), as one comparable string. */
const acl = (expr: string) =>
  `coalesce((select string_agg(x::text, ',' order by x::text) from unnest(${expr}) x), 'none')`;

// Every query gets the schema name as $1 and returns the object's full name (after its kind, the
// rest of the snapshot key) and its definition. Names are quote_ident'ed, so a key's name can be
// used in SQL as it is.
const QUERIES: Record<string, string> = {
  column: `
    select quote_ident($1) || '.' || quote_ident(c.relname) || '.' || quote_ident(a.attname) as name,
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
    select quote_ident($1) || '.' || quote_ident(relname) as name,
           relkind::text || ' ' || relpersistence::text as def
    from pg_class where relnamespace = $1::regnamespace and relkind in ('r', 'p', 'v', 'm', 'S')`,
  constraint: `
    select quote_ident($1) || '.' || quote_ident(c.relname) || '.' || quote_ident(k.conname) as name,
           pg_get_constraintdef(k.oid) as def
    from pg_constraint k join pg_class c on c.oid = k.conrelid
    where k.connamespace = $1::regnamespace`,
  index: `
    select quote_ident($1) || '.' || quote_ident(i.relname) as name, pg_get_indexdef(i.oid) as def
    from pg_index x join pg_class i on i.oid = x.indexrelid
    where i.relnamespace = $1::regnamespace`,
  function: `
    select quote_ident($1) || '.' || quote_ident(p.proname)
             || '(' || pg_get_function_identity_arguments(p.oid) || ')' as name,
           pg_get_functiondef(p.oid) as def
    from pg_proc p where p.pronamespace = $1::regnamespace and p.prokind in ('f', 'p')`,
  type: `
    select quote_ident($1) || '.' || quote_ident(t.typname) as name,
           t.typtype::text || ' ' || coalesce((
             select string_agg(e.enumlabel, ',' order by e.enumsortorder) from pg_enum e
             where e.enumtypid = t.oid), '') || coalesce((
             select string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ',' order by a.attnum)
             from pg_attribute a where a.attrelid = t.typrelid and a.attnum > 0), '') as def
    from pg_type t
    where t.typnamespace = $1::regnamespace and t.typtype in ('e', 'c', 'd')
      and (t.typrelid = 0 or (select relkind from pg_class where oid = t.typrelid) = 'c')`,
  view: `
    select quote_ident($1) || '.' || quote_ident(c.relname) as name, pg_get_viewdef(c.oid) as def
    from pg_class c where c.relnamespace = $1::regnamespace and c.relkind in ('v', 'm')`,
  trigger: `
    select quote_ident($1) || '.' || quote_ident(c.relname) || '.' || quote_ident(t.tgname) as name,
           pg_get_triggerdef(t.oid) as def
    from pg_trigger t join pg_class c on c.oid = t.tgrelid
    where c.relnamespace = $1::regnamespace and not t.tgisinternal`,
  // Privileges: every ACL is compared in full (a NULL ACL as the default it stands for), sorted, so
  // the order of GRANTs does not matter and an explicit default equals an implicit one.
  grant: `
    select 'function ' || quote_ident($1) || '.' || quote_ident(p.proname)
             || '(' || pg_get_function_identity_arguments(p.oid) || ')' as name,
           ${acl("coalesce(p.proacl, acldefault('f', p.proowner))")} as def
    from pg_proc p where p.pronamespace = $1::regnamespace
    union all
    select case when c.relkind = 'S' then 'sequence ' else 'table ' end
             || quote_ident($1) || '.' || quote_ident(c.relname),
           ${
    acl(`coalesce(c.relacl, acldefault(case when c.relkind = 'S' then 's' else 'r' end::"char",
             c.relowner))`)
  }
    from pg_class c where c.relnamespace = $1::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'S', 'f')
    union all
    select 'column ' || quote_ident($1) || '.' || quote_ident(c.relname) || '.' || quote_ident(a.attname),
           ${acl("a.attacl")}
    from pg_attribute a join pg_class c on c.oid = a.attrelid
    where c.relnamespace = $1::regnamespace and a.attnum > 0 and not a.attisdropped
      and cardinality(a.attacl) > 0
    union all
    select 'schema ' || quote_ident(n.nspname), ${
    acl("coalesce(n.nspacl, acldefault('n', n.nspowner))")
  }
    from pg_namespace n where n.nspname = $1
    union all
    select 'type ' || quote_ident($1) || '.' || quote_ident(t.typname),
           ${acl("coalesce(t.typacl, acldefault('T', t.typowner))")}
    from pg_type t
    where t.typnamespace = $1::regnamespace and t.typtype in ('e', 'c', 'd')
      and (t.typrelid = 0 or (select relkind from pg_class where oid = t.typrelid) = 'c')`,
  // Default privileges given in this schema, and those given for every schema (they apply here too).
  "default privileges": `
    select case when d.defaclnamespace = 0 then 'in all schemas' else 'in schema ' || quote_ident($1) end
             || ' for role ' || quote_ident(pg_get_userbyid(d.defaclrole)) || ' on '
             || case d.defaclobjtype when 'r' then 'tables' when 'S' then 'sequences'
                  when 'f' then 'functions' when 'T' then 'types' when 'n' then 'schemas'
                  else d.defaclobjtype::text end as name,
           ${acl("d.defaclacl")} as def
    from pg_default_acl d where d.defaclnamespace in (0, $1::regnamespace)`,
  "row security": `
    select quote_ident($1) || '.' || quote_ident(relname) as name,
           case when relrowsecurity then 'enabled' else 'disabled' end
             || case when relforcerowsecurity then ', forced' else '' end as def
    from pg_class where relnamespace = $1::regnamespace and relkind in ('r', 'p')`,
  policy: `
    select quote_ident($1) || '.' || quote_ident(c.relname) || '.' || quote_ident(p.polname) as name,
           case when p.polpermissive then 'permissive' else 'restrictive' end
             || ' for ' || case p.polcmd when 'r' then 'select' when 'a' then 'insert'
                  when 'w' then 'update' when 'd' then 'delete' else 'all' end
             || ' to ' || (select string_agg(case when r = 0 then 'public' else quote_ident(pg_get_userbyid(r)) end,
                  ', ' order by 1) from unnest(p.polroles) r)
             || coalesce(' using (' || pg_get_expr(p.polqual, p.polrelid) || ')', '')
             || coalesce(' with check (' || pg_get_expr(p.polwithcheck, p.polrelid) || ')', '') as def
    from pg_policy p join pg_class c on c.oid = p.polrelid
    where c.relnamespace = $1::regnamespace`,
  // Comments on the schema and on everything in it; the name says what the comment is on.
  comment: `
    select 'schema ' || quote_ident(n.nspname) as name, d.description as def
    from pg_description d join pg_namespace n on n.oid = d.objoid
    where d.classoid = 'pg_namespace'::regclass and n.nspname = $1
    union all
    select case when d.objsubid > 0 then 'column '
             else case c.relkind when 'S' then 'sequence ' when 'v' then 'view '
               when 'm' then 'materialized view ' when 'i' then 'index ' when 'I' then 'index '
               when 'c' then 'type ' when 'f' then 'foreign table ' else 'table ' end end
             || quote_ident($1) || '.' || quote_ident(c.relname)
             || coalesce('.' || quote_ident((select attname from pg_attribute
                  where attrelid = c.oid and attnum = d.objsubid and d.objsubid > 0)), ''),
           d.description
    from pg_description d join pg_class c on c.oid = d.objoid
    where d.classoid = 'pg_class'::regclass and c.relnamespace = $1::regnamespace
    union all
    select 'function ' || quote_ident($1) || '.' || quote_ident(p.proname)
             || '(' || pg_get_function_identity_arguments(p.oid) || ')', d.description
    from pg_description d join pg_proc p on p.oid = d.objoid
    where d.classoid = 'pg_proc'::regclass and p.pronamespace = $1::regnamespace
    union all
    select 'type ' || quote_ident($1) || '.' || quote_ident(t.typname), d.description
    from pg_description d join pg_type t on t.oid = d.objoid
    where d.classoid = 'pg_type'::regclass and t.typnamespace = $1::regnamespace
    union all
    select 'constraint ' || quote_ident($1) || '.'
             || quote_ident(coalesce(c.relname, (select typname from pg_type where oid = k.contypid)))
             || '.' || quote_ident(k.conname), d.description
    from pg_description d join pg_constraint k on k.oid = d.objoid left join pg_class c on c.oid = k.conrelid
    where d.classoid = 'pg_constraint'::regclass and k.connamespace = $1::regnamespace
    union all
    select 'trigger ' || quote_ident($1) || '.' || quote_ident(c.relname) || '.' || quote_ident(t.tgname),
           d.description
    from pg_description d join pg_trigger t on t.oid = d.objoid join pg_class c on c.oid = t.tgrelid
    where d.classoid = 'pg_trigger'::regclass and c.relnamespace = $1::regnamespace
    union all
    select 'policy ' || quote_ident($1) || '.' || quote_ident(c.relname) || '.' || quote_ident(p.polname),
           d.description
    from pg_description d join pg_policy p on p.oid = d.objoid join pg_class c on c.oid = p.polrelid
    where d.classoid = 'pg_policy'::regclass and c.relnamespace = $1::regnamespace`,
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
      snapshot.set(`${kind} ${row.name}`, row.def);
    }
  }
  return snapshot;
}

/**
 * Lists the differences between two snapshots, one entry per object, naming it. A definition of
 * one line is shown whole on both sides; a longer one (a function body) as a line diff of what
 * differs from `b` to `a` (`a` is the one wanted: `-` lines are `bName`'s, `+` lines `aName`'s).
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
    else if (!left.includes("\n") && !right.includes("\n")) {
      drift.push(`${key}: differs\n  ${aName}: ${left}\n  ${bName}: ${right}`);
    } else {
      const diff = lineDiff(right, left, { aName: bName, bName: aName }).replaceAll("\n", "\n  ");
      drift.push(`${key}: differs\n  ${diff}`);
    }
  }
  return drift.sort();
}
