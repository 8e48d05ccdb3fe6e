/**
 * The HTTP listener and its drain.
 *
 * Node's `server.close()` alone stops the listener but leaves keep-alive sockets open until
 * keepAliveTimeout and keeps serving new requests on them (measured on Node 20.20.2). So the
 * drain tracks every socket and its requests in flight: idle sockets close at once, every
 * response still in flight (or arriving on a kept-alive socket) carries `Connection: close`
 * and its socket closes when it ends, and the drain resolves when the last request is done.
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
  private draining = false;
  private onIdle: (() => void) | undefined;

  constructor(app: RequestListener, config: Pick<Config, 'KEEP_ALIVE_TIMEOUT_MS' | 'headersTimeoutMs' | 'requestTimeoutMs' | 'connectionsCheckingIntervalMs'>) {
    this.server = http.createServer({
      keepAliveTimeout: config.KEEP_ALIVE_TIMEOUT_MS,
      headersTimeout: config.headersTimeoutMs,
      requestTimeout: config.requestTimeoutMs,
      connectionsCheckingInterval: config.connectionsCheckingIntervalMs,
    });
    // Registered before the app, so that a request seen during the drain is marked first.
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
      this.sockets.set(socket, active.add(res));
      if (this.draining) res.setHeader('Connection', 'close');
      res.once('close', () => {
        active.delete(res);
        // A response whose headers went out before the drain began still said keep-alive.
        if (this.draining && active.size === 0) socket.end();
        this.checkIdle();
      });
    });
    this.server.on('request', app);
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
    for (const active of this.sockets.values()) {
      // Node then closes the socket after the response, and the client sends no new request on it.
      for (const res of active) if (!res.headersSent) res.setHeader('Connection', 'close');
    }
    return new Promise((resolve) => {
      // Idle sockets close only after one more full poll of the event loop: a request whose
      // bytes reached the socket before the drain began is read and served (with
      // Connection: close), not cut off by a close that raced it.
      setImmediate(() =>
        setImmediate(() => {
          for (const [socket, active] of this.sockets) if (active.size === 0) socket.end();
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

  private checkIdle(): void {
    if (this.onIdle && this.inFlight === 0) {
      const resolve = this.onIdle;
      this.onIdle = undefined;
      resolve();
    }
  }
}
