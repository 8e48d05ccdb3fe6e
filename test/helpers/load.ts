/** HTTP clients for the drain tests and benchmarks: timed GETs and keep-alive load across a SIGTERM. */
import http from 'node:http';
import type { Proc } from './process.js';

/** A sub-millisecond epoch time, comparable with the server's `at` log fields. */
export const now = () => performance.timeOrigin + performance.now();

export interface Reply {
  status: number;
  body: string;
  headers: http.IncomingHttpHeaders;
}

/** GET `url`; `onSent` runs when the request's bytes have been written to its socket. */
export function get(url: string, agent: http.Agent | false, onSent?: () => void, headers?: http.OutgoingHttpHeaders): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body, headers: res.headers }));
      res.on('error', reject);
    });
    req.on('error', reject);
    if (onSent) req.once('finish', onSent);
  });
}

export interface LoadOutcome {
  readonly exitCode: number;
  /** Requests whose bytes left the client before the server closed its listener: all must succeed. */
  readonly inFlight: number;
  readonly failed: number;
  readonly errors: string[];
  /** Requests sent after the listener closed: refused or not, they do not count. */
  readonly after: number;
}

/**
 * Keeps `connections` keep-alive clients busy with short /debug/sleep requests, sends
 * SIGTERM once `requests` have been sent, and sorts every request by whether it was sent
 * before the server closed its listener (the `at` of its "shutdown: http" log line).
 */
export async function loadAcrossSigterm(server: Proc & { url: string }, { connections, requests }: { connections: number; requests: number }): Promise<LoadOutcome> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
  let sent = 0;
  let stop = false;
  let reachedTarget: () => void = () => {};
  const target = new Promise<void>((resolve) => (reachedTarget = resolve));
  const outcomes: { sentAt: number; ok: boolean; error?: string }[] = [];
  const loops = Array.from({ length: connections }, async () => {
    while (!stop) {
      if (++sent === requests) reachedTarget();
      let sentAt = Infinity;
      const outcome: { sentAt: number; ok: boolean; error?: string } = await get(
        `${server.url}/debug/sleep?ms=${5 + Math.round(Math.random() * 20)}`,
        agent,
        () => (sentAt = now()),
      ).then(
        (res) => ({ sentAt, ok: res.status === 200 }),
        (err: NodeJS.ErrnoException) => ({ sentAt, ok: false, error: err.code ?? err.message }),
      );
      outcomes.push(outcome);
      if (outcome.error === 'ECONNREFUSED') return; // the listener is closed: this client is done
    }
  });
  await target;
  server.kill('SIGTERM');
  const closedAt = (await server.waitForLog((l) => l.msg === 'shutdown: http')).at as number;
  const { code } = await server.exited;
  stop = true;
  await Promise.all(loops);
  agent.destroy();
  const inFlight = outcomes.filter((o) => o.sentAt < closedAt);
  const failures = inFlight.filter((o) => !o.ok);
  return {
    exitCode: code,
    inFlight: inFlight.length,
    failed: failures.length,
    errors: failures.map((o) => `${o.error} (sent ${(closedAt - o.sentAt).toFixed(2)} ms before the close)`),
    after: outcomes.length - inFlight.length,
  };
}
