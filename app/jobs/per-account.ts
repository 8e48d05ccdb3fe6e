/**
 * One account's bad data must never stop the others' batch. A job's batch is one statement
 * over many accounts; when it fails on the data (a value out of range, a broken constraint),
 * the batch is redone one account at a time, each in its own transaction, and the accounts
 * that still fail are skipped: their rows stay as they are, and the run reports them (in its
 * summary, in an error log line and in one alert) instead of failing for everyone.
 */
import type { Pool } from '../db.js';
import type { Logger } from '../logger.js';
import { errorText } from '../shutdown.js';
import { withIdentity, type Identity, type Queryable } from '../tenancy.js';
import { publishAlert } from './alert.js';

export interface SkippedAccount {
  readonly accountId: string;
  /** Postgres's message, e.g. "bigint out of range": never a value from the row. */
  readonly error: string;
}

/** SQLSTATE classes 22 (data exception) and 23 (integrity violation): errors of the rows, not of the run. */
export function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && (code.startsWith('22') || code.startsWith('23'));
}

export interface IsolatedBatch<T> {
  /** The role the batch runs as (app/tenancy.ts): its job's, the narrowest that does its work. */
  readonly as: Identity;
  /** The whole batch, under `as`. */
  readonly all: (db: Queryable) => Promise<T>;
  /** The ids of the accounts the batch covers, in order. */
  readonly ids: (db: Queryable) => Promise<string[]>;
  /** The batch's work for one of those accounts. */
  readonly one: (db: Queryable, accountId: string) => Promise<T>;
  /** Adds up the results of the accounts that succeeded, for the `ids` the batch covered. */
  readonly merge: (results: T[], ids: string[]) => T;
}

/** Runs a batch under its identity; on a data error, account by account, adding the failures to `skipped`. */
export async function runIsolated<T>(pool: Pool, batch: IsolatedBatch<T>, skipped: SkippedAccount[], logger: Logger): Promise<T> {
  try {
    return await withIdentity(pool, batch.as, batch.all);
  } catch (err) {
    if (!isDataError(err)) throw err;
    logger.warn({ err: errorText(err) }, `batch failed on its data (${errorText(err)}); redoing it one account at a time`);
  }
  const ids = await withIdentity(pool, batch.as, batch.ids);
  const results: T[] = [];
  for (const accountId of ids) {
    try {
      results.push(await withIdentity(pool, batch.as, (db) => batch.one(db, accountId)));
    } catch (err) {
      if (!isDataError(err)) throw err;
      skipped.push({ accountId, error: errorText(err) });
      logger.error({ accountId, err: errorText(err) }, `account ${accountId} skipped: ${errorText(err)}; its data is kept, every other account goes on`);
    }
  }
  return batch.merge(results, ids);
}

/** The one alert of a run that skipped accounts; does nothing when none were. */
export async function reportSkipped(
  skipped: readonly SkippedAccount[],
  run: { job: string; period: string; scheduledTime: Date },
  opts: { topicArn: string | undefined; logger: Logger },
): Promise<void> {
  if (skipped.length === 0) return;
  const ids = skipped.map((s) => s.accountId);
  const subject = `[job skipped accounts] ${run.job}: ${skipped.length} account(s) for ${run.period}`;
  const message = [
    `The scheduled job ${run.job} (${run.period}, scheduled ${run.scheduledTime.toISOString()}) finished for every other account,`,
    `but skipped ${skipped.length} account(s) whose data it could not process. Their usage is kept as it is.`,
    '',
    ...skipped.map((s) => `  account ${s.accountId}: ${s.error}`),
    '',
    'Look at those accounts\' usage for the period, correct it, then rerun the same run with --force:',
    `  node dist/app/main.js ${run.job} --scheduled-time ${run.scheduledTime.toISOString()} --force`,
  ].join('\n');
  opts.logger.error({ skippedAccounts: ids }, `${run.job} skipped ${skipped.length} account(s): ${ids.join(', ')}`);
  await publishAlert(subject, message, opts);
}
