/**
 * Retirement of whole days of usage: each expired day that has a partition of its own is
 * detached and dropped by usage_retire_day (app/migrations/*_usage-partitions.sql), one
 * short transaction a day, as the retention role. Its locks on `accounts` and `usage`,
 * taken before it reads the day, are the one wait: a day whose locks are not granted within
 * the function's lock_timeout is tried again a few times, then left for the next run.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { LOCK_NOT_AVAILABLE } from '../db-errors.js';
import { RETENTION, withIdentity } from '../tenancy.js';
import type { JobContext } from './handler.js';

const TRIES = 5;
const BACKOFF_MS = 1_000;

export interface RetiredDays {
  readonly retired: number;
  /** Expired days left in place, each with the reason. */
  readonly kept: readonly string[];
  /**
   * The start of the first day that has a partition, or `cutoff` when it is later: rows before
   * it are in no day partition (the table from before them, the default partition), and are
   * what data-cleanup deletes row by row.
   */
  readonly rowsBefore: Date;
}

/** Retires the days before `cutoff` (a UTC midnight) that can be. */
export async function retireDays(ctx: JobContext<unknown>, cutoff: Date): Promise<RetiredDays> {
  const { rows } = await withIdentity(ctx.pool, RETENTION, (db) => db.query<{ day: string }>(
    `SELECT d::text AS day FROM usage_partition_days() d WHERE d < $1::date`,
    [cutoff.toISOString().slice(0, 10)],
  ));
  let retired = 0;
  const kept: string[] = [];
  for (const [i, { day }] of rows.entries()) {
    ctx.signal.throwIfAborted();
    const outcome = await retireDay(ctx, day);
    if (outcome === LOCK_NOT_GRANTED) {
      // The next days would wait on the same lock: all are left for the next run.
      kept.push(...rows.slice(i).map((r) => `${r.day}: kept: ${outcome}`));
      break;
    }
    if (outcome.startsWith('retired')) {
      retired++;
      ctx.logger.info({ day, outcome }, `usage day ${day} ${outcome}`);
    } else if (outcome !== 'gone') {
      kept.push(`${day}: ${outcome}`);
    }
  }
  if (kept.length > 0) {
    ctx.logger.warn({ kept }, `${kept.length} expired usage day(s) kept: ${kept.slice(0, 5).join('; ')}${kept.length > 5 ? '; ...' : ''}. A day is retired once billing-run and then report-aggregation have finished it; rerun the one named (--scheduled-time of the day after, --force)`);
  }
  const { rows: first } = await withIdentity(ctx.pool, RETENTION, (db) => db.query<{ day: string | null }>(`SELECT min(d)::text AS day FROM usage_partition_days() d`));
  const firstDay = first[0]!.day === null ? Infinity : Date.parse(`${first[0]!.day}T00:00:00Z`);
  return { retired, kept, rowsBefore: new Date(Math.min(cutoff.getTime(), firstDay)) };
}

const LOCK_NOT_GRANTED = `a lock it needs (on accounts or usage) was not granted in ${TRIES} tries (a long query on either); the next run tries again`;

/** usage_retire_day's outcome for `day`, or LOCK_NOT_GRANTED. */
async function retireDay(ctx: JobContext<unknown>, day: string): Promise<string> {
  for (let attempt = 1; ; attempt++) {
    try {
      const { rows } = await withIdentity(ctx.pool, RETENTION, (db) => db.query<{ outcome: string }>(`SELECT usage_retire_day($1::date) AS outcome`, [day]));
      return rows[0]!.outcome;
    } catch (err) {
      if ((err as { code?: string }).code !== LOCK_NOT_AVAILABLE) throw err;
      if (attempt >= TRIES) return LOCK_NOT_GRANTED;
      await sleep(BACKOFF_MS * attempt, undefined, { signal: ctx.signal });
    }
  }
}
