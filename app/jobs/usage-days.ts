/**
 * usage_days: when billing-run and report-aggregation last finished a UTC day whole. A day's
 * partition is retired (app/jobs/data-cleanup.ts) only once billing-run has finished it and
 * report-aggregation has rolled it up after that: then every row of it is in an invoice and
 * in a rollup, but those of accounts that changed status, which retiring keeps.
 */
import type { Pool } from '../db.js';
import { withIdentity, type Identity } from '../tenancy.js';

/** Notes that `job` finished `day` (YYYY-MM-DD) for every account, as `as`. */
export async function markDayFinished(pool: Pool, as: Identity, day: string, job: 'billed' | 'rolled up'): Promise<void> {
  const column = job === 'billed' ? 'billed_at' : 'rolled_up_at';
  await withIdentity(pool, as, (db) => db.query(
    `INSERT INTO usage_days (day, ${column}) VALUES ($1::date, now()) ON CONFLICT (day) DO UPDATE SET ${column} = EXCLUDED.${column}`,
    [day],
  ));
}
