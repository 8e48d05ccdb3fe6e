/**
 * The health checks, answered before the request id and the access log: the load balancer
 * sends one every few seconds per task, so they carry no id, no log line, and need no key.
 */
import { Router } from 'express';
import type { Pool } from '../db.js';
import type { Logger } from '../logger.js';

/** How long /readyz waits for the database before it answers 503. */
const READY_DB_TIMEOUT_MS = 2_000;

export interface HealthDeps {
  readonly pool: Pool;
  readonly logger: Logger;
  readonly isDraining: () => boolean;
  readonly liveness: () => string | undefined;
}

export function healthRouter({ pool, logger, isDraining, liveness }: HealthDeps): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });

  // The load balancer's check: only what replacing this task would fix, never the shared database.
  router.get('/livez', (_req, res) => {
    const reason = liveness();
    if (reason === undefined) res.json({ status: 'live' });
    else res.status(503).json({ status: reason });
  });

  router.get('/readyz', async (_req, res) => {
    if (isDraining()) {
      res.status(503).json({ status: 'draining' });
      return;
    }
    try {
      await withTimeout(pool.query('SELECT 1'), READY_DB_TIMEOUT_MS);
      res.json({ status: 'ready' });
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'readiness check: database unavailable');
      res.status(503).json({ status: 'database unavailable' });
    }
  });
  return router;
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
