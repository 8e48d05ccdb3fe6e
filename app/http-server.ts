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
 * Pipelined requests dispatched before the drain all run, so all are answered: only the last
 * of a socket's responses carries `Connection: close`, since Node ends the socket after the
 * response that says so and would drop the answers queued behind it.
 */
import http from 'node:http';
import net, { type AddressInfo, type Socket } from 'node:net';
import type { RequestListener } from 'node:http';
import type { Config } from './config.js';
import type { ShutdownStep } from './shutdown.js';

export class DrainableServer {
  readonly server: http.Server;
  /** Every open socket and the responses in flight on it. */
  private readonly sockets = new Map<Socket, Set<http.ServerResponse>>();
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
      this.sockets.set(socket, new Set());
      socket.once('close', () => {
        this.sockets.delete(socket);
        this.checkIdle();
      });
    });
    this.server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
      const socket = req.socket;
      const active = this.sockets.get(socket) ?? new Set();
      this.sockets.set(socket, active);
      if (this.draining) {
        if (this.closing.has(socket) || active.size > 0) {
          // Never dispatched: the socket ends once the answers before this one are out.
          this.closing.add(socket);
          if (active.size === 0) this.closeWhenFlushed(socket);
          return;
        }
        res.setHeader('Connection', 'close');
        this.closing.add(socket);
      }
      active.add(res);
      res.once('close', () => {
        active.delete(res);
        // A response whose headers went out before the drain began still said keep-alive.
        if (this.draining && active.size === 0) this.closeWhenFlushed(socket);
        this.checkIdle();
      });
      app(req, res);
    });
  }

  listen(port: number): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, () => {
        this.server.off('error', reject);
        resolve(this.server.address() as AddressInfo);
      });
    });
  }

  get inFlight(): number {
    let n = 0;
    for (const active of this.sockets.values()) n += active.size;
    return n;
  }

  /** Stops accepting, closes idle sockets, and resolves when every request in flight has ended. */
  drain(): Promise<void> {
    this.draining = true;
    // http.Server#close (Node >= 19) also destroys idle sockets at once, and a destroy that
    // races a request already on the wire answers it with a reset. Close just the listener.
    net.Server.prototype.close.call(this.server);
    for (const [socket, active] of this.sockets) {
      if (active.size === 0) continue;
      this.closing.add(socket);
      // Only the last request dispatched on the socket says close: Node closes the socket
      // after the response that says so, and pipelined answers queued behind an earlier one
      // would be dropped, though their requests ran. The client sends nothing more after it.
      const last = [...active].at(-1)!;
      if (!last.headersSent) last.setHeader('Connection', 'close');
    }
    return new Promise((resolve) => {
      // One more full poll: a request whose bytes reached an idle socket before the drain
      // began is read now and served with Connection: close.
      setImmediate(() =>
        setImmediate(() => {
          for (const [socket, active] of this.sockets) {
            if (active.size === 0) {
              this.closing.add(socket);
              this.closeWhenFlushed(socket);
            }
          }
          this.onIdle = resolve;
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
