-- Up Migration
-- Applied before the migration lint (npm run lint:migrations) existed, to tables that were new
-- or nearly empty; their locks lasted milliseconds. A new migration gets no such exception.
-- squawk-ignore-file require-lock-timeout, require-concurrent-index-creation

-- Tenant isolation in Postgres (docs/security.md).
--
-- The API's queries, and billing-run's and report-aggregation's, run inside a transaction
-- that does `SET LOCAL ROLE ecs_saas_app` and sets the caller's identity with
-- set_config(..., true): `app.account_id` for an account, `app.operator = on` for the
-- operator. The role has no BYPASSRLS and owns nothing, so every policy below binds it. A
-- transaction that sets no identity sees no tenant row: the settings read as NULL.
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ecs_saas_app') THEN
    -- Roles are per cluster: another database of the same cluster may have created it.
    CREATE ROLE ecs_saas_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT;
  END IF;
END $$;
-- The login user (the migrating one, the same the server connects as) may SET ROLE to it.
GRANT ecs_saas_app TO CURRENT_USER;
GRANT USAGE ON SCHEMA public TO ecs_saas_app;

-- The policies below spell the identity out, `current_setting('app.operator', true) = 'on'`
-- for the operator and `nullif(current_setting('app.account_id', true), '')::bigint` for the
-- account, rather than call SQL functions: the planner would parse such a function's body on
-- every query, which cost about a third of the isolation's overhead (docs/performance.md).
-- An unset setting reads as NULL (or '' once used), so neither test passes: no rows.

-- Account API keys: only the SHA-256 of the key is stored; `prefix` is its first characters,
-- shown in listings so that a key can be told apart without being readable.
CREATE TABLE api_keys (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account_id bigint      NOT NULL REFERENCES accounts (id),
  prefix     text        NOT NULL,
  key_hash   bytea       NOT NULL UNIQUE CHECK (length(key_hash) = 32),
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);
CREATE INDEX api_keys_account ON api_keys (account_id, id);

