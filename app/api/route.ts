/**
 * A request's route, as its metrics and its span name it.
 */
import type { Request } from 'express';

/** The route's template (`GET /accounts/:id`), never the path: a path holds ids, and one metric per id would be unbounded. */
export function routeOf(req: Request): string {
  const path = req.route?.path;
  return typeof path === 'string' ? `${req.method} ${req.baseUrl}${path}` : 'unmatched';
}
