/**
 * `npm run runs [-- <job>] [--limit N] [--json]`: the recent job runs, newest first, one
 * line per attempt, from job_runs.
 */
import { JOBS, findJob } from '../../lib/jobs.js';
import type { Config } from '../config.js';
import { createPool } from '../db.js';
import { UsageError } from '../errors.js';
import { createLogger } from '../logger.js';
import { formatDuration } from './progress.js';
import { textTable } from './text-table.js';

interface RunRow {
  id: string;
  job: string;
  scheduled_time: Date;
  status: string;
  attempt: number;
  started_at: Date;
  finished_at: Date | null;
  heartbeat_age_s: number;
  processed: string;
  total: string | null;
  error: string | null;
  ran_on: string;
}

export function parseRunsArgs(args: readonly string[]): { job?: string; limit: number; json: boolean } {
  let job: string | undefined;
  let limit = 20;
  let json = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--json') json = true;
    else if (arg === '--limit') {
      const value = Number(args[++i]);
      if (!Number.isInteger(value) || value < 1 || value > 10_000) throw new UsageError(`--limit needs a whole number from 1 to 10000, got ${JSON.stringify(args[i] ?? '')}`);
      limit = value;
    } else if (!arg.startsWith('-') && job === undefined) {
      if (!findJob(arg)) throw new UsageError(`Unknown job "${arg}". Known jobs: ${JOBS.map((j) => j.name).join(', ')}.`, 'UNKNOWN_JOB');
      job = arg;
    } else {
      throw new UsageError(`Unknown argument "${arg}" for runs. Usage: runs [<job>] [--limit N] [--json]`);
    }
  }
  return { job, limit, json };
}

const time = (d: Date) => d.toISOString().replace('T', ' ').slice(0, 19);

export async function runRunsCommand(args: readonly string[], config: Config): Promise<void> {
  const { job, limit, json } = parseRunsArgs(args);
  const pool = createPool(config.database, { role: 'runs', max: 1, logger: createLogger('silent'), waitMs: config.DB_POOL_WAIT_MS, statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS });
  try {
    const { rows } = await pool.query<RunRow>(
      `SELECT id::text, job, scheduled_time, status, attempt, started_at, finished_at,
              extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age_s,
              processed::text, total::text, error, ran_on
       FROM job_runs WHERE ($1::text IS NULL OR job = $1) ORDER BY job_runs.id DESC LIMIT $2`, // the bigint: `id` alone is the text column above, where "9" > "11"
      [job ?? null, limit],
    );
    if (json) {
      process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
      return;
    }
    if (rows.length === 0) {
      process.stdout.write(`No runs${job ? ` of ${job}` : ''} yet.\n`);
      return;
    }
    const table = textTable(
      ['RUN', 'JOB', 'SCHEDULED (UTC)', 'STATUS', 'TRY', 'STARTED (UTC)', 'TOOK', 'PROGRESS', 'RAN ON', 'ERROR'],
      rows.map((r) => [
        `#${r.id}`,
        r.job,
        time(r.scheduled_time),
        r.status === 'running' ? `running (beat ${Math.round(r.heartbeat_age_s)}s ago)` : r.status,
        String(r.attempt),
        time(r.started_at),
        r.finished_at ? formatDuration((r.finished_at.getTime() - r.started_at.getTime()) / 1_000) : '-',
        r.total === null ? r.processed : `${r.processed}/${r.total}`,
        r.ran_on.length > 40 ? `...${r.ran_on.slice(-37)}` : r.ran_on,
        (r.error ?? '').replace(/\s+/g, ' ').slice(0, 80),
      ]),
      new Set([0, 4]),
    );
    process.stdout.write(`${table}\n`);
  } finally {
    await pool.end();
  }
}
