/**
 * A span per SQL statement: named by the statement's summary (`SELECT accounts`: its first
 * keyword and first table, the OpenTelemetry `db.query.summary`), never its text or its
 * parameters, which may hold a key's hash, an email or a body's values.
 */
import { SpanKind, type Attributes } from '@opentelemetry/api';
import type pg from 'pg';
import { failing, inSpan, tracingOn, unsampledSpan } from './trace.js';

const summaries = new Map<string, string>();
const KEYWORD = /^\s*(?:WITH\b[\s\S]*?\)\s*)?(SELECT|INSERT|UPDATE|DELETE|BEGIN|COMMIT|ROLLBACK|EXECUTE|PREPARE|SET|REFRESH|LOCK|WITH)\b/i;
const TABLE = /\b(?:FROM|INTO|UPDATE|JOIN|VIEW|TABLE)\s+([a-z_][a-z0-9_]*)/i;

/** `SELECT accounts`, `INSERT job_runs`: what a statement does to which table, from its text alone. */
export function statementSummary(sql: string): string {
  let summary = summaries.get(sql);
  if (summary === undefined) {
    const keyword = KEYWORD.exec(sql)?.[1]?.toUpperCase() ?? 'SQL';
    const table = TABLE.exec(sql)?.[1]?.toLowerCase();
    summary = table === undefined ? keyword : `${keyword} ${table}`;
    if (summaries.size < 1_000) summaries.set(sql, summary);
  }
  return summary;
}

/**
 * Runs `fn` (one round trip) in a client span named after `sql`'s summary. In a trace not
 * sampled, no span, no summary and no attributes: only a failure is noted (`inSpan`).
 */
export function querySpan<T>(sql: string, attributes: Attributes, fn: () => Promise<T>): Promise<T> {
  const unsampled = unsampledSpan();
  if (unsampled !== undefined) return failing(unsampled, fn);
  const summary = statementSummary(sql);
  return inSpan(summary, { 'db.system.name': 'postgresql', 'db.query.summary': summary, ...attributes }, fn, SpanKind.CLIENT);
}

type Queryable = Pick<pg.ClientBase, 'query'>;

/** `db`, with a span around each of its queries once tracing is on. */
export function tracedQueryable(db: Queryable): Queryable {
  if (!tracingOn()) return db;
  // Only `query`: a copy of the whole client (its own fields) was made for every transaction.
  const query = ((sql: string | pg.QueryConfig, params?: unknown[]) => {
    const text = typeof sql === 'string' ? sql : sql.text;
    return querySpan(text, {}, () => (db as unknown as { query(s: unknown, p?: unknown[]): Promise<unknown> }).query(sql, params));
  }) as Queryable['query'];
  return { query };
}
