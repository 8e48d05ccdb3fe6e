/**
 * Headers every response carries, and the request id with its access log line.
 */
import type { RequestHandler } from 'express';
import { randomUUID } from 'node:crypto';
import type { Logger } from '../logger.js';

/** One year: browsers then keep to HTTPS between visits. */
const HSTS_MAX_AGE_SECONDS = 31_536_000;

export const securityHeaders: RequestHandler = (req, res, next) => {
  res.setHeader('X-Content-Type-Options', 'nosniff');
  // The ALB terminates TLS and says so in X-Forwarded-Proto; over plain HTTP the header means nothing.
  if (req.headers['x-forwarded-proto'] === 'https') res.setHeader('Strict-Transport-Security', `max-age=${HSTS_MAX_AGE_SECONDS}`);
  next();
};

/**
 * The caller's X-Request-Id, else the ALB's X-Amzn-Trace-Id, else a new one. It is echoed
 * back and carried by the access log line, written when the response ends.
 */
export function requestId(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const id = headerValue(req.headers['x-request-id']) ?? headerValue(req.headers['x-amzn-trace-id']) ?? randomUUID();
    res.setHeader('X-Request-Id', id);
    // Everything from here on may carry personal data (emails, usage, invoices, keys).
    res.setHeader('Cache-Control', 'no-store');
    res.locals.requestId = id;
    const t0 = performance.now();
    // 'close' is emitted once per response: `on` spares the wrapper `once` makes.
    res.on('close', () => {
      logger.info(
        { requestId: id, method: req.method, path: req.path, status: res.statusCode, ms: Math.round(performance.now() - t0), completed: res.writableFinished },
        'request',
      );
    });
    next();
  };
}

/** A header's value when it is one short, plain token (letters, digits and . _ : ; = -); anything else is ignored. */
function headerValue(value: string | string[] | undefined): string | undefined {
  return typeof value === 'string' && /^[A-Za-z0-9._:;=-]{1,128}$/.test(value) ? value : undefined;
}
