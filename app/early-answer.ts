/**
 * Answers given before a request's body has arrived: a 401 for an unknown key, a 403, 405,
 * 413, 415, any error, or the deadline's 503. Left to Node, the body would then be read and
 * thrown away to its end (a declared 100 GB was read for 30 s), so that the connection can be
 * kept. Here such an answer says `Connection: close`; after it the connection reads at most
 * EARLY_ANSWER_DRAIN_BYTES more of the body, for at most EARLY_ANSWER_DRAIN_MS, then closes.
 *
 * Why read at all: a client still sending when the socket is destroyed gets a reset, and a
 * reset can discard the answer it has not read yet. Ending the socket (a FIN) and reading a
 * little more lets a client with a small body finish its upload and read the answer; a client
 * with a large one is cut off at the bound.
 *
 * And `100 Continue` is sent only once the key is live and the declared size allowed
 * (`continueBody`): until then a client that waits for it sends no body at all.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { RequestHandler } from 'express';

export interface DrainBounds {
  /** Bytes of the body still read after the answer (EARLY_ANSWER_DRAIN_BYTES). */
  readonly bytes: number;
  /** How long the socket stays open after the answer (EARLY_ANSWER_DRAIN_MS). */
  readonly ms: number;
}

/** Node's test for `Expect: 100-continue`, which makes it emit 'checkContinue' rather than 'request'. */
const CONTINUE = /(?:^|\W)100-continue(?:$|\W)/i;

function declaresBody(req: IncomingMessage): boolean {
  return req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined;
}

/**
 * The pipeline's first step. A request that declares no body costs one check; one that does
 * has its answer's headers watched, so that whoever answers before the body is in closes.
 */
export function closeEarlyAnswers(bounds: DrainBounds): RequestHandler {
  return (req, res, next) => {
    if (declaresBody(req)) watchHeaders(req, res, bounds);
    next();
  };
}

/** Every answer's headers go out through writeHead (Node's implicit headers call it too). */
function watchHeaders(req: IncomingMessage, res: ServerResponse, bounds: DrainBounds): void {
  const writeHead = res.writeHead;
  res.writeHead = function (this: ServerResponse, ...args: Parameters<ServerResponse['writeHead']>) {
    if (!req.complete && !this.headersSent) {
      this.setHeader('Connection', 'close');
      drainThenClose(req, this, bounds);
    }
    return writeHead.apply(this, args);
  } as ServerResponse['writeHead'];
}

/**
 * After the answer: a FIN, at most `bounds.bytes` more of the body read and dropped, and the
 * socket destroyed at the first bound reached.
 */
function drainThenClose(req: IncomingMessage, res: ServerResponse, bounds: DrainBounds): void {
  const socket = req.socket as Socket & { destroySoon?: () => void };
  // For an answer that says close, Node calls destroySoon: end, then destroy as soon as the
  // answer is flushed, which resets a client still sending. Here it only ends; the bounds destroy.
  socket.destroySoon = () => socket.end();
  let read = 0;
  const stop = () => socket.destroy();
  req.on('data', (chunk: Buffer) => {
    read += chunk.length;
    if (read > bounds.bytes) stop();
  });
  // The body parser pauses the request when it gives up on it; the drain reads on regardless.
  res.once('finish', () => {
    req.resume();
    const timer = setTimeout(stop, bounds.ms);
    socket.once('close', () => clearTimeout(timer));
  });
}

/**
 * With the 'checkContinue' handler in place (app/http-server.ts) Node sends no `100 Continue`
 * of its own; this sends it once the request may send its body.
 */
export function continueBody(req: IncomingMessage, res: ServerResponse): void {
  if (req.httpVersionMinor === 1 && !res.headersSent && CONTINUE.test(req.headers.expect ?? '')) res.writeContinue();
}
