/**
 * Request bodies, under a fixed cost for anyone whose key is not known to be live. In order:
 * the key is checked (an unknown or revoked key answers 401 before a byte of the body is
 * read), then the media type (415), the size while the bytes stream (413), the shape on the
 * raw bytes (app/api/json-bounds.ts: depth and element count, 400), and only then JSON.parse.
 * Requests without a body (GET, DELETE, a POST that sends none) skip all of it.
 */
import express, { type Request, type RequestHandler, type Response } from 'express';
import { identityOf, keyIsLive, unauthorized } from '../auth.js';
import type { Pool } from '../db.js';
import { UserError } from '../errors.js';
import { checkJsonShape } from './json-bounds.js';
import { toUserError } from './errors.js';

/** How long a connection cut off for its body's size may still drain before it is destroyed. */
const CUT_OFF_LINGER_MS = 1_000;
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH']);

function hasBody(req: Request): boolean {
  return BODY_METHODS.has(req.method) && (req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0);
}

export function jsonBody(pool: Pool, limitBytes: number): RequestHandler {
  const parseJson = express.json({ limit: limitBytes, strict: true, verify: (_req, _res, buf) => checkJsonShape(buf) });
  return (req, res, next) => {
    if (!hasBody(req)) {
      next();
      return;
    }
    keyIsLive(pool, identityOf(res)).then((live) => {
      if (!live) throw unauthorized('Invalid API key');
      if (!req.is('application/json')) {
        throw new UserError('UNSUPPORTED_MEDIA_TYPE', 'Request body must be JSON (Content-Type: application/json)', 415);
      }
      if (Number(req.headers['content-length']) > limitBytes) {
        tooLarge(req, res, limitBytes);
        return;
      }
      // body-parser, past its limit, still reads the body to its end before it answers.
      // Counting the bytes as they come answers 413 as soon as they pass it.
      let seen = 0;
      const count = (chunk: Buffer) => {
        seen += chunk.length;
        if (seen <= limitBytes) return;
        req.off('data', count);
        tooLarge(req, res, limitBytes);
      };
      req.on('data', count);
      parseJson(req, res, next);
    }).catch(next);
  };
}

/**
 * Answers 413 now and closes the connection: the rest of the body is never read. The socket
 * is ended after the answer, so the client can read it, and destroyed a moment later if the
 * client keeps sending.
 */
function tooLarge(req: Request, res: Response, limit: number): void {
  if (res.headersSent) return;
  res.setHeader('Connection', 'close');
  res.once('finish', () => {
    req.socket.end();
    setTimeout(() => req.socket.destroy(), CUT_OFF_LINGER_MS).unref();
  });
  const e = toUserError({ type: 'entity.too.large', limit });
  res.status(e.status).json({ error: { code: e.code, message: e.message } });
}
