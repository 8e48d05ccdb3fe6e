/**
 * Test and benchmark routes (ENABLE_DEBUG_ROUTES; the stack always sets it to false).
 */
import { Router } from 'express';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import type { Pool } from '../db.js';
import { parse, queryInt } from './request.js';

const MAX_DEBUG_SLEEP_MS = 600_000;
const sleepQuery = z.object({ ms: queryInt(0, MAX_DEBUG_SLEEP_MS) });
const crashQuery = z.object({ kind: z.enum(['exception', 'rejection']) });
/** Event-loop delay sampling period: fine enough to see a stall of a few ms. */
const LOOP_DELAY_RESOLUTION_MS = 10;

export function debugRouter(pool: Pool): Router {
  const router = Router();
  router.get('/debug/sleep', async (req, res) => {
    const { ms } = parse(sleepQuery, req.query, 'query');
    await sleep(ms);
    await pool.query('SELECT 1');
    res.json({ sleptMs: ms });
  });
  // Raises an error outside any request, to show (and test) that a crash drains like a SIGTERM and exits 1.
  router.post('/debug/crash', (req, res) => {
    const { kind } = parse(crashQuery, req.query, 'query');
    setImmediate(() => {
      if (kind === 'exception') throw new Error('debug crash: uncaught exception');
      void Promise.reject(new Error('debug crash: unhandled rejection'));
    });
    res.status(202).json({ crashing: kind });
  });
  // The process's event-loop delay since the last reset, for the hostile-input load test.
  const loop = monitorEventLoopDelay({ resolution: LOOP_DELAY_RESOLUTION_MS });
  loop.enable();
  router.post('/debug/event-loop-delay/reset', (_req, res) => {
    loop.reset();
    res.status(204).end();
  });
  router.get('/debug/event-loop-delay', (_req, res) => {
    const ms = (ns: number) => Math.round(ns / 1e4) / 100;
    res.json({ samples: loop.count, p50Ms: ms(loop.percentile(50)), p99Ms: ms(loop.percentile(99)), maxMs: ms(loop.max) });
  });
  return router;
}
