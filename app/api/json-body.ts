/**
 * Request bodies, under a fixed cost for anyone whose key is not known to be live. In order:
 * the key is checked (an unknown or revoked key answers 401 before a byte of the body is
 * read), then the media type and charset (415), the size while the bytes stream (413), the shape on the
 * raw bytes (app/api/json-bounds.ts: depth, element count, duplicate keys, inexact numbers, 400), and only then JSON.parse.
 * Requests without a body (GET, DELETE, a POST that sends none) skip all of it.
 */
import contentType from 'content-type';
import express, { type Request, type RequestHandler, type Response } from 'express';
import { leaseOf } from '../deadline.js';
import { continueBody } from '../early-answer.js';
import { identityOf, keyIsLive, unauthorized } from '../auth.js';
import type { Pool } from '../db.js';
import { UserError } from '../errors.js';
import { checkJsonShape } from './json-bounds.js';
import { toUserError } from './errors.js';

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH']);
/** `charset=` outside a quoted string: a header naming it twice is ambiguous, whichever one a parser keeps. */
const QUOTED = /"(?:[^"\\]|\\.)*"/g;
const CHARSET_PARAM = /;\s*charset\s*=/gi;

/**
 * The body's charset as body-parser decodes it: the same parser (content-type, the version
 * body-parser uses) reads the header, so the check and the decoder cannot disagree (a regular
 * expression here once read `utf-8` inside a quoted parameter while the decoder read the
 * UTF-16LE after it). Anything but UTF-8 is refused: JSON between systems is UTF-8 (RFC 8259,
 * section 8.1), and the shape check (app/api/json-bounds.ts) reads UTF-8 bytes. No charset at
 * all means UTF-8, as RFC 8259 defines no charset parameter for application/json.
 */
export function bodyCharsetProblem(header: string): string | undefined {
  if ((header.replace(QUOTED, '""').match(CHARSET_PARAM)?.length ?? 0) > 1) return 'Request body must name one charset, not several';
  const charset = contentType.parse(header).parameters.charset?.toLowerCase();
  if (charset === undefined || charset === 'utf-8') return undefined;
  return `Request body must be UTF-8 JSON, not charset=${charset.slice(0, 40)}`;
}

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
    keyIsLive(pool, identityOf(res), leaseOf(res)).then((live) => {
      if (!live) throw unauthorized('Invalid API key');
      if (!req.is('application/json')) {
        throw new UserError('UNSUPPORTED_MEDIA_TYPE', 'Request body must be JSON (Content-Type: application/json)', 415);
      }
      const charsetProblem = bodyCharsetProblem(req.headers['content-type']!);
      if (charsetProblem !== undefined) throw new UserError('UNSUPPORTED_MEDIA_TYPE', charsetProblem, 415);
      if (Number(req.headers['content-length']) > limitBytes) {
        tooLarge(res, limitBytes);
        return;
      }
      continueBody(req, res);
      // body-parser, past its limit, still reads the body to its end before it answers.
      // Counting the bytes as they come answers 413 as soon as they pass it.
      let seen = 0;
      const count = (chunk: Buffer) => {
        seen += chunk.length;
        if (seen <= limitBytes) return;
        req.off('data', count);
        tooLarge(res, limitBytes);
      };
      req.on('data', count);
      parseJson(req, res, next);
    }).catch(next);
  };
}

/**
 * Answers 413 now: the rest of the body is never parsed, and the connection closes after a
 * bounded drain (app/early-answer.ts).
 */
function tooLarge(res: Response, limit: number): void {
  if (res.headersSent) return;
  const e = toUserError({ type: 'entity.too.large', limit });
  res.status(e.status).json({ error: { code: e.code, message: e.message } });
}