-- Authentication happens before there is an identity, so it cannot read api_keys through the
-- policies: this function (run with its owner's rights) answers only "whose live key has this
-- hash", and nothing else about the table.
CREATE FUNCTION api_key_account(hash bytea) RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER
  SET search_path = public, pg_temp
  AS $$ SELECT account_id FROM api_keys WHERE key_hash = hash AND revoked_at IS NULL $$;
REVOKE ALL ON FUNCTION api_key_account(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION api_key_account(bytea) TO ecs_saas_app;

ALTER TABLE accounts ENABLE ROW LEVEL SECURITY;
ALTER TABLE usage ENABLE ROW LEVEL SECURITY;
ALTER TABLE invoices ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE usage_daily ENABLE ROW LEVEL SECURITY;

-- Only the operator creates accounts; an account sees only itself.
CREATE POLICY tenant_read ON accounts FOR SELECT TO ecs_saas_app USING (current_setting('app.operator', true) = 'on' OR id = nullif(current_setting('app.account_id', true), '')::bigint);
CREATE POLICY operator_insert ON accounts FOR INSERT TO ecs_saas_app WITH CHECK (current_setting('app.operator', true) = 'on');
-- FOR SHARE / FOR NO KEY UPDATE (the late-usage check and billing's lock) need an UPDATE policy.
CREATE POLICY tenant_lock ON accounts FOR UPDATE TO ecs_saas_app USING (current_setting('app.operator', true) = 'on' OR id = nullif(current_setting('app.account_id', true), '')::bigint) WITH CHECK (false);

CREATE POLICY tenant_rows ON usage FOR ALL TO ecs_saas_app
  USING (current_setting('app.operator', true) = 'on' OR account_id = nullif(current_setting('app.account_id', true), '')::bigint) WITH CHECK (current_setting('app.operator', true) = 'on' OR account_id = nullif(current_setting('app.account_id', true), '')::bigint);
CREATE POLICY tenant_read ON invoices FOR SELECT TO ecs_saas_app USING (current_setting('app.operator', true) = 'on' OR account_id = nullif(current_setting('app.account_id', true), '')::bigint);
CREATE POLICY operator_insert ON invoices FOR INSERT TO ecs_saas_app WITH CHECK (current_setting('app.operator', true) = 'on');
CREATE POLICY tenant_rows ON api_keys FOR ALL TO ecs_saas_app
  USING (current_setting('app.operator', true) = 'on' OR account_id = nullif(current_setting('app.account_id', true), '')::bigint) WITH CHECK (current_setting('app.operator', true) = 'on' OR account_id = nullif(current_setting('app.account_id', true), '')::bigint);
CREATE POLICY tenant_read ON usage_daily FOR SELECT TO ecs_saas_app USING (current_setting('app.operator', true) = 'on' OR account_id = nullif(current_setting('app.account_id', true), '')::bigint);
CREATE POLICY operator_write ON usage_daily FOR ALL TO ecs_saas_app USING (current_setting('app.operator', true) = 'on') WITH CHECK (current_setting('app.operator', true) = 'on');

GRANT SELECT, INSERT ON accounts, usage, invoices TO ecs_saas_app;
-- Column-level: enough for row locks, useless for changing an account.
GRANT UPDATE (status) ON accounts TO ecs_saas_app;
GRANT SELECT, INSERT, UPDATE (revoked_at) ON api_keys TO ecs_saas_app;
GRANT SELECT, INSERT, UPDATE ON usage_daily TO ecs_saas_app;

-- A materialized view cannot have policies. The role reads the 30-day summary through the
-- view tenant_account_usage_30d, which applies the same rule, and has no right on the
-- materialized view itself. Its sum is now numeric: no account's usage can overflow the
-- refresh for everyone.
DROP MATERIALIZED VIEW account_usage_30d;
CREATE MATERIALIZED VIEW account_usage_30d AS
  SELECT account_id, sum(quantity) AS quantity, max(occurred_at) AS last_usage_at, now() AS refreshed_at
  FROM usage
  WHERE occurred_at >= now() - interval '30 days'
  GROUP BY account_id;
CREATE UNIQUE INDEX account_usage_30d_account ON account_usage_30d (account_id);
CREATE VIEW tenant_account_usage_30d WITH (security_barrier) AS
  SELECT * FROM account_usage_30d WHERE current_setting('app.operator', true) = 'on' OR account_id = nullif(current_setting('app.account_id', true), '')::bigint;
GRANT SELECT ON tenant_account_usage_30d TO ecs_saas_app;

-- Down Migration
DROP VIEW tenant_account_usage_30d;
DROP MATERIALIZED VIEW account_usage_30d;
CREATE MATERIALIZED VIEW account_usage_30d AS
  SELECT account_id, sum(quantity)::bigint AS quantity, max(occurred_at) AS last_usage_at, now() AS refreshed_at
  FROM usage
  WHERE occurred_at >= now() - interval '30 days'
  GROUP BY account_id;
CREATE UNIQUE INDEX account_usage_30d_account ON account_usage_30d (account_id);
REVOKE ALL ON usage_daily, api_keys, invoices, usage, accounts FROM ecs_saas_app;
DROP POLICY operator_write ON usage_daily;
DROP POLICY tenant_read ON usage_daily;
DROP POLICY tenant_rows ON api_keys;
DROP POLICY operator_insert ON invoices;
DROP POLICY tenant_read ON invoices;
DROP POLICY tenant_rows ON usage;
DROP POLICY tenant_lock ON accounts;
DROP POLICY operator_insert ON accounts;
DROP POLICY tenant_read ON accounts;
ALTER TABLE usage_daily DISABLE ROW LEVEL SECURITY;
ALTER TABLE invoices DISABLE ROW LEVEL SECURITY;
ALTER TABLE usage DISABLE ROW LEVEL SECURITY;
ALTER TABLE accounts DISABLE ROW LEVEL SECURITY;
DROP FUNCTION api_key_account(bytea);
DROP TABLE api_keys;
REVOKE USAGE ON SCHEMA public FROM ecs_saas_app;
