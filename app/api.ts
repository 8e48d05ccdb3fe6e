/**
 * The HTTP API: accounts, their usage, invoices and keys, plus the health checks, the
 * OpenAPI document and the test-only debug routes. One router per resource (app/api/), and
 * this one function that mounts them in the order a request goes through them.
 *
 * Errors answer `{ "error": { "code", "message", "details"? } }` with a code from
 * app/errors.ts. Every route past the health checks and the OpenAPI document needs
 * `Authorization: Bearer <key>` (app/auth.ts) and runs its SQL as the caller
 * (app/tenancy.ts), so Postgres's row-level policies, not the handlers' WHERE clauses, decide
 * which rows a caller can reach: another tenant's row is simply not there, and answers the
 * same 404 as a missing one.
 */
import express from 'express';
import { authenticate } from './auth.js';
import type { Config } from './config.js';
import { requestDeadline } from './deadline.js';
import { closeEarlyAnswers } from './early-answer.js';
import type { Pool } from './db.js';
import type { Logger } from './logger.js';
import { rateLimit } from './rate-limit.js';
import { accountsRouter } from './api/accounts.js';
import { debugRouter } from './api/debug.js';
import { errorHandler, notFound } from './api/errors.js';
import { healthRouter } from './api/health.js';
import { invoicesRouter } from './api/invoices.js';
import { jsonBody } from './api/json-body.js';
import { keysRouter } from './api/keys.js';
import { methodNotAllowed } from './api/methods.js';
import { KEYED_ROUTES, OPEN_ROUTES, openApiRouter } from './api/openapi.js';
import { callerDb } from './api/request.js';
import { requestId, securityHeaders } from './api/request-id.js';
import { usageRouter } from './api/usage.js';

export interface ApiDeps {
  readonly pool: Pool;
  readonly logger: Logger;
  readonly config: Pick<
    Config,
    | 'BODY_LIMIT_BYTES'
    | 'ENABLE_DEBUG_ROUTES'
    | 'ADMIN_API_KEY'
    | 'EARLY_ANSWER_DRAIN_BYTES'
    | 'EARLY_ANSWER_DRAIN_MS'
    | 'REQUEST_DEADLINE_MS'
    | 'RATE_LIMIT_REQUESTS'
    | 'RATE_LIMIT_OPERATOR_REQUESTS'
    | 'RATE_LIMIT_WINDOW_MS'
    | 'RATE_LIMIT_KEYS'
    | 'METRICS_NAMESPACE'
  >;
  /** True once shutdown has begun: /readyz answers 503 from then on. */
  readonly isDraining: () => boolean;
  /** Why this task should be replaced, or undefined (app/health.ts); /livez, the ALB's check, answers 503 with it. Default: draining only. */
  readonly liveness?: () => string | undefined;
}

export function createApi({ pool, logger, config, isDraining, liveness = () => (isDraining() ? 'draining' : undefined) }: ApiDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  const db = callerDb(pool);

  // First: whoever answers before a request's body is in closes the connection after a bounded drain.
  app.use(closeEarlyAnswers({ bytes: config.EARLY_ANSWER_DRAIN_BYTES, ms: config.EARLY_ANSWER_DRAIN_MS }));
  app.use(securityHeaders);
  // Open to anyone, and before the request id: no id, no log line, no cost. A method these
  // paths do not serve answers 405 to anyone too, since they need no key.
  app.use(methodNotAllowed(OPEN_ROUTES));
  app.use(healthRouter({ pool, logger, isDraining, liveness }));
  app.use(openApiRouter());
  app.use(requestId(logger, { metricsNamespace: config.METRICS_NAMESPACE }));
  if (config.ENABLE_DEBUG_ROUTES) app.use(debugRouter(pool));
  app.use(authenticate(config.ADMIN_API_KEY));
  app.use(rateLimit({ perKey: config.RATE_LIMIT_REQUESTS, operator: config.RATE_LIMIT_OPERATOR_REQUESTS, windowMs: config.RATE_LIMIT_WINDOW_MS, maxKeys: config.RATE_LIMIT_KEYS }));
  // From here on the request holds database connections: the deadline can close them.
  app.use(requestDeadline(config.REQUEST_DEADLINE_MS, logger));
  // After the key (an unknown one answers 401, as everywhere) and before the body is read.
  app.use(methodNotAllowed(KEYED_ROUTES));
  // The limits come after the key: an unknown key answers 401 before its body is read.
  app.use(jsonBody(pool, config.BODY_LIMIT_BYTES));
  app.use(accountsRouter(db), usageRouter(db), invoicesRouter(db), keysRouter(db));
  app.use(notFound);
  app.use(errorHandler(pool, logger));
  return app;
}
