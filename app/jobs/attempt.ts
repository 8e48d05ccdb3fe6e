/**
 * One attempt of a run: the handler's context, the heartbeat that proves the run lock is
 * still held, the injected faults of the tests, and the grace a stopping handler is given.
 */
import pg from 'pg';
import type { PoolClient } from '../db.js';
import { dbTrouble } from '../db-errors.js';
import type { Logger } from '../logger.js';
import { errorText } from '../shutdown.js';
import type { JobContext } from './handler.js';
import { Stop, stopOf } from './outcome.js';
import { formatProgress } from './progress.js';
import type { RunState } from './run-state.js';
import { BatchSpans } from './run-span.js';
import { backInReach } from './reconnect.js';

/**
 * After SIGTERM or the timeout, the handler has this share of SHUTDOWN_TIMEOUT_MS to finish
 * its batch; the rest records the run, releases the locks and closes the pool.
 */
export const STOP_GRACE_SHARE = 0.75;

/**
 * A batch that carries its checkpoint commits asynchronously: without waiting for the WAL
 * flush. If Postgres itself crashes within a moment of the commit (three times
 * wal_writer_delay), the batch is lost together with its checkpoint, never one without the
 * other, and the rerun redoes it from the checkpoint before. Every synchronous commit
 * flushes the WAL written before it, so the run's outcome ("succeeded", "interrupted", ...)
 * is never on disk before its batches. billing-run's batches each waited for a flush of a few
 * MB of WAL, one wait per batch the single statement does not have (docs/performance.md).
 */
export const ASYNC_BATCH_COMMIT = 'SET LOCAL synchronous_commit = off;';

export type Attempt =
  | { kind: 'succeeded'; summary: Record<string, unknown> }
  | { kind: 'stopped'; stop: Stop }
  | { kind: 'error'; error: string; disconnected: boolean; cause: unknown };

export async function runAttempt(s: RunState, db: PoolClient, runId: string, index: number, checkpoint: unknown, log: Logger): Promise<Attempt> {
  const lost = new AbortController();
  const signal = AbortSignal.any([s.stop, lost.signal]);
  let open = true;
  s.phase = 'working';
  s.progress.begin(checkpoint === undefined);
  s.progressLine.start();
  const batches = new BatchSpans(s.job.name);

  const ctx: JobContext<unknown> = {
    job: s.job,
    scheduledTime: s.o.scheduledTime,
    pool: s.o.pool,
    config: s.o.config,
    logger: log,
    signal,
    checkpoint,
    progress: (processed, total) => s.progress.report(processed, total),
    saveCheckpoint: async (next, processed, tx) => {
      if (!open) throw new Error('this attempt is over: its checkpoint can no longer change');
      s.progress.report(processed);
      if (tx === undefined) {
        await db.query(`UPDATE job_runs SET checkpoint = $2, processed = $3, total = $4, heartbeat_at = now() WHERE id = $1`, [runId, JSON.stringify(next), processed, s.progress.total]);
        s.lastCheckpoint = next;
        committed = next;
        batches.checkpoint(processed);
        backInReach(s);
        return;
      }
      // In the handler's transaction, whose role (the operator's) may not write job_runs: the role
      // is reset in the same round trip, so the values go as literals. Only a row still
      // "running" takes it: a run taken over meanwhile rolls the batch back.
      // The batch then commits without waiting for its WAL to reach the disk (ASYNC_BATCH_COMMIT).
      const results = (await tx.query(
        `${ASYNC_BATCH_COMMIT} SET LOCAL ROLE NONE; UPDATE job_runs SET checkpoint = ${pg.escapeLiteral(JSON.stringify(next))}::jsonb, processed = ${Number(processed)}, total = ${s.progress.total === null ? 'NULL' : Number(s.progress.total)}, heartbeat_at = now() WHERE id = ${BigInt(runId)} AND status = 'running'`,
      )) as unknown as pg.QueryResult[];
      if (results.at(-1)?.rowCount !== 1) throw new Error(`run #${runId} is no longer "running": its checkpoint was not saved`);
      s.lastCheckpoint = next;
      inTransaction = true;
      batches.checkpoint(processed);
      backInReach(s);
    },
  };
  // The last checkpoint known to be committed, and whether one was written in a transaction
  // of the handler's, which may have rolled back after the call returned.
  let committed = checkpoint;
  let inTransaction = false;
  let failure: unknown;

  let beating: Promise<void> | undefined;
  const beat = async () => {
    const p = s.progress.snapshot();
    try {
      const { rowCount } = await db.query(`UPDATE job_runs SET heartbeat_at = now(), processed = $2, total = $3 WHERE id = $1 AND status = 'running'`, [runId, p.processed, p.total]);
      if (rowCount !== 1) throw new Error('its row is no longer "running"');
      backInReach(s);
    } catch (err) {
      lost.abort(new Stop('lock-lost', `lost the run's lock: the heartbeat failed (${errorText(err)})`));
      return;
    }
    s.metrics.emit(
      { heartbeat: 1, processed: p.processed },
      { processed: p.processed, total: p.total, rate: p.rate === null ? null : Math.round(p.rate), etaSeconds: p.etaSeconds === null ? null : Math.round(p.etaSeconds) },
      `heartbeat: ${formatProgress(p)}`,
    );
  };
  const heartbeat = setInterval(() => {
    beating ??= beat().finally(() => (beating = undefined));
  }, s.o.config.HEARTBEAT_INTERVAL_MS);
  s.metrics.emit({ heartbeat: 1, processed: s.progress.processed }, {}, 'heartbeat: started');

  try {
    const crash = s.o.faults?.crash;
    if (crash && index === 1) {
      // Outside any promise chain of the runner, as a bug in a library callback would be.
      setImmediate(() => {
        const err = new Error(`injected crash (JOB_FAULT_INJECTION crash=${crash})`);
        if (crash === 'exception') throw err;
        void Promise.reject(err);
      });
    }
    const failAttempts = s.o.faults?.failAttempts ?? 0;
    if (index <= failAttempts) {
      throw new Error(`injected failure (JOB_FAULT_INJECTION fail-attempts=${Number.isFinite(failAttempts) ? failAttempts : 'all'}): attempt ${index} fails on purpose`);
    }
    const summary = await untilStopped(s, s.o.handler.run(ctx), signal, () => cancelStatements(s, db));
    inTransaction = false; // the handler resolved: every transaction of its own has committed
    return { kind: 'succeeded', summary };
  } catch (err) {
    if (s.stop.aborted) return { kind: 'stopped', stop: stopOf(s.stop) };
    failure = err;
    // The heartbeat found the lock's connection gone, or a statement failed on a lost connection:
    // no retry may run without the lock, so the runner reconnects and takes it again.
    if (lost.signal.aborted) return { kind: 'error', error: stopOf(lost.signal).message, disconnected: true, cause: err };
    const trouble = dbTrouble(err);
    // A statement timeout is the job's own (too big a batch); the others say the database is away for now.
    if ((trouble !== undefined && trouble !== 'timed-out') || !(await s.locks[0]!.verify())) {
      return { kind: 'error', error: `${trouble === 'busy' || trouble === 'read-only' ? `the database is ${trouble}` : 'lost the database connection'}: ${errorText(err)}`, disconnected: true, cause: err };
    }
    return { kind: 'error', error: errorText(err), disconnected: false, cause: err };
  } finally {
    // The open batch failed with the attempt, unless a stop (a shutdown, a timeout) cut it short.
    batches.end(failure);
    open = false;
    clearInterval(heartbeat);
    await beating;
    // With the lock's connection lost, the row is not asked: the reconnection reads it anew.
    if (inTransaction) s.lastCheckpoint = lost.signal.aborted ? committed : await committedCheckpoint(db, runId, committed);
    s.progressLine.stop();
    s.phase = 'recording the outcome';
  }
}

