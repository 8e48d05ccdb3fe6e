-- Up Migration

-- Least privilege: a role per job of work, and the API's rules kept by Postgres too
-- (docs/security.md, "Least privilege").
--
-- The login role (app/login-role.ts) may SET ROLE to every role below: what it can do is
-- the union of what they can, so each holds only what its one job needs:
--   ecs_saas_operator   the admin key's API requests: accounts, keys, usage reports, reads;
--   ecs_saas_billing    billing-run and POST /accounts/:id/invoices: writes invoices;
--   ecs_saas_reporting  report-aggregation: writes the daily rollups;
--   ecs_saas_retention  data-cleanup: deletes usage that is accounted for, and old job runs;
--   ecs_saas_export     weekly-export: reads invoices and accounts.
-- The worker's refresh of the usage summary stays with ecs_saas_runtime (MAINTAIN on the view).
--
-- The rules below that are row-level policies bind these roles and not the tables' owner
-- (the user that migrates, a DBA's); the triggers bind everyone.
DO $$
DECLARE
  r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['ecs_saas_billing', 'ecs_saas_reporting', 'ecs_saas_retention', 'ecs_saas_export'] LOOP
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
      EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT', r);
    END IF;
  END LOOP;
END $$;
GRANT ecs_saas_billing, ecs_saas_reporting, ecs_saas_retention, ecs_saas_export TO CURRENT_USER;
GRANT ecs_saas_billing, ecs_saas_reporting, ecs_saas_retention, ecs_saas_export TO ecs_saas_runtime WITH INHERIT FALSE, SET TRUE;
GRANT USAGE ON SCHEMA public TO ecs_saas_billing, ecs_saas_reporting, ecs_saas_retention, ecs_saas_export;

-- Nothing the login role can reach creates anything: no table in public (Postgres 15 and
-- later already revoke it; a database made from an older template may still grant it), no
-- temporary table, no large object. Each needs the database's or the function's owner: where
-- the user that migrates is neither (a managed service's catalog), it is said and skipped,
-- and the migrate command removes what the login role made anyway (app/login-role.ts).
DO $$
BEGIN
  EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
EXCEPTION WHEN insufficient_privilege THEN
  RAISE WARNING 'could not revoke TEMPORARY on this database from PUBLIC: %', SQLERRM;
END $$;
DO $$
BEGIN
  REVOKE CREATE ON SCHEMA public FROM PUBLIC;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE WARNING 'could not revoke CREATE on schema public from PUBLIC: %', SQLERRM;
END $$;
DO $$
BEGIN
  REVOKE EXECUTE ON FUNCTION lo_create(oid), lo_creat(integer), lo_from_bytea(oid, bytea), lo_import(text), lo_import(text, oid) FROM PUBLIC;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE WARNING 'could not revoke the large object functions from PUBLIC: %', SQLERRM;
END $$;

-- Policies take an ACCESS EXCLUSIVE lock on busy tables (usage): fail fast, and roll the
-- deploy back, rather than queue every API query behind a long-running one.
SET LOCAL lock_timeout = '5s';

-- The operator keeps the API's rights and loses the jobs': no invoice, no rollup, no delete.
REVOKE INSERT ON invoices FROM ecs_saas_operator, ecs_saas_app;
REVOKE DELETE ON usage FROM ecs_saas_operator;
REVOKE INSERT, UPDATE ON usage_daily FROM ecs_saas_operator, ecs_saas_app;
REVOKE INSERT ON accounts FROM ecs_saas_app;
-- Only the operator mints keys (app/api/keys.ts): an account's transaction, hijacked, mints none.
REVOKE INSERT ON api_keys FROM ecs_saas_app;

-- Billing: locks the accounts it bills, sums their usage, inserts their invoices. An invoice
-- it writes is for one UTC day that has ended, with a quantity of 0 or more and an amount no
-- more than that quantity at the highest unit price an account may have (policy priced).
-- (Checked on the row alone: a look-up of the account for every invoice made billing-run
-- about a fifth slower, bench:jobs; its amount is billing's sum, app/billing.ts.)
GRANT SELECT, UPDATE (status) ON accounts TO ecs_saas_billing;
GRANT SELECT ON usage TO ecs_saas_billing;
GRANT SELECT, INSERT ON invoices TO ecs_saas_billing;
CREATE POLICY billing_read ON accounts FOR SELECT TO ecs_saas_billing USING (true);
CREATE POLICY billing_lock ON accounts FOR UPDATE TO ecs_saas_billing USING (true) WITH CHECK (false);
CREATE POLICY billing_read ON usage FOR SELECT TO ecs_saas_billing USING (true);
CREATE POLICY billing_read ON invoices FOR SELECT TO ecs_saas_billing USING (true);
CREATE POLICY billing_insert ON invoices FOR INSERT TO ecs_saas_billing WITH CHECK (
  invoices.period_end = invoices.period_start + 1
  AND invoices.period_end <= (now() AT TIME ZONE 'UTC')::date
  AND invoices.quantity >= 0
  AND invoices.amount_cents BETWEEN 0 AND invoices.quantity::numeric * 1000000
);

-- Reporting: reads usage, upserts the day's rollups.
GRANT SELECT ON accounts, usage TO ecs_saas_reporting;
GRANT SELECT, INSERT, UPDATE ON usage_daily TO ecs_saas_reporting;
CREATE POLICY reporting_read ON accounts FOR SELECT TO ecs_saas_reporting USING (true);
CREATE POLICY reporting_read ON usage FOR SELECT TO ecs_saas_reporting USING (true);
CREATE POLICY reporting_all ON usage_daily FOR ALL TO ecs_saas_reporting USING (true) WITH CHECK (true);

-- Retention: deletes usage a day old or more whose day is invoiced and rolled up (what
-- data-cleanup deletes), and attempts that finished a day ago or more. The shortest retention
-- each setting allows is one day (app/config.ts).
GRANT SELECT, DELETE ON usage TO ecs_saas_retention;
GRANT SELECT ON invoices, usage_daily TO ecs_saas_retention;
CREATE POLICY retention_read ON usage FOR SELECT TO ecs_saas_retention USING (true);
CREATE POLICY retention_delete ON usage FOR DELETE TO ecs_saas_retention USING (
  usage.occurred_at < now() - interval '1 day'
  AND (SELECT true FROM invoices i WHERE i.account_id = usage.account_id AND i.period_start = (usage.occurred_at AT TIME ZONE 'UTC')::date LIMIT 1)
  AND (SELECT true FROM usage_daily d WHERE d.day = (usage.occurred_at AT TIME ZONE 'UTC')::date AND d.account_id = usage.account_id AND d.metric = usage.metric LIMIT 1)
);
CREATE POLICY retention_read ON invoices FOR SELECT TO ecs_saas_retention USING (true);
CREATE POLICY retention_read ON usage_daily FOR SELECT TO ecs_saas_retention USING (true);

-- Export: reads invoices and their accounts.
GRANT SELECT ON accounts, invoices TO ecs_saas_export;
CREATE POLICY export_read ON accounts FOR SELECT TO ecs_saas_export USING (true);
CREATE POLICY export_read ON invoices FOR SELECT TO ecs_saas_export USING (true);

-- job_runs: the runner (the login role, through ecs_saas_runtime) records and updates its
-- attempts and never deletes one; retention deletes finished attempts a day old or more.
REVOKE DELETE ON job_runs FROM ecs_saas_runtime;
GRANT SELECT, DELETE ON job_runs TO ecs_saas_retention;
ALTER TABLE job_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY runner_read ON job_runs FOR SELECT TO ecs_saas_runtime, ecs_saas_retention USING (true);
CREATE POLICY runner_insert ON job_runs FOR INSERT TO ecs_saas_runtime WITH CHECK (true);
CREATE POLICY runner_update ON job_runs FOR UPDATE TO ecs_saas_runtime USING (true) WITH CHECK (true);
CREATE POLICY retention_delete ON job_runs FOR DELETE TO ecs_saas_retention
  USING (status <> 'running' AND finished_at < now() - interval '1 day');

-- Usage is reported only for an active account, no earlier than the account was created, in
-- the event's range (MAX_USAGE_QUANTITY, app/billing.ts), and never on an invoiced day: the
-- API's own checks (app/api/usage.ts), now Postgres's too. Restrictive: it narrows the
-- policies above rather than adding rows to them.
CREATE POLICY billable ON usage AS RESTRICTIVE FOR INSERT TO ecs_saas_app, ecs_saas_operator WITH CHECK (
  usage.quantity BETWEEN 0 AND 1000000
  AND (SELECT a.status = 'active' AND date_trunc('milliseconds', a.created_at) <= usage.occurred_at FROM accounts a WHERE a.id = usage.account_id)
  AND (SELECT i.id FROM invoices i WHERE i.account_id = usage.account_id AND i.period_start = (usage.occurred_at AT TIME ZONE 'UTC')::date LIMIT 1) IS NULL
);
-- An account's unit price within MAX_UNIT_PRICE_CENTS (app/billing.ts).
CREATE POLICY priced ON accounts AS RESTRICTIVE FOR INSERT TO ecs_saas_operator WITH CHECK (accounts.unit_price_cents BETWEEN 0 AND 1000000);

-- A revoked key stays revoked, whoever asks: revoked_at, once set, never changes again.
CREATE FUNCTION api_keys_revoked_stays() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'API key % is revoked, and a revoked key stays revoked', OLD.id USING ERRCODE = 'integrity_constraint_violation';
END $$;
CREATE TRIGGER revoked_stays BEFORE UPDATE ON api_keys FOR EACH ROW
  WHEN (OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at)
  EXECUTE FUNCTION api_keys_revoked_stays();

-- An invoice, once written, never changes, whoever asks. (No runtime role may delete one
-- either: none holds DELETE on invoices.)
CREATE FUNCTION invoices_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'invoice % is issued, and an issued invoice never changes', OLD.id USING ERRCODE = 'integrity_constraint_violation';
END $$;
CREATE TRIGGER immutable BEFORE UPDATE ON invoices FOR EACH ROW EXECUTE FUNCTION invoices_immutable();

-- A finished attempt is history: the runner updates only attempts that are running.
CREATE FUNCTION job_runs_finished_stays() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'job run attempt % has finished (%), and a finished attempt never changes', OLD.id, OLD.status USING ERRCODE = 'integrity_constraint_violation';
END $$;
CREATE TRIGGER finished_stays BEFORE UPDATE ON job_runs FOR EACH ROW
  WHEN (OLD.status <> 'running')
  EXECUTE FUNCTION job_runs_finished_stays();

-- Down Migration
DROP TRIGGER finished_stays ON job_runs;
DROP FUNCTION job_runs_finished_stays();
DROP TRIGGER immutable ON invoices;
DROP FUNCTION invoices_immutable();
DROP TRIGGER revoked_stays ON api_keys;
DROP FUNCTION api_keys_revoked_stays();
DROP POLICY priced ON accounts;
DROP POLICY billable ON usage;
DROP POLICY retention_delete ON job_runs;
DROP POLICY runner_update ON job_runs;
DROP POLICY runner_insert ON job_runs;
DROP POLICY runner_read ON job_runs;
ALTER TABLE job_runs DISABLE ROW LEVEL SECURITY;
REVOKE ALL ON job_runs FROM ecs_saas_retention;
GRANT DELETE ON job_runs TO ecs_saas_runtime;
DROP POLICY export_read ON invoices;
DROP POLICY export_read ON accounts;
DROP POLICY retention_read ON usage_daily;
DROP POLICY retention_read ON invoices;
DROP POLICY retention_delete ON usage;
DROP POLICY retention_read ON usage;
DROP POLICY reporting_all ON usage_daily;
DROP POLICY reporting_read ON usage;
DROP POLICY reporting_read ON accounts;
DROP POLICY billing_insert ON invoices;
DROP POLICY billing_read ON invoices;
DROP POLICY billing_read ON usage;
DROP POLICY billing_lock ON accounts;
DROP POLICY billing_read ON accounts;
REVOKE ALL ON accounts, usage, invoices, usage_daily FROM ecs_saas_billing, ecs_saas_reporting, ecs_saas_retention, ecs_saas_export;
GRANT INSERT ON accounts TO ecs_saas_app;
GRANT INSERT ON api_keys TO ecs_saas_app;
GRANT INSERT, UPDATE ON usage_daily TO ecs_saas_operator, ecs_saas_app;
GRANT DELETE ON usage TO ecs_saas_operator;
GRANT INSERT ON invoices TO ecs_saas_operator, ecs_saas_app;
GRANT EXECUTE ON FUNCTION lo_create(oid), lo_creat(integer), lo_from_bytea(oid, bytea) TO PUBLIC;
REVOKE USAGE ON SCHEMA public FROM ecs_saas_billing, ecs_saas_reporting, ecs_saas_retention, ecs_saas_export;
REVOKE ecs_saas_billing, ecs_saas_reporting, ecs_saas_retention, ecs_saas_export FROM ecs_saas_runtime;
