/**
 * The HTTP listener and its drain.
 *
 * Node's `server.close()` alone stops the listener but leaves keep-alive sockets open until
 * keepAliveTimeout and keeps serving new requests on them (measured on Node 20.20.2). So the
 * drain tracks every socket and its requests in flight: every response still in flight
 * carries `Connection: close` and its socket closes when it ends, idle sockets close, and the
 * drain resolves when the last request is done.
 *
 * The race it must not lose: a request that reaches an idle keep-alive socket just as the
 * drain closes it. Ending the socket (a FIN) leaves it readable, so such a request used to be
 * read, dispatched and run, and its answer then went nowhere: for a POST, a write the client
 * never learnt of, which a load balancer may replay elsewhere. Here the server dispatches
 * requests itself, and the rule is: once the drain has begun, a request is dispatched only on
 * a socket that has no other request and is not closing; it is then answered in full with
 * `Connection: close`. Any other request is never dispatched: its socket is ended after the
 * bytes of earlier answers, so the client sees the connection close on a request that did
 * not run, which is safe to retry. Idle sockets close the same way, after one more full poll
 * of the event loop so that a request whose bytes had already arrived is still served.
 *
 * Pipelined requests (HTTP/1.1 lets a client send several on one socket without waiting) are
 * dispatched one at a time: the next only once the answer before it is out and the socket
 * stays open. Node itself dispatches them all at once and queues their answers, and ends the
 * socket after the first answer that says `Connection: close` (the drain's, a 413's, one an
 * error cut short), so the requests queued behind it ran and their answers went nowhere.
 * One at a time, whatever closes a socket closes it on requests that never ran.
 */
import http from 'node:http';
import net, { type AddressInfo, type Socket } from 'node:net';
import type { RequestListener } from 'node:http';
import type { Config } from './config.js';
import { StartupProblem, type ErrorCode } from './errors.js';
import { portTakenMessage } from './port-owner.js';
import type { ShutdownStep } from './shutdown.js';
import { eventsOfCurrentSpan } from './tracing/trace.js';

/**
 * Pipelined requests read ahead of the one running before the socket is no longer read: a
 * client that pipelines without reading its answers cannot make the server hold its requests
 * in memory without bound (20 MB of them held 520 MB). Past this, at most the rest of the
 * bytes already read (one socket read, 64 KiB) are parsed.
 */
const MAX_READ_AHEAD = 32;

type ReadableSocket = Socket & { _paused?: boolean; parser?: { resume(): void } | null };

/**
 * Node's own flow control for pipelined requests, as http.Server pauses a socket whose
 * answers back up: with `_paused` set, Node neither resumes the socket as a request's body is
 * read nor lets the parser go past the bytes at hand.
 */
function pauseReading(socket: ReadableSocket): void {
  socket._paused = true;
  socket.pause();
}

function resumeReading(socket: ReadableSocket): void {
  // While the client does not read its answers, Node resumes the socket itself once they drain.
  if (!socket._paused || socket.destroyed || socket.writableNeedDrain) return;
  socket._paused = false;
  socket.parser?.resume();
  socket.resume();
}

/** A socket's request being answered, and the pipelined ones read behind it, not yet dispatched. */
interface SocketRequests {
  current: http.ServerResponse | undefined;
  readonly waiting: [http.IncomingMessage, http.ServerResponse][];
}

export class DrainableServer {
  readonly server: http.Server;
  /** Every open socket and its requests. */
  private readonly sockets = new Map<Socket, SocketRequests>();
  /** Sockets that take no new request: they close once their answers are out. */
  private readonly closing = new WeakSet<Socket>();
  private draining = false;
  private onIdle: (() => void) | undefined;

