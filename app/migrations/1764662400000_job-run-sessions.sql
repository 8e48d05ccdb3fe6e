-- Up Migration
-- Applied before the migration lint (npm run lint:migrations) existed, to tables that were new
-- or nearly empty; their locks lasted milliseconds. A new migration gets no such exception.
-- squawk-ignore-file require-lock-timeout

-- The backend pid of the session that holds a run's lock while an attempt is `running`. A
-- rerun that holds both of the job's advisory locks and finds no backend with this pid knows
-- at once that the attempt's process is gone (killed, or its connection dropped), instead of
-- waiting three heartbeats for the row to go stale.
ALTER TABLE job_runs ADD COLUMN lock_pid integer;

-- Down Migration
ALTER TABLE job_runs DROP COLUMN lock_pid;
