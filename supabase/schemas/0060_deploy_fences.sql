-- The deploy fence: replacing a complete set of worker functions in place. A fence records each
-- function's enabled flag before disabling it, so ending the fence restores exactly what was there
-- (a function an operator had disabled on purpose stays disabled).

create table if not exists pgflow.deploy_fences (
  fence_id bigint generated always as identity,
  note text,
  started_at timestamptz not null default now(),
  ended_at timestamptz,
  constraint deploy_fences_pkey primary key (fence_id)
);

create table if not exists pgflow.deploy_fence_functions (
  fence_id bigint not null,
  function_name text not null,
  was_enabled boolean not null,
  constraint deploy_fence_functions_pkey primary key (fence_id, function_name),
  constraint deploy_fence_functions_fence_fkey foreign key (fence_id) references pgflow.deploy_fences (fence_id),
  constraint deploy_fence_functions_function_fkey foreign key (function_name) references pgflow.worker_functions (function_name)
);
