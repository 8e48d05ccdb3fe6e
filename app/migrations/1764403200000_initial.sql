-- Up Migration
-- Applied before the migration lint (npm run lint:migrations) existed, to tables that were new
-- or nearly empty; their locks lasted milliseconds. A new migration gets no such exception.
-- squawk-ignore-file require-lock-timeout, require-concurrent-index-creation

-- A customer of the SaaS. Only `active` accounts are billed.
CREATE TABLE accounts (
  id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name             text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  email            text        NOT NULL CHECK (length(email) BETWEEN 3 AND 320),
  plan             text        NOT NULL DEFAULT 'standard' CHECK (plan IN ('free', 'standard', 'enterprise')),
  status           text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended', 'closed')),
  -- Price of one usage unit, in cents; an invoice charges sum(quantity) * unit_price_cents.
  unit_price_cents integer     NOT NULL DEFAULT 1 CHECK (unit_price_cents >= 0),
  created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX accounts_email_key ON accounts (lower(email));
CREATE INDEX accounts_status_id ON accounts (status, id);

-- Metered usage, one row per reported event. A client retrying a report sends the same
-- idempotency key, and the second insert changes nothing.
CREATE TABLE usage (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account_id      bigint      NOT NULL REFERENCES accounts (id),
  metric          text        NOT NULL CHECK (metric ~ '^[a-z][a-z0-9_.]{0,63}$'),
  quantity        bigint      NOT NULL CHECK (quantity >= 0),
  occurred_at     timestamptz NOT NULL DEFAULT now(),
  idempotency_key text        CHECK (length(idempotency_key) BETWEEN 1 AND 200),
  created_at      timestamptz NOT NULL DEFAULT now(),
  UNIQUE (account_id, idempotency_key)
);
CREATE INDEX usage_account_occurred ON usage (account_id, occurred_at);
CREATE INDEX usage_occurred ON usage (occurred_at);

-- One invoice per account and billing period (a UTC day). The unique key is what makes
-- billing-run safe to rerun, and safe against a concurrent duplicate run.
CREATE TABLE invoices (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account_id   bigint      NOT NULL REFERENCES accounts (id),
  period_start date        NOT NULL,
  period_end   date        NOT NULL CHECK (period_end > period_start),
  quantity     bigint      NOT NULL CHECK (quantity >= 0),
  amount_cents bigint      NOT NULL CHECK (amount_cents >= 0),
  currency     text        NOT NULL DEFAULT 'usd',
  created_at   timestamptz NOT NULL DEFAULT now(),
  UNIQUE (account_id, period_start)
);
CREATE INDEX invoices_period ON invoices (period_start);

-- Each row is one attempt of one run of a scheduled job. A run is keyed by (job, scheduled_time).
CREATE TABLE job_runs (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job            text        NOT NULL,
  scheduled_time timestamptz NOT NULL,
  status         text        NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'interrupted', 'abandoned')),
  attempt        integer     NOT NULL DEFAULT 1 CHECK (attempt >= 1),
  started_at     timestamptz NOT NULL DEFAULT now(),
  finished_at    timestamptz,
  heartbeat_at   timestamptz NOT NULL DEFAULT now(),
  processed      bigint      NOT NULL DEFAULT 0,
  total          bigint,
  checkpoint     jsonb,
  error          text,
  -- The ECS task ARN from the metadata endpoint, else the hostname.
  ran_on         text        NOT NULL
);
CREATE INDEX job_runs_key ON job_runs (job, scheduled_time);
CREATE INDEX job_runs_job_started ON job_runs (job, started_at DESC);
CREATE INDEX job_runs_running ON job_runs (job) WHERE status = 'running';

-- Usage over the last 30 days per account, for GET /accounts/:id. Summing the raw usage on
-- every request is costly for a busy account, so the usage-summary worker refreshes this
-- view in the background, on one replica at a time.
CREATE MATERIALIZED VIEW account_usage_30d AS
  SELECT account_id, sum(quantity)::bigint AS quantity, max(occurred_at) AS last_usage_at, now() AS refreshed_at
  FROM usage
  WHERE occurred_at >= now() - interval '30 days'
  GROUP BY account_id;
-- REFRESH ... CONCURRENTLY needs a unique index, and keeps the view readable while it runs.
CREATE UNIQUE INDEX account_usage_30d_account ON account_usage_30d (account_id);

-- Down Migration
DROP MATERIALIZED VIEW account_usage_30d;
DROP TABLE job_runs;
DROP TABLE invoices;
DROP TABLE usage;
DROP TABLE accounts;
