-- Up Migration

-- The operator gets a role of its own: ecs_saas_operator (docs/security.md).
--
-- Under ecs_saas_app the operator is a setting (`app.operator = on`) that every policy tests
-- row by row, `current_setting(...) = 'on' OR account_id = ...`. The planner cannot read a
-- setting at plan time, so it guesses that 0.5% of the rows pass: billing-run's batch lock
-- (`ORDER BY id LIMIT n FOR NO KEY UPDATE`) then expected a few hundred accounts and chose to
-- read and sort every account left on each batch, work that grew with the square of the
-- accounts (docs/performance.md). A role's own policies are chosen when the query is planned:
-- the operator's say `true`, so its plans are the plans of the statement without policies,
-- while an account under ecs_saas_app stays bound by the policies above.
--
-- The role has no BYPASSRLS and owns nothing: row-level security still binds it, and it holds
-- exactly the rights of ecs_saas_app. Only what the operator could already do is allowed.
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ecs_saas_operator') THEN
    CREATE ROLE ecs_saas_operator NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT;
  END IF;
END $$;
GRANT ecs_saas_operator TO CURRENT_USER;
GRANT USAGE ON SCHEMA public TO ecs_saas_operator;

-- CREATE POLICY takes an ACCESS EXCLUSIVE lock on busy tables (usage): fail fast, and roll
-- the deploy back, rather than queue every API query behind a long-running one.
SET LOCAL lock_timeout = '5s';
CREATE POLICY operator_all ON accounts FOR SELECT TO ecs_saas_operator USING (true);
CREATE POLICY operator_insert_all ON accounts FOR INSERT TO ecs_saas_operator WITH CHECK (true);
-- Row locks need an UPDATE policy; the column grant below and WITH CHECK (false) change nothing.
CREATE POLICY operator_lock ON accounts FOR UPDATE TO ecs_saas_operator USING (true) WITH CHECK (false);
CREATE POLICY operator_all ON usage FOR ALL TO ecs_saas_operator USING (true) WITH CHECK (true);
CREATE POLICY operator_all ON invoices FOR SELECT TO ecs_saas_operator USING (true);
CREATE POLICY operator_insert_all ON invoices FOR INSERT TO ecs_saas_operator WITH CHECK (true);
CREATE POLICY operator_all ON api_keys FOR ALL TO ecs_saas_operator USING (true) WITH CHECK (true);
CREATE POLICY operator_all ON usage_daily FOR ALL TO ecs_saas_operator USING (true) WITH CHECK (true);

GRANT SELECT, INSERT ON accounts, usage, invoices TO ecs_saas_operator;
GRANT UPDATE (status) ON accounts TO ecs_saas_operator;
GRANT SELECT, INSERT, UPDATE (revoked_at) ON api_keys TO ecs_saas_operator;
GRANT SELECT, INSERT, UPDATE ON usage_daily TO ecs_saas_operator;
-- The view still tests app.operator, which the operator's transactions set as before.
GRANT SELECT ON tenant_account_usage_30d TO ecs_saas_operator;
GRANT EXECUTE ON FUNCTION api_key_account(bytea) TO ecs_saas_operator;

-- Down Migration
REVOKE ALL ON FUNCTION api_key_account(bytea) FROM ecs_saas_operator;
REVOKE ALL ON tenant_account_usage_30d, usage_daily, api_keys, invoices, usage, accounts FROM ecs_saas_operator;
DROP POLICY operator_all ON usage_daily;
DROP POLICY operator_all ON api_keys;
DROP POLICY operator_insert_all ON invoices;
DROP POLICY operator_all ON invoices;
DROP POLICY operator_all ON usage;
DROP POLICY operator_lock ON accounts;
DROP POLICY operator_insert_all ON accounts;
DROP POLICY operator_all ON accounts;
REVOKE USAGE ON SCHEMA public FROM ecs_saas_operator;
