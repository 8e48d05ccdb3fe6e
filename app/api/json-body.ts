/**
 * Request bodies, under a fixed cost for anyone whose key is not known to be live. In order:
 * the key is checked (an unknown or revoked key answers 401 before a byte of the body is
 * read), then the media type and charset (415), the size while the bytes stream (413), the shape on the
 * raw bytes (app/api/json-bounds.ts: depth, element count, duplicate keys, inexact numbers, 400), and only then JSON.parse.
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
/**
 * JSON between systems is UTF-8 (RFC 8259, section 8.1), and the shape check reads UTF-8
 * bytes: body-parser would also decode UTF-16 and UTF-32, whose bytes that check cannot read
 * (a UTF-16 body nested 3,000 levels deep passed it).
 */
const CHARSET = /;\s*charset\s*=\s*"?([^";\s]*)/i;

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
      const charset = CHARSET.exec(req.headers['content-type']!)?.[1]?.toLowerCase();
      if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
        throw new UserError('UNSUPPORTED_MEDIA_TYPE', `Request body must be UTF-8 JSON, not charset=${charset.slice(0, 40)}`, 415);
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
 * Answers 413 now and closes the connection: the rest of the body is never parsed. The socket
 * is ended after the answer (a FIN), what the client still sends is read and dropped so that
 * it can finish its upload and read the answer, and the socket is destroyed a moment later if
 * the client keeps sending. The answer does not say `Connection: close`: Node destroys a socket
 * the moment such an answer is out, and the bytes the client is still sending then meet a
 * reset, which fails its upload (EPIPE) and can discard the 413 it has not read yet.
 */
function tooLarge(req: Request, res: Response, limit: number): void {
  if (res.headersSent) return;
  res.once('finish', () => {
    req.socket.end();
    setTimeout(() => req.socket.destroy(), CUT_OFF_LINGER_MS).unref();
  });
  const e = toUserError({ type: 'entity.too.large', limit });
  res.status(e.status).json({ error: { code: e.code, message: e.message } });
}
