/**
 * `npm run bench:faults`: how long a killed job and a database restart take to heal, on real processes
 * and a Postgres of the benchmark's own (it is stopped and started).
 *
 *   1. kill -9 of billing-run mid-run, then an immediate rerun: time from the kill to the
 *      rerun's first batch (its first checkpoint). Goal: under 1 s. The baseline is what the
 *      rerun waited before lock_pid existed: 3 heartbeats (45 s at the default 15 s), by
 *      construction, and measured here with a short heartbeat by clearing lock_pid.
 *   2. A Postgres restart (fast shutdown, start again at once) under two API replicas: time
 *      from Postgres accepting connections again to the API answering 200 again, and to
 *      one replica leading the usage-summary worker again (period USAGE_SUMMARY_REFRESH_MS).
 *
 * BENCH_ROUNDS changes the number of rounds (default 5).
 */
import { applicationName } from '../app/db.js';
import { setTimeout as sleep } from 'node:timers/promises';
import pgm from 'pg';
import { seedDemoData } from '../app/seed.js';
import { startOwnPostgres, type OwnPostgres } from '../test/helpers/own-postgres.js';
import { start, type Proc } from '../test/helpers/process.js';
import { fmt, median } from './lib.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const SCHEDULED = '2025-03-10T00:15:00.000Z';
const WORKER_PERIOD_MS = 1_000;
const out = (line = '') => process.stdout.write(`${line}\n`);