  constructor(app: RequestListener, config: Pick<Config, 'KEEP_ALIVE_TIMEOUT_MS' | 'headersTimeoutMs' | 'requestTimeoutMs' | 'connectionsCheckingIntervalMs'>) {
    this.server = http.createServer({
      keepAliveTimeout: config.KEEP_ALIVE_TIMEOUT_MS,
      headersTimeout: config.headersTimeoutMs,
      requestTimeout: config.requestTimeoutMs,
      connectionsCheckingInterval: config.connectionsCheckingIntervalMs,
    });
    this.server.on('connection', (socket: Socket) => {
      this.sockets.set(socket, { current: undefined, waiting: [] });
      socket.once('close', () => {
        this.sockets.delete(socket);
        this.checkIdle();
      });
    });
    // Node would send `100 Continue` before the app has seen the request; the app sends it
    // itself once the key and the declared size are known good (app/early-answer.ts).
    this.server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => this.server.emit('request', req, res));
    this.server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => refuseUnreadable(err, socket, this.sockets.get(socket)?.current, this.closing));
    this.server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
      const socket = req.socket;
      let requests = this.sockets.get(socket);
      if (requests === undefined) {
        requests = { current: undefined, waiting: [] };
        this.sockets.set(socket, requests);
      }
      // Never dispatched: the socket ends once the answer before this one is out.
      if (this.closing.has(socket)) return;
      if (requests.current === undefined) this.dispatch(app, socket, requests, req, res);
      else if (requests.waiting.push([req, res]) >= MAX_READ_AHEAD) pauseReading(socket);
    });
  }

  private dispatch(app: RequestListener, socket: Socket, requests: SocketRequests, req: http.IncomingMessage, res: http.ServerResponse): void {
    if (this.draining) {
      res.setHeader('Connection', 'close');
      this.closing.add(socket);
    }
    requests.current = res;
    // Emitted once per response.
    res.on('close', () => {
      requests.current = undefined;
      // Node has ended the socket after an answer that said close, or it was cut off: the
      // requests read behind it never run.
      const open = !socket.destroyed && !socket.writableEnded && !this.closing.has(socket);
      const next = open ? requests.waiting.shift() : undefined;
      if (next !== undefined) {
        if (requests.waiting.length < MAX_READ_AHEAD) resumeReading(socket);
        this.dispatch(app, socket, requests, ...next);
      }
      else if (!open || this.draining) {
        requests.waiting.length = 0;
        // An answer whose headers went out before the drain began still said keep-alive.
        this.closing.add(socket);
        this.closeWhenFlushed(socket);
      }
      this.checkIdle();
    });
    app(req, res);
  }

  listen(port: number): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      const fail = (err: NodeJS.ErrnoException) =>
        reject(err.code === 'EADDRINUSE' ? new StartupProblem(portTakenMessage(port, 'PORT', 'the API')) : err);
      this.server.once('error', fail);
      this.server.listen(port, () => {
        this.server.off('error', fail);
        resolve(this.server.address() as AddressInfo);
      });
    });
  }

  get inFlight(): number {
    let n = 0;
    for (const requests of this.sockets.values()) if (requests.current !== undefined) n++;
    return n;
  }

  /** Stops accepting, closes idle sockets, and resolves when every request in flight has ended. */
  drain(): Promise<void> {
    this.draining = true;
    // http.Server#close (Node >= 19) also destroys idle sockets at once, and a destroy that
    // races a request already on the wire answers it with a reset. Close just the listener.
    net.Server.prototype.close.call(this.server);
    const spanEvent = eventsOfCurrentSpan();
    spanEvent('listener closed', { 'http.sockets': this.sockets.size, 'http.requests_in_flight': this.inFlight });
    for (const [socket, { current }] of this.sockets) {
      if (current === undefined) continue;
      // The one request running on the socket is answered in full, and the socket closes
      // after it: the pipelined requests read behind it never run.
      this.closing.add(socket);
      if (!current.headersSent) current.setHeader('Connection', 'close');
    }
    return new Promise((resolve) => {
      // One more full poll: a request whose bytes reached an idle socket before the drain
      // began is read now and served with Connection: close.
      setImmediate(() =>
        setImmediate(() => {
          for (const [socket, { current }] of this.sockets) {
            if (current === undefined) {
              this.closing.add(socket);
              this.closeWhenFlushed(socket);
            }
          }
          spanEvent('idle sockets closed', { 'http.requests_in_flight': this.inFlight });
          this.onIdle = () => {
            spanEvent('last request answered');
            resolve();
          };
          this.checkIdle();
        }),
      );
    });
  }

  /** Destroys every socket left: the deadline's last resort. */
  destroyAll(): void {
    for (const socket of this.sockets.keys()) socket.destroy();
  }

  /** The coordinator's "http" step. */
  shutdownStep(): ShutdownStep {
    return {
      name: 'http',
      run: () => this.drain(),
      pending: () => `${this.inFlight} request(s) in flight on ${this.sockets.size} socket(s)`,
      force: () => this.destroyAll(),
    };
  }

  /**
   * Ends `socket`: a FIN after the bytes already written. It stays readable, but nothing read
   * from it is dispatched (it is in `closing`). Not destroy: closing a socket with unread
   * bytes (a request the client sent meanwhile) makes the kernel send a reset, and a reset
   * can discard the previous answer still unread in the client's buffer: run, then dropped.
   * The client closes its side on the FIN; the process exit closes whatever is left.
   */
  private closeWhenFlushed(socket: Socket): void {
    if (!socket.destroyed && !socket.writableEnded) socket.end();
  }

  private checkIdle(): void {
    if (this.onIdle && this.inFlight === 0) {
      const resolve = this.onIdle;
      this.onIdle = undefined;
      resolve();
    }
  }
}

