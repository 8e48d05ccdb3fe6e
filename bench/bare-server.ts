/**
 * The throughput baseline: a bare Express 5 app serving the same two routes as the API
 * (/healthz and GET /accounts/:id) on a plain pg pool, with none of the project's machinery:
 * no drain tracking, no body parser, no validation, no error catalogue, no logger.
 */
import express from 'express';
import pg from 'pg';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
const app = express();
app.get('/healthz', (_req, res) => {
  res.json({ status: 'ok' });
});
app.get('/accounts/:id', async (req, res) => {
  const { rows } = await pool.query(
    `SELECT a.id::text AS id, a.name, a.email, a.plan, a.status, a.unit_price_cents AS "unitPriceCents", a.created_at AS "createdAt",
            json_build_object('quantity', coalesce(s.quantity, 0)::float8, 'lastUsageAt', s.last_usage_at, 'refreshedAt', s.refreshed_at) AS "usage30d"
     FROM accounts a LEFT JOIN account_usage_30d s ON s.account_id = a.id WHERE a.id = $1`,
    [req.params.id],
  );
  res.json(rows[0]);
});
const server = app.listen(Number(process.env.PORT ?? 0), () => {
  process.stdout.write(`${JSON.stringify({ msg: `listening on port ${(server.address() as { port: number }).port}`, port: (server.address() as { port: number }).port })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
