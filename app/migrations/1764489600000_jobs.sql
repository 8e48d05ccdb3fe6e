-- Up Migration
-- Applied before the migration lint (npm run lint:migrations) existed, to tables that were new
-- or nearly empty; their locks lasted milliseconds. A new migration gets no such exception.
-- squawk-ignore-file require-lock-timeout, require-concurrent-index-creation, require-concurrent-index-deletion, constraint-missing-not-valid, disallowed-unique-constraint

-- job_runs (created by the initial migration) gets the constraints the job runner relies on.
-- Each row is one attempt of one run; a run is keyed by (job, scheduled_time), its run key.
-- Attempts are numbered across every invocation of the run key, so the pair is unique.
DROP INDEX job_runs_key;
ALTER TABLE job_runs
  ADD CONSTRAINT job_runs_attempt_key UNIQUE (job, scheduled_time, attempt),
  -- A finished attempt has its finish time; a running one has none.
  ADD CONSTRAINT job_runs_finished_check CHECK ((status = 'running') = (finished_at IS NULL)),
  ADD CONSTRAINT job_runs_progress_check CHECK (processed >= 0 AND (total IS NULL OR total >= 0));
-- The advisory lock already lets one process work on a run key; this makes a second
-- `running` attempt of the same key impossible even if that rule were broken.
CREATE UNIQUE INDEX job_runs_one_running ON job_runs (job, scheduled_time) WHERE status = 'running';

-- Daily usage rollups, written by report-aggregation: one row per UTC day, account and
-- metric. An upsert on the primary key makes a rerun replace the day's figures.
CREATE TABLE usage_daily (
  day        date        NOT NULL,
  account_id bigint      NOT NULL REFERENCES accounts (id),
  metric     text        NOT NULL,
  quantity   bigint      NOT NULL CHECK (quantity >= 0),
  -- Usage rows summed into `quantity`.
  events     bigint      NOT NULL CHECK (events >= 0),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (day, account_id, metric)
);
CREATE INDEX usage_daily_account_day ON usage_daily (account_id, day);

-- Down Migration
DROP TABLE usage_daily;
DROP INDEX job_runs_one_running;
ALTER TABLE job_runs
  DROP CONSTRAINT job_runs_progress_check,
  DROP CONSTRAINT job_runs_finished_check,
  DROP CONSTRAINT job_runs_attempt_key;
CREATE INDEX job_runs_key ON job_runs (job, scheduled_time);