/**
 * The checkpoint on the run's row: what a retry resumes from after an attempt whose last
 * checkpoint was written in a transaction that may not have committed. When the row cannot be
 * read (the database is away), `known`, the last one known to be committed: at worst a batch
 * is done again, which every batch allows. A reconnection reads the row anew anyway.
 */
async function committedCheckpoint(db: PoolClient, runId: string, known: unknown): Promise<unknown> {
  try {
    const { rows } = await db.query<{ checkpoint: unknown }>('SELECT checkpoint FROM job_runs WHERE id = $1', [runId]);
    return rows[0]?.checkpoint ?? known;
  } catch {
    return known;
  }
}

/**
 * The handler's promise, or a rejection once `signal` aborted and the grace period passed
 * without it; then `abandon` cancels what the handler still runs first.
 */
function untilStopped<T>(s: RunState, work: Promise<T>, signal: AbortSignal, abandon: () => Promise<void>): Promise<T> {
  const graceMs = Math.floor(s.o.config.SHUTDOWN_TIMEOUT_MS * STOP_GRACE_SHARE);
  return new Promise<T>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const onAbort = () => {
      timer = setTimeout(() => {
        void abandon().finally(() => reject(new Error(`the handler did not stop within ${graceMs} ms`)));
      }, graceMs);
    };
    work.then(resolve, reject).finally(() => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    });
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A handler abandoned at the end of its grace may still wait on a statement (a lock, a long
 * batch): its connection would never come back, and the pool's close would hold the process
 * until the shutdown deadline forced an exit that nobody alerts. So its statements are
 * cancelled (pg_cancel_backend, on the run lock's connection, which is idle meanwhile): they
 * fail at once, their connections return, and the run records "interrupted" within the grace.
 */
async function cancelStatements(s: RunState, db: PoolClient): Promise<void> {
  const own = new Set(s.locks.filter((l) => l.held).map((l) => l.connection));
  const pids = [...s.checkedOut]
    .filter((c) => !own.has(c))
    .map((c) => (c as unknown as { processID: number | null }).processID)
    .filter((pid): pid is number => typeof pid === 'number');
  if (pids.length === 0) return;
  try {
    const { rows } = await db.query<{ cancelled: number }>('SELECT count(*) FILTER (WHERE pg_cancel_backend(pid))::int AS cancelled FROM unnest($1::int[]) AS pid', [pids]);
    s.log.warn({ pids, cancelled: rows[0]!.cancelled }, `the handler did not stop within its grace; cancelled the statements of its ${pids.length} connection(s) (backend pids ${pids.join(', ')}) so that they come back to the pool`);
  } catch (err) {
    s.log.warn({ pids, err: errorText(err) }, `could not cancel the handler's statements (backend pids ${pids.join(', ')}): ${errorText(err)}`);
  }
}