async function until(fn: () => Promise<boolean>, timeoutMs: number, everyMs = 5, what = 'the condition'): Promise<number> {
  const end = performance.now() + timeoutMs;
  for (;;) {
    if (await fn().catch(() => false)) return performance.now();
    if (performance.now() > end) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}

function jobEnv(pg: OwnPostgres, extra: Record<string, string> = {}): Record<string, string> {
  return { DATABASE_URL: pg.url, SCHEDULED_TIME: SCHEDULED, JOB_BATCH_SIZE: '20', LOG_LEVEL: 'warn', ...extra };
}

interface Takeover {
  /** Kill to the rerun's first log line: Node and module start-up. */
  readonly startedMs: number;
  /** Kill to "attempt 2 started": locks taken, the killed attempt found abandoned. */
  readonly attemptMs: number;
  /** Kill to the rerun's first checkpoint. */
  readonly firstBatchMs: number;
}

/** Kill -9 mid-run, rerun at once; the times from the kill, on one clock (epoch ms). */
async function killAndRerun(pg: OwnPostgres, { clearLockPid, heartbeatMs }: { clearLockPid: boolean; heartbeatMs: number }): Promise<Takeover> {
  await pg.query(`DELETE FROM invoices; DELETE FROM job_runs`);
  const env = jobEnv(pg, { HEARTBEAT_INTERVAL_MS: String(heartbeatMs) });
  const watch = new pgm.Client({ connectionString: pg.url, application_name: 'bench' });
  await watch.connect();
  try {
    const progressed = async (sql: string) => (await watch.query(sql)).rowCount! > 0;
    const victim = start(['billing-run'], env);
    await until(() => progressed(`SELECT 1 FROM job_runs WHERE status = 'running' AND processed > 0`), 30_000);
    victim.kill('SIGKILL');
    const killedAt = Date.now();
    await victim.exited;
    if (clearLockPid) await watch.query(`UPDATE job_runs SET lock_pid = NULL WHERE status = 'running'`);
    const rerun: Proc = start(['billing-run'], { ...env, LOG_LEVEL: 'info' });
    await until(() => progressed(`SELECT 1 FROM job_runs WHERE attempt = 2 AND processed > 0`), 10 * heartbeatMs + 30_000, 2);
    const firstBatchMs = Date.now() - killedAt;
    const { code } = await rerun.exited;
    if (code !== 0) throw new Error(`the rerun exited ${code}: ${rerun.stderr()}`);
    const at = (pred: (msg: string) => boolean) => Date.parse(rerun.logs.find((l) => pred(l.msg))!.time as string) - killedAt;
    return { startedMs: at(() => true), attemptMs: at((m) => m.includes('attempt 2 started')), firstBatchMs };
  } finally {
    await watch.end();
  }
}

async function restartUnderApi(pg: OwnPostgres, replicas: (Proc & { url: string })[]): Promise<{ apiMs: number; workerMs: number; downMs: number }> {
  const t0 = performance.now();
  await pg.restart();
  const upAt = performance.now();
  const api = until(async () => (await fetch(`${replicas[0]!.url}/debug/sleep?ms=0`)).status === 200, 30_000, 5, 'the API answering 200');
  const worker = until(
    async () => (await pg.query(`SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND a.application_name = '${applicationName('api')}'`)).length === 1,
    30_000,
    20,
    'one replica leading the worker',
  );
  try {
    return { apiMs: (await api) - upAt, workerMs: (await worker) - upAt, downMs: upAt - t0 };
  } catch (err) {
    for (const r of replicas) out(r.logs.slice(-15).map((l) => `   | ${l.time as string} ${l.msg}`).join('\n'));
    throw err;
  }
}

async function main(): Promise<void> {
  const pg = await startOwnPostgres();
  try {
    await pg.withClient((c) => seedDemoData(c, { accounts: 5_000, days: 1, now: new Date('2025-03-10T12:00:00Z') }));

    out(`1. kill -9 of billing-run mid-run, then a rerun at once (${ROUNDS} rounds, 5,000 accounts, JOB_BATCH_SIZE=20)`);
    const now: Takeover[] = [];
    for (let i = 0; i < ROUNDS; i++) now.push(await killAndRerun(pg, { clearLockPid: false, heartbeatMs: 15_000 }));
    const heartbeatMs = 1_000;
    const before: Takeover[] = [];
    for (let i = 0; i < Math.min(ROUNDS, 3); i++) before.push(await killAndRerun(pg, { clearLockPid: true, heartbeatMs }));
    const m = (rows: Takeover[], k: keyof Takeover) => median(rows.map((r) => r[k]));
    out(`   with lock_pid, kill to: the rerun's first log line ${fmt(m(now, 'startedMs'), 0)} ms, "attempt 2 started" ${fmt(m(now, 'attemptMs'), 0)} ms, its first batch ${fmt(m(now, 'firstBatchMs'), 0)} ms (medians; first batch min ${fmt(Math.min(...now.map((r) => r.firstBatchMs)), 0)}, max ${fmt(Math.max(...now.map((r) => r.firstBatchMs)), 0)}) ${m(now, 'firstBatchMs') < 1_000 ? 'OK' : 'MISSED'} (goal < 1 s)`);
    out(`   of which the takeover itself (first log line to "attempt 2 started"): ${fmt(m(now, 'attemptMs') - m(now, 'startedMs'), 0)} ms`);
    out(`   without lock_pid (the stale-heartbeat rule), heartbeat ${heartbeatMs} ms: first batch ${fmt(m(before, 'firstBatchMs'), 0)} ms, takeover ${fmt(m(before, 'attemptMs') - m(before, 'startedMs'), 0)} ms: 3 heartbeats`);
    out(`   with the default 15 s heartbeat that rule waits 45 s: ${fmt(45_000 / m(now, 'firstBatchMs'), 0)}x the new kill-to-first-batch median`);
    out();
    out(`2. Postgres restarted (fast shutdown, started again at once) under 2 API replicas, worker period ${WORKER_PERIOD_MS} ms (${ROUNDS} rounds)`);
    const env = { DATABASE_URL: pg.url, PORT: '0', ENABLE_DEBUG_ROUTES: 'true', USAGE_SUMMARY_REFRESH_MS: String(WORKER_PERIOD_MS), LOG_LEVEL: 'warn' };
    const replicas = await Promise.all([0, 1].map(async () => {
      const p = start([], { ...env, LOG_LEVEL: 'info' });
      const line = await p.waitForLog((l) => l.msg.startsWith('listening on port'), 30_000);
      return Object.assign(p, { url: `http://127.0.0.1:${line.port as number}` });
    }));
    const rounds: { apiMs: number; workerMs: number; downMs: number }[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      rounds.push(await restartUnderApi(pg, replicas));
      await sleep(WORKER_PERIOD_MS);
    }
    out(`   Postgres down (stop + start):                      median ${fmt(median(rounds.map((r) => r.downMs)), 0)} ms`);
    out(`   Postgres up to the API answering 200 again:        median ${fmt(median(rounds.map((r) => r.apiMs)), 0)} ms (max ${fmt(Math.max(...rounds.map((r) => r.apiMs)), 0)})`);
    out(`   Postgres up to one replica leading the worker:     median ${fmt(median(rounds.map((r) => r.workerMs)), 0)} ms (max ${fmt(Math.max(...rounds.map((r) => r.workerMs)), 0)}) = ${fmt(median(rounds.map((r) => r.workerMs)) / WORKER_PERIOD_MS, 2)} periods (goal <= 2)`);
    for (const r of replicas) r.kill('SIGTERM');
    await Promise.all(replicas.map((r) => r.exited));
  } finally {
    await pg.destroy();
  }
}

await main();
