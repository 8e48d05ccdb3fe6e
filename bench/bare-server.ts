/**
 * The throughput baseline: a bare Express 5 app serving the same two routes as the API
 * (/healthz and GET /accounts/:id) on a plain pg pool, with none of the project's machinery:
 * no drain tracking, no body parser, no validation, no error catalogue, no logger, no auth.
 *
 * GET /isolated/accounts/:id runs the same SQL, but through the tenant path (app/tenancy.ts:
 * queryAs, the RLS-bound role and the account's identity in the same round trip), so
 * the two measure what the isolation alone costs.
 */
import express from 'express';
import pg from 'pg';
import { ACCOUNT_WITH_USAGE } from '../app/api/accounts.js';
import { queryAs } from '../app/tenancy.js';

/** The answer's shape, as the API's route makes it from the same row. */
function shape({ usageQuantity, lastUsageAt, refreshedAt, ...account }: Record<string, unknown>) {
  return { ...account, usage30d: { quantity: usageQuantity, lastUsageAt, refreshedAt } };
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
const app = express();
app.get('/healthz', (_req, res) => {
  res.json({ status: 'ok' });
});
app.get('/accounts/:id', async (req, res) => {
  const { rows } = await pool.query(ACCOUNT_WITH_USAGE.replace('tenant_account_usage_30d', 'account_usage_30d'), [req.params.id]);
  res.json(shape(rows[0]));
});
app.get('/isolated/accounts/:id', async (req, res) => {
  const rows = await queryAs(pool, { kind: 'account', accountId: req.params.id }, ACCOUNT_WITH_USAGE, [req.params.id]);
  res.json(shape(rows[0]));
});
const server = app.listen(Number(process.env.PORT ?? 0), () => {
  process.stdout.write(`${JSON.stringify({ msg: `listening on port ${(server.address() as { port: number }).port}`, port: (server.address() as { port: number }).port })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
