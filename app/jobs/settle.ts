/**
 * Step 4 of a run (app/jobs/runner.ts): settling earlier runs. With both locks held, every
 * `running` row of this job belongs to a process that lost its locks: one that died (its
 * connection closed) or, rarely, one still alive whose lock connection broke. A row whose
 * lock session (`lock_pid`) is gone, or whose heartbeat is older than STALE_AFTER_HEARTBEATS
 * intervals, is marked `abandoned` at once. A row whose session still exists is waited for
 * until its heartbeat goes stale, or treated as running when its heartbeat moves.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { PoolClient } from '../db.js';
import { stopOf, stoppedBeforeStart, type RunOutcome } from './outcome.js';
import type { RunState } from './run-state.js';

/** A `running` row whose heartbeat is older than this many intervals, and whose lock is free, is abandoned. */
export const STALE_AFTER_HEARTBEATS = 3;

interface RunningRow {
  id: string;
  scheduled_time: Date;
  attempt: number;
  heartbeat_ms: string;
  age_ms: number;
  abandoned: boolean;
  /** Why it was abandoned: its lock session is gone, or its heartbeat is stale. */
  session_gone: boolean;
  lock_pid: number | null;
}

/** True when no other run of the job is marked running any more, else the run's outcome. */
export async function settlePreviousRuns(s: RunState, db: PoolClient): Promise<true | RunOutcome> {
  s.phase = 'checking for abandoned runs';
  const staleMs = STALE_AFTER_HEARTBEATS * s.o.config.HEARTBEAT_INTERVAL_MS;
  const firstSeen = new Map<string, string>();
  for (;;) {
    // The lock session is gone when no backend has its pid. A reused pid only looks alive:
    // the row then goes stale by its heartbeat, the safe side.
    const { rows } = await db.query<RunningRow>(
      `WITH stale AS (
         UPDATE job_runs r
         SET status = 'abandoned', finished_at = now(),
             error = CASE WHEN gone.yes
               THEN format('abandoned: its lock session (backend pid %s) is gone and its lock was free', r.lock_pid)
               ELSE format('abandoned: no heartbeat since %s (over %s ms) and its lock was free', r.heartbeat_at, $2::int) END
         FROM job_runs o
         CROSS JOIN LATERAL (SELECT o.lock_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = o.lock_pid) AS yes) gone
         WHERE r.id = o.id AND o.job = $1 AND o.status = 'running'
           AND (gone.yes OR o.heartbeat_at < now() - make_interval(secs => $2::int / 1000.0))
         RETURNING r.id, r.scheduled_time, r.attempt, o.heartbeat_at, o.lock_pid, gone.yes AS session_gone
       )
       SELECT id::text, scheduled_time, attempt, (extract(epoch FROM heartbeat_at) * 1000)::text AS heartbeat_ms,
              (extract(epoch FROM now() - heartbeat_at) * 1000)::float8 AS age_ms, true AS abandoned, session_gone, lock_pid
       FROM stale
       UNION ALL
       SELECT id::text, scheduled_time, attempt, (extract(epoch FROM heartbeat_at) * 1000)::text,
              (extract(epoch FROM now() - heartbeat_at) * 1000)::float8, false, false, lock_pid
       FROM job_runs
       WHERE job = $1 AND status = 'running' AND id NOT IN (SELECT id FROM stale)`,
      [s.job.name, staleMs],
    );
    for (const r of rows.filter((row) => row.abandoned)) {
      const same = r.scheduled_time.getTime() === s.o.scheduledTime.getTime();
      const why = r.session_gone ? `its lock session (backend pid ${r.lock_pid}) is gone` : `no heartbeat for ${Math.round(r.age_ms)} ms`;
      s.log.warn(
        { abandonedRunId: r.id, abandonedScheduledTime: r.scheduled_time.toISOString(), heartbeatAgeMs: Math.round(r.age_ms), sessionGone: r.session_gone, lockPid: r.lock_pid },
        `run #${r.id} (${r.scheduled_time.toISOString()}, attempt ${r.attempt}) is abandoned: ${why} and its lock is free; ${
          same ? 'this run resumes from its checkpoint' : `rerun ${s.job.name} --scheduled-time ${r.scheduled_time.toISOString()} to finish it`
        }`,
      );
    }
    const live = rows.filter((row) => !row.abandoned);
    if (live.length === 0) return true;

    const moved = live.find((r) => firstSeen.has(r.id) && firstSeen.get(r.id) !== r.heartbeat_ms);
    if (moved) {
      const same = moved.scheduled_time.getTime() === s.o.scheduledTime.getTime();
      if (same) {
        s.log.warn({ outcome: 'already-running', runId: moved.id }, `already running: run #${moved.id} of this run key still beats its heartbeat, though its lock is free; exiting 0`);
        return { kind: 'already-running' };
      }
      if (s.job.overlap === 'skip') {
        s.log.info({ outcome: 'skipped', runId: moved.id }, `skipped: run #${moved.id} (${moved.scheduled_time.toISOString()}) is still going and the overlap policy is "skip"; exiting 0`);
        return { kind: 'skipped' };
      }
    }
    for (const r of live) if (!firstSeen.has(r.id)) firstSeen.set(r.id, r.heartbeat_ms);
    const waitMs = Math.max(50, Math.min(...live.map((r) => staleMs - r.age_ms)) + 50);
    s.log.info(
      { runningRunIds: live.map((r) => r.id), waitMs: Math.round(waitMs) },
      `run #${live[0]!.id} is marked running but its lock is free; waiting ${Math.round(waitMs)} ms to see whether its heartbeat stops (abandoned) or goes on (alive)`,
    );
    try {
      await sleep(waitMs, undefined, { signal: s.stop });
    } catch {
      return stoppedBeforeStart(s, db, stopOf(s.stop), 'while checking for abandoned runs');
    }
  }
}
