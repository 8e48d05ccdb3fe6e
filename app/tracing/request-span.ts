/**
 * A request's server span: started in its caller's trace (app/tracing/propagation.ts), named
 * after the route's template, and ended with the status and the account it ran for. Its
 * attributes are the method, the route template, the status and the account id: never the
 * path's values beyond the template, a header, a key, a body or an email.
 */
import { context, SpanKind, SpanStatusCode, trace, type Context } from '@opentelemetry/api';
import type { Request, Response } from 'express';
import type { Identity } from '../tenancy.js';
import { routeOf } from '../api/route.js';
import { albRoot, callerContext } from './propagation.js';
import { tracer } from './trace.js';
import { withTraceId } from './trace-ids.js';

export interface RequestSpan {
  /** Runs `fn` with the request's span current. */
  run<T>(fn: () => T): T;
  /** Ends the span with what the response says. */
  end(): void;
}

export function requestSpan(req: Request, res: Response): RequestSpan {
  const parent = callerContext(req.headers);
  const options = { kind: SpanKind.SERVER, attributes: { 'http.request.method': req.method } };
  const start = () => tracer.startSpan(`${req.method}`, options, parent);
  const alb = trace.getSpanContext(parent) === undefined ? albRoot(req.headers['x-amzn-trace-id']) : undefined;
  const span = alb === undefined ? start() : withTraceId(alb, start);
  const ctx: Context = trace.setSpan(parent, span);
  return {
    run: (fn) => context.with(ctx, fn),
    end() {
      const route = routeOf(req);
      const status = res.statusCode;
      span.updateName(route === 'unmatched' ? req.method : route);
      span.setAttribute('http.route', route);
      span.setAttribute('http.response.status_code', status);
      const identity = res.locals.identity as Identity | undefined;
      if (identity?.kind === 'operator') span.setAttribute('enduser.role', 'operator');
      const accountId = identity?.kind === 'account' || identity?.kind === 'key' ? identity.accountId : undefined;
      if (accountId !== undefined) span.setAttribute('account.id', accountId);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: `answered ${status}` });
      if (!res.writableFinished) span.addEvent('response cut short');
      span.end();
    },
  };
}
