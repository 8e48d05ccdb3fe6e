-- Up Migration

-- The rights of the API's and the jobs' login role: ecs_saas_runtime (docs/security.md).
--
-- Until now the API and the jobs logged in as the user that migrates, which owns every table
-- and so bypasses every policy: a SQL injection would have started with the owner's rights
-- (in RDS, rds_superuser's). They now log in as a role of their own that owns nothing, which
-- the migrate command creates after migrating (app/login-role.ts) as a member of this group.
-- The group holds exactly what their code does outside a tenant's or the operator's
-- transaction, and nothing more:
--   - SET ROLE to ecs_saas_app and ecs_saas_operator (app/tenancy.ts), without inheriting
--     their table rights: outside such a transaction the login role reads no tenant row;
--   - the job runner's table, job_runs (data-cleanup deletes old attempts);
--   - the API key lookup that runs before a request has an identity (app/auth.ts);
--   - REFRESH of the usage summary (the usage-summary worker): MAINTAIN, Postgres 17 and later,
--     is the one right that allows it without owning the view.
-- Advisory locks, pg_stat_activity's pids and pg_cancel_backend of its own sessions need no grant.
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ecs_saas_runtime') THEN
    CREATE ROLE ecs_saas_runtime NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT;
  END IF;
END $$;
GRANT ecs_saas_app, ecs_saas_operator TO ecs_saas_runtime WITH INHERIT FALSE, SET TRUE;
GRANT USAGE ON SCHEMA public TO ecs_saas_runtime;

-- GRANT takes no lock that queues the API's queries for long, but fail fast all the same.
SET LOCAL lock_timeout = '5s';
GRANT SELECT, INSERT, UPDATE, DELETE ON job_runs TO ecs_saas_runtime;
GRANT EXECUTE ON FUNCTION api_key_account(bytea) TO ecs_saas_runtime;
GRANT MAINTAIN ON account_usage_30d TO ecs_saas_runtime;

-- data-cleanup deletes expired usage as the operator, whose policy on usage covers DELETE.
GRANT DELETE ON usage TO ecs_saas_operator;

-- Down Migration
REVOKE DELETE ON usage FROM ecs_saas_operator;
REVOKE ALL ON account_usage_30d, job_runs FROM ecs_saas_runtime;
REVOKE ALL ON FUNCTION api_key_account(bytea) FROM ecs_saas_runtime;
REVOKE USAGE ON SCHEMA public FROM ecs_saas_runtime;
REVOKE ecs_saas_app, ecs_saas_operator FROM ecs_saas_runtime;
