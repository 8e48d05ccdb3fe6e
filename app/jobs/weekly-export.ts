/**
 * weekly-export: last week's invoices (Monday to Sunday, in the job's time zone: the days of
 * the invoices' period_start) as one CSV file, in EXPORT_DIR and, when EXPORT_BUCKET is set, in S3.
 *
 * The pattern to copy for "produce a file": the name is a function of the period only
 * (`invoices-week-<monday>.csv`, the same S3 key), the file is written to a temporary name
 * and renamed into place once complete, and S3's PutObject replaces the object, so a rerun
 * replaces the export instead of adding a second one, and a reader never sees half a file.
 * The file is rebuilt from the start on every attempt; rows come in id order, so a rerun
 * over unchanged data writes the same bytes.
 */
import { createReadStream } from 'node:fs';
import { mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { findJob } from '../../lib/jobs.js';
import { isoDate } from '../billing.js';
import { EXPORT, withIdentity } from '../tenancy.js';
import { DAY_MS } from '../../lib/time-zones.js';
import { defineJob } from './handler.js';
import { previousWeek, zoneOf } from './periods.js';

/**
 * The Monday that starts the week before the one containing `t`, and the Monday after it,
 * local dates in `zone` (the job's; UTC by default).
 */
export function exportWeekFor(t: Date, zone: string = zoneOf(findJob('weekly-export'))): { start: string; end: string } {
  const week = previousWeek(t, zone);
  return { start: week.startDate, end: week.endDate };
}

/** The file name, and the S3 key under `exports/`: one per week, whatever the run. */
export function exportFileName(week: { start: string }): string {
  return `invoices-week-${week.start}.csv`;
}

export const CSV_COLUMNS = ['invoice_id', 'account_id', 'account_name', 'account_email', 'period_start', 'period_end', 'quantity', 'amount_cents', 'currency', 'created_at'] as const;

/**
 * One CSV field (RFC 4180). Text that a spreadsheet would run as a formula (=, +, -, @, tab,
 * CR at the start) gets a leading apostrophe, since account names are user input.
 */
export function csvField(value: unknown, text = false): string {
  let s = value === null || value === undefined ? '' : value instanceof Date ? value.toISOString() : String(value);
  if (text && /^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

interface InvoiceRow {
  id: string;
  account_id: string;
  name: string;
  email: string;
  period_start: string;
  period_end: string;
  quantity: string;
  amount_cents: string;
  currency: string;
  created_at: Date;
}

export const weeklyExport = defineJob<never>({
  describePeriod: (t) => {
    const week = exportWeekFor(t);
    return `invoices of the week ${week.start} to ${isoDate(new Date(Date.parse(week.end) - DAY_MS))}`;
  },

  async run(ctx) {
    const week = exportWeekFor(ctx.scheduledTime, zoneOf(ctx.job));
    const name = exportFileName(week);
    const dir = path.resolve(ctx.config.EXPORT_DIR);
    const target = path.join(dir, name);
    const temp = path.join(dir, `.${name}.${process.pid}.tmp`);
    await mkdir(dir, { recursive: true });
    // A run killed mid-write leaves its temporary file; the job lock means no other export of it is being written now.
    for (const entry of await readdir(dir)) {
      if (entry.startsWith(`.${name}.`) && entry.endsWith('.tmp')) await rm(path.join(dir, entry), { force: true });
    }

    // As the export role: it reads invoices and accounts, and writes nothing (app/tenancy.ts).
    const { rows: counts } = await withIdentity(ctx.pool, EXPORT, (db) => db.query<{ total: number }>(
      `SELECT count(*)::int AS total FROM invoices WHERE period_start >= $1::date AND period_start < $2::date`,
      [week.start, week.end],
    ));
    ctx.progress(0, counts[0]!.total);

    const file = await open(temp, 'w');
    let rows = 0;
    try {
      await file.write(`${CSV_COLUMNS.join(',')}\n`);
      let afterId = '0';
      for (;;) {
        ctx.signal.throwIfAborted();
        const page = await withIdentity(ctx.pool, EXPORT, (db) => db.query<InvoiceRow>(
          `SELECT i.id, i.account_id, a.name, a.email, i.period_start::text, i.period_end::text,
                  i.quantity, i.amount_cents, i.currency, i.created_at
           FROM invoices i JOIN accounts a ON a.id = i.account_id
           WHERE i.period_start >= $1::date AND i.period_start < $2::date AND i.id > $3::bigint
           ORDER BY i.id LIMIT $4`,
          [week.start, week.end, afterId, ctx.config.JOB_BATCH_SIZE],
        ));
        if (page.rows.length === 0) break;
        let chunk = '';
        for (const r of page.rows) {
          chunk += `${[
            csvField(r.id), csvField(r.account_id), csvField(r.name, true), csvField(r.email, true),
            csvField(r.period_start), csvField(r.period_end), csvField(r.quantity), csvField(r.amount_cents),
            csvField(r.currency), csvField(r.created_at),
          ].join(',')}\n`;
        }
        await file.write(chunk);
        rows += page.rows.length;
        afterId = page.rows[page.rows.length - 1]!.id;
        ctx.progress(rows);
        if (page.rows.length < ctx.config.JOB_BATCH_SIZE) break;
      }
      await file.sync();
    } catch (err) {
      await file.close();
      await rm(temp, { force: true });
      throw err;
    }
    await file.close();
    await rename(temp, target);
    ctx.logger.info({ file: target, rows }, `wrote ${rows} invoice(s) to ${target}`);

    let s3: string | undefined;
    const bucket = ctx.config.EXPORT_BUCKET;
    if (bucket) {
      ctx.signal.throwIfAborted();
      const key = `exports/${name}`;
      // Loaded only here: most runs of most jobs never talk to S3.
      const { S3Client, PutObjectCommand } = await import('@aws-sdk/client-s3');
      const client = new S3Client({});
      try {
        const { size } = await stat(target);
        await client.send(
          new PutObjectCommand({ Bucket: bucket, Key: key, Body: createReadStream(target), ContentLength: size, ContentType: 'text/csv; charset=utf-8' }),
          { abortSignal: ctx.signal },
        );
      } finally {
        client.destroy();
      }
      s3 = `s3://${bucket}/${key}`;
      ctx.logger.info({ s3 }, `uploaded the export to ${s3}`);
    }
    return { week: week.start, rows, file: target, ...(s3 ? { s3 } : {}) };
  },
});