/** How long a socket refused for a request it could not read may still drain before it is destroyed. */
const REFUSED_LINGER_MS = 1_000;

/** Node's reasons for a request it could not read, answered in the API's error shape. */
function unreadable(err: NodeJS.ErrnoException): { status: number; code: ErrorCode; message: string } {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return { status: 431, code: 'HEADERS_TOO_LARGE', message: `The request line and headers are larger than the limit of ${http.maxHeaderSize} bytes` };
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return { status: 413, code: 'BODY_TOO_LARGE', message: 'The chunk extensions of the request body are too large' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { status: 408, code: 'REQUEST_TIMEOUT', message: 'The request did not arrive in time (HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS)' };
    default:
      return { status: 400, code: 'BAD_REQUEST', message: 'The request is not valid HTTP/1.1' };
  }
}

/**
 * http.Server's 'clientError': bytes that are not a request Node can read (headers over the
 * limit, a malformed line, data after `Connection: close`, a client too slow). Node's own
 * answer has no body and destroys the socket at once, which can reset the answer away. Here:
 * a request already read whole is answered in full, then the socket closes, and nothing after
 * it runs; otherwise the answer is in the API's error shape, then a FIN, and the socket is
 * destroyed a moment later if the client keeps sending.
 */
function refuseUnreadable(err: NodeJS.ErrnoException, socket: Socket, current: http.ServerResponse | undefined, closing: WeakSet<Socket>): void {
  if (closing.has(socket) && socket.writableEnded) return;
  closing.add(socket);
  if (current !== undefined && current.req.complete && !socket.destroyed) {
    if (!current.headersSent) current.setHeader('Connection', 'close');
    socket.once('finish', () => setTimeout(() => socket.destroy(), REFUSED_LINGER_MS).unref());
    return;
  }
  if (socket.writable && err.code !== 'ECONNRESET' && !current?.headersSent) {
    const { status, code, message } = unreadable(err);
    const body = JSON.stringify({ error: { code, message } });
    socket.end(
      `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n\r\n${body}`,
    );
    setTimeout(() => socket.destroy(), REFUSED_LINGER_MS).unref();
    return;
  }
  socket.destroy();
}
