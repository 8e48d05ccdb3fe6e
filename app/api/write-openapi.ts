/**
 * npm run openapi: writes docs/openapi.json from the routes' zod schemas, and docs/api.md's
 * table of the statuses and error codes of every route from the same lists.
 * test/openapi.test.ts fails while either committed copy differs from what this writes.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { errorsOf, OPERATIONS, openApiText } from './openapi.js';
import { ANYONE_ERRORS, byStatus } from './openapi-responses.js';
import type { ApiErrorCode } from '../errors.js';

export const OPENAPI_FILE = 'docs/openapi.json';
export const API_DOC = 'docs/api.md';
export { openApiText };

const START = '<!-- statuses: written by npm run openapi -->';
const END = '<!-- end of statuses -->';

const cell = (codes: readonly ApiErrorCode[]) =>
  [...byStatus(codes)].map(([status, forStatus]) => `${status} ${forStatus.map((c) => `\`${c}\``).join(', ')}`).join('; ');

/** The table of every route's answers, as docs/api.md holds it between its markers. */
export function statusTable(): string {
  const rows = [
    ...OPERATIONS.map((op) => `| \`${op.method.toUpperCase()} ${op.path}\` | ${[op.ok[0], op.alsoOk].filter(Boolean).sort().join(', ')} | ${cell(errorsOf(op))} |`),
    `| \`GET /healthz\`, \`GET /openapi.json\` | 200 | ${cell(ANYONE_ERRORS)} |`,
    `| \`GET /livez\`, \`GET /readyz\` | 200; 503 \`{"status": "<why>"}\` | ${cell(ANYONE_ERRORS)} |`,
  ];
  return [START, '| route | success | errors: status and codes |', '| --- | --- | --- |', ...rows, END].join('\n');
}

/** docs/api.md with its table rewritten. */
export function apiDocWithTable(doc: string): string {
  const from = doc.indexOf(START);
  const to = doc.indexOf(END);
  if (from < 0 || to < from) throw new Error(`${API_DOC} has no ${START} ... ${END} block`);
  return `${doc.slice(0, from)}${statusTable()}${doc.slice(to + END.length)}`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  writeFileSync(OPENAPI_FILE, openApiText());
  writeFileSync(API_DOC, apiDocWithTable(readFileSync(API_DOC, 'utf8')));
  console.log(`wrote ${OPENAPI_FILE} and the statuses table in ${API_DOC}`);
}
