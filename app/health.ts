/**
 * Health, split the Amazon Builders' Library way ("Implementing health checks"): the load
 * balancer's check must fail only for what replacing this task would fix. A slow or down
 * database is shared by every task; failing them all together takes the whole API out of
 * the load balancer and starts a replacement storm that fixes nothing.
 *
 * - Liveness (`GET /livez`, the ALB's check): fails when this process is draining, when its
 *   event loop was blocked longer than EVENT_LOOP_STALL_MS, or when its pool is broken: every
 *   connection is checked out and none has come back for longer than any statement may run
 *   (statement_timeout + the pool wait, twice over), so connections leaked in this process.
 *   A slow database cannot cause that: Postgres cancels every statement at statement_timeout.
 * - The database (`GET /readyz`, and a probe every DATABASE_PROBE_MS that writes the
 *   DatabaseUnavailable EMF metric the stack's alarm reads): for monitoring and a human.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { SERVICE_METRICS } from '../lib/metrics.js';
import type { Pool } from './db.js';
import { emf } from './jobs/emf.js';
import type { Logger } from './logger.js';
import { errorText } from './shutdown.js';

/** A blocked event loop longer than this fails liveness: well under the ALB check's 5 s timeout (lib/defaults.ts). */
export const EVENT_LOOP_STALL_MS = 2_000;
/** The database probe's period; CloudWatch's standard resolution is a minute, so several samples land in each. */
export const DATABASE_PROBE_MS = 10_000;

export interface HealthOptions {
  readonly pool: Pool;
  readonly logger: Logger;
  readonly isDraining: () => boolean;
  /** DB_POOL_WAIT_MS. */
  readonly poolWaitMs: number;
  /** DB_STATEMENT_TIMEOUT_MS; 0 (none) turns off the broken-pool rule, which relies on it. */
  readonly statementTimeoutMs: number;
  /** METRICS_NAMESPACE. */
  readonly metricsNamespace: string;
}

export interface DatabaseState {
  readonly ok: boolean;
  readonly latencyMs?: number;
  readonly error?: string;
}

export class Health {
  private readonly loopDelay: ReturnType<typeof monitorEventLoopDelay> = monitorEventLoopDelay({ resolution: 20 });
  /** The last time a connection came back to the pool, or the pool had one to spare. */
  private poolMovedAt = performance.now();
  private probeTimer: NodeJS.Timeout | undefined;
  private readonly metricsOut: Logger;

  constructor(private readonly o: HealthOptions) {
    o.pool.on('release', () => (this.poolMovedAt = performance.now()));
    this.metricsOut = o.logger.child({}, { level: 'info' });
  }

  start(): void {
    this.loopDelay.enable();
    this.probeTimer = setInterval(() => void this.probe(), DATABASE_PROBE_MS);
    this.probeTimer.unref();
  }

  /** Why this process should be replaced, or undefined when it is live. */
  liveness(): string | undefined {
    if (this.o.isDraining()) return 'draining';
    // The histogram covers the time since the last check: every ALB probe, about every 10 s.
    const maxDelayMs = this.loopDelay.max / 1e6;
    this.loopDelay.reset();
    if (maxDelayMs > EVENT_LOOP_STALL_MS) return `event loop blocked for ${Math.round(maxDelayMs)} ms (limit ${EVENT_LOOP_STALL_MS} ms)`;
    const { pool } = this.o;
    if (pool.idleCount > 0 || pool.totalCount < pool.options.max) this.poolMovedAt = performance.now();
    const stuckMs = performance.now() - this.poolMovedAt;
    const limitMs = 2 * (this.o.statementTimeoutMs + this.o.poolWaitMs);
    if (this.o.statementTimeoutMs > 0 && stuckMs > limitMs) {
      return `connection pool broken: all ${pool.totalCount} connections checked out and none returned for ${Math.round(stuckMs)} ms (limit ${limitMs} ms)`;
    }
    return undefined;
  }

  /** Checks the database now, within `timeoutMs`. */
  async database(timeoutMs = this.o.poolWaitMs + 1_000): Promise<DatabaseState> {
    const t0 = performance.now();
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.o.pool.query('SELECT 1'),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
        }),
      ]);
      return { ok: true, latencyMs: Math.round(performance.now() - t0) };
    } catch (err) {
      return { ok: false, latencyMs: Math.round(performance.now() - t0), error: errorText(err) };
    } finally {
      clearTimeout(timer);
    }
  }

  private async probe(): Promise<void> {
    // The drain is closing the pool; the process is about to exit.
    if (this.o.isDraining()) return clearInterval(this.probeTimer);
    const { pool } = this.o;
    const inUse = pool.totalCount - pool.idleCount;
    const waiting = pool.waitingCount;
    const state = await this.database();
    if (!state.ok) this.o.logger.warn({ err: state.error, latencyMs: state.latencyMs }, `database probe failed: ${state.error}`);
    this.metricsOut.info(
      { latencyMs: state.latencyMs, ...emf(this.o.metricsNamespace, {}, {
        [SERVICE_METRICS.databaseUnavailable]: { value: state.ok ? 0 : 1, unit: 'Count' },
        [SERVICE_METRICS.poolInUse]: { value: inUse, unit: 'Count' },
        [SERVICE_METRICS.poolWaiting]: { value: waiting, unit: 'Count' },
      }) },
      state.ok ? 'metrics: database probe ok' : 'metrics: database unavailable',
    );
  }
}
