// @ts-check
/**
 * The smoke test a release passes before it gets production traffic: the process answers, an
 * authenticated read with the operator key works (and one without a key is refused), and the
 * OpenAPI document is served. One module for both callers: the deployment's lifecycle hook
 * (smoke-test.mjs, against the new revision through the test listener) and `npm run smoke`
 * (bin/smoke.ts, against a deployed stage's URL). Plain JavaScript with no imports, so the
 * Lambda runtime runs it as it is.
 */

/** How long one request of the smoke test may take. */
export const REQUEST_TIMEOUT_MS = 5_000;

/**
 * @typedef {{ name: string, ok: boolean, detail: string }} CheckResult
 * @typedef {{ ok: boolean, checks: CheckResult[] }} SmokeResult
 * @typedef {{ status: number, body: unknown }} Answer
 */

/**
 * @param {string} baseUrl
 * @param {string} path
 * @param {Record<string, string>} headers
 * @returns {Promise<Answer>}
 */
async function get(baseUrl, path, headers = {}) {
  const res = await fetch(new URL(path, baseUrl), { headers: { accept: 'application/json', ...headers }, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS), redirect: 'manual' });
  const text = await res.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = text.slice(0, 200);
  }
  return { status: res.status, body };
}

/** @param {unknown} value @returns {Record<string, any>} */
const fields = (value) => (value !== null && typeof value === 'object' ? /** @type {Record<string, any>} */ (value) : {});

/**
 * The checks, in order: each names what it asks and what a good release answers.
 * @type {readonly { name: string, run: (baseUrl: string, operatorKey: string) => Promise<string | undefined> }[]}
 * (`run` answers undefined when the check passed, else what was wrong)
 */
export const CHECKS = [
  {
    name: 'GET /healthz answers 200 {"status":"ok"}',
    run: async (baseUrl) => {
      const a = await get(baseUrl, '/healthz');
      return a.status === 200 && fields(a.body).status === 'ok' ? undefined : `got ${a.status} ${JSON.stringify(a.body)}`;
    },
  },
  {
    name: 'GET /accounts with the operator key answers 200 with a page of accounts',
    run: async (baseUrl, operatorKey) => {
      const a = await get(baseUrl, '/accounts?limit=1', { authorization: `Bearer ${operatorKey}` });
      return a.status === 200 && Array.isArray(fields(a.body).items) ? undefined : `got ${a.status} ${JSON.stringify(a.body)}`;
    },
  },
  {
    name: 'GET /accounts without a key answers 401',
    run: async (baseUrl) => {
      const a = await get(baseUrl, '/accounts?limit=1');
      return a.status === 401 ? undefined : `got ${a.status}: the API answers without authentication`;
    },
  },
  {
    name: 'GET /openapi.json serves the OpenAPI document',
    run: async (baseUrl) => {
      const a = await get(baseUrl, '/openapi.json');
      const doc = fields(a.body);
      return a.status === 200 && /^3\./.test(String(doc.openapi)) && fields(doc.paths)['/accounts'] ? undefined : `got ${a.status}, not an OpenAPI 3 document with /accounts`;
    },
  },
];

/**
 * Runs every check against `baseUrl` (all of them, so a report names every failure).
 * @param {{ baseUrl: string, operatorKey: string }} target
 * @returns {Promise<SmokeResult>}
 */
export async function smokeTest({ baseUrl, operatorKey }) {
  /** @type {CheckResult[]} */
  const checks = [];
  for (const check of CHECKS) {
    let problem;
    try {
      problem = await check.run(baseUrl, operatorKey);
    } catch (err) {
      const e = /** @type {Error & { cause?: { code?: string, message?: string } }} */ (err);
      problem = `request failed: ${e.name === 'TimeoutError' ? `no answer within ${REQUEST_TIMEOUT_MS} ms` : `${e.message}${e.cause ? ` (${e.cause.code ?? e.cause.message})` : ''}`}`;
    }
    checks.push({ name: check.name, ok: problem === undefined, detail: problem ?? 'ok' });
  }
  return { ok: checks.every((c) => c.ok), checks };
}

/**
 * One line per check, for a log or a terminal.
 * @param {string} baseUrl
 * @param {SmokeResult} result
 */
export function describeSmokeResult(baseUrl, result) {
  const lines = result.checks.map((c) => `${c.ok ? 'pass' : 'FAIL'}  ${c.name}${c.ok ? '' : `: ${c.detail}`}`);
  const failed = result.checks.filter((c) => !c.ok).length;
  return [`smoke test of ${baseUrl}: ${failed === 0 ? 'every check passed' : `${failed} of ${result.checks.length} checks failed`}`, ...lines].join('\n');
}
