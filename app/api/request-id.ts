/**
 * Headers every response carries, and the request id with its access log line, its trace span
 * and its route metrics.
 */
import type { Request, RequestHandler, Response } from 'express';
import { randomUUID } from 'node:crypto';
import { REQUEST_METRICS, ROUTE_DIMENSION } from '../../lib/metrics.js';
import type { Logger } from '../logger.js';
import { requestSpan } from '../tracing/request-span.js';
import { routeOf } from './route.js';
import { tracingOn } from '../tracing/trace.js';

/** One year: browsers then keep to HTTPS between visits. */
const HSTS_MAX_AGE_SECONDS = 31_536_000;

export const securityHeaders: RequestHandler = (req, res, next) => {
  res.setHeader('X-Content-Type-Options', 'nosniff');
  // The ALB terminates TLS and says so in X-Forwarded-Proto; over plain HTTP the header means nothing.
  if (req.headers['x-forwarded-proto'] === 'https') res.setHeader('Strict-Transport-Security', `max-age=${HSTS_MAX_AGE_SECONDS}`);
  next();
};

export interface AccessLogOptions {
  /** CloudWatch namespace of the route metrics, which every access log line carries (EMF). */
  readonly metricsNamespace: string;
}

/** The metrics an answer of `status` counts besides its latency: none, Errors, Errors and Unavailable, or Throttled. */
function countedBy(status: number): readonly string[] {
  if (status === 503) return [REQUEST_METRICS.errors, REQUEST_METRICS.unavailable];
  if (status >= 500) return [REQUEST_METRICS.errors];
  return status === 429 ? [REQUEST_METRICS.throttled] : [];
}

/**
 * The EMF directive of an access line, which depends only on the namespace and on what the
 * status counts: made once per kind and reused, so a request allocates nothing for it but
 * its timestamp (the access line is on every request's path).
 */
const directives = new Map<string, readonly Record<string, unknown>[]>();
function directiveOf(namespace: string, counted: readonly string[]): readonly Record<string, unknown>[] {
  const key = `${namespace}\0${counted.join(',')}`;
  let directive = directives.get(key);
  if (directive === undefined) {
    const metrics = [{ Name: REQUEST_METRICS.latency, Unit: 'Milliseconds' }, ...counted.map((Name) => ({ Name, Unit: 'Count' }))];
    directive = [{ Namespace: namespace, Dimensions: [[ROUTE_DIMENSION]], Metrics: metrics }];
    directives.set(key, directive);
  }
  return directive;
}

/** The access log line: what was asked, how it ended, and the route's metrics in EMF (the shape app/jobs/emf.ts writes). */
function accessLine(req: Request, res: Response, id: string, ms: number, namespace: string): Record<string, unknown> {
  const status = res.statusCode;
  const counted = countedBy(status);
  const line: Record<string, unknown> = {
    requestId: id,
    method: req.method,
    path: req.path,
    status,
    ms,
    completed: res.writableFinished,
    _aws: { Timestamp: Date.now(), CloudWatchMetrics: directiveOf(namespace, counted) },
    [ROUTE_DIMENSION]: routeOf(req),
    [REQUEST_METRICS.latency]: ms,
  };
  for (const name of counted) line[name] = 1;
  return line;
}

/**
 * The caller's X-Request-Id, else the ALB's X-Amzn-Trace-Id, else a new one. It is echoed
 * back and carried by the access log line, written when the response ends. With tracing on,
 * the rest of the request runs in its server span (app/tracing/request-span.ts), and the
 * access line carries the span's trace id.
 */
export function requestId(logger: Logger, { metricsNamespace }: AccessLogOptions): RequestHandler {
  return (req, res, next) => {
    const id = headerValue(req.headers['x-request-id']) ?? headerValue(req.headers['x-amzn-trace-id']) ?? randomUUID();
    res.setHeader('X-Request-Id', id);
    // Everything from here on may carry personal data (emails, usage, invoices, keys).
    res.setHeader('Cache-Control', 'no-store');
    res.locals.requestId = id;
    const t0 = performance.now();
    const span = tracingOn() ? requestSpan(req, res) : undefined;
    // 'close' is emitted once per response: `on` spares the wrapper `once` makes.
    res.on('close', () => {
      const line = accessLine(req, res, id, Math.round(performance.now() - t0), metricsNamespace);
      if (span === undefined) return logger.info(line, 'request');
      // The span's ids on the line itself: 'close' may come from outside the request's context
      // (a socket's), and entering the context a second time, for one line, was about a tenth
      // of what tracing costs a request not sampled.
      logger.info(Object.assign(line, span.logFields()), 'request');
      span.end();
    });
    if (span === undefined) next();
    else span.run(next);
  };
}

/** A header's value when it is one short, plain token (letters, digits and . _ : ; = -); anything else is ignored. */
function headerValue(value: string | string[] | undefined): string | undefined {
  return typeof value === 'string' && /^[A-Za-z0-9._:;=-]{1,128}$/.test(value) ? value : undefined;
}
