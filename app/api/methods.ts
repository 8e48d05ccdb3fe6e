/**
 * A method a path's routes do not serve (OPTIONS, PUT or PATCH on /accounts, TRACE, DELETE
 * on /accounts) answers 405 in the error shape, with `Allow` listing the methods they do
 * (RFC 9110, section 15.5.6). Left to Express, OPTIONS would answer 200 text/plain with that
 * list, from the router that holds the path, and any other method 404.
 *
 * The table is the one the OpenAPI document lists (app/api/openapi.ts), and a test checks it
 * against the routes the app serves. Paths match as Express matches them: case-insensitive,
 * with an optional trailing slash, a parameter being one segment.
 */
import type { RequestHandler } from 'express';
import { UserError } from '../errors.js';
import type { RouteMethods } from './openapi.js';

interface Compiled { readonly pattern: RegExp; readonly methods: ReadonlySet<string>; readonly allow: string }

function compile(route: RouteMethods): Compiled {
  const source = route.path.split(/\{\w+\}/).map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&')).join('[^/]+');
  // Express answers HEAD with the GET route.
  const methods = new Set(route.methods.flatMap((m) => (m === 'GET' ? ['GET', 'HEAD'] : [m])));
  return { pattern: new RegExp(`^${source}/?$`, 'i'), methods, allow: [...methods].join(', ') };
}

/**
 * Throws a 405 when the request's path is one of `routes` and its method is not one they
 * serve; passes anything else on (an unknown path is the 404 at the end of the pipeline).
 */
export function methodNotAllowed(routes: readonly RouteMethods[]): RequestHandler {
  const compiled = routes.map(compile);
  return (req, _res, next) => {
    const path = req.path;
    const route = compiled.find((r) => r.pattern.test(path));
    if (route === undefined || route.methods.has(req.method)) {
      next();
      return;
    }
    const method = req.method.slice(0, 20);
    throw new UserError('METHOD_NOT_ALLOWED', `${method} is not served at ${path.slice(0, 200)}; it serves ${route.allow}`, 405, undefined, { Allow: route.allow });
  };
}
