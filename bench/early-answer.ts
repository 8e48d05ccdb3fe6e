/**
 * `npm run bench:early-answer`: what a caller without a live key costs a server process in
 * bytes read. Each request declares a 100 GB body (no key, a made-up key, 405, 415, a declared
 * 413, a chunked body past the limit, the health check with a body) and sends it as fast as
 * the socket takes it until the server closes; BENCH_ROUNDS rounds (default 5) of each. Per
 * request: the bytes the server process read (/proc/<pid>/io `rchar`, which counts its socket
 * reads), the bytes the client got into its kernel, and the time to the close, medians; and how
 * often the flooding client read its answer before the reset that ends the connection.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { startServer } from '../test/helpers/process.js';
import { earlyAnswerCases, flood } from '../test/helpers/flood.js';
import { benchPostgres, fmt, median } from './lib.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const ADMIN_KEY = randomBytes(32).toString('base64url');

function bytesRead(pid: number): number {
  return Number(/^rchar: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))![1]);
}

const pg = await benchPostgres();
const server = await startServer({ DATABASE_URL: await pg.createDatabase(), ADMIN_API_KEY: ADMIN_KEY, ENABLE_WORKERS: 'false', LOG_LEVEL: 'info' });
const pid = server.child.pid!;
try {
  console.log(`early-answer: bytes a server reads per request that declares a 100 GB body, ${ROUNDS} rounds, medians`);
  for (const [what, status, head] of earlyAnswerCases(ADMIN_KEY)) {
    const read: number[] = [];
    const wrote: number[] = [];
    const ms: number[] = [];
    let answered = 0;
    for (let r = 0; r < ROUNDS; r++) {
      const before = bytesRead(pid);
      const f = await flood(server.port, head);
      // A client that never stops sending may lose the answer to the reset that ends it (by
      // design, docs/security.md): counted, not required. Any other answer is a fault.
      if (f.head.startsWith(`HTTP/1.1 ${status} `)) answered++;
      else if (f.head !== '') throw new Error(`${what}: expected ${status}, got ${f.head.split('\r\n')[0]}`);
      read.push(bytesRead(pid) - before);
      wrote.push(f.clientWrote);
      ms.push(f.closedAfterMs);
    }
    console.log(`  ${what.padEnd(34)} ${status}  server read ${fmt(median(read) / 1024).padStart(7)} KiB  client sent ${fmt(median(wrote) / 1024).padStart(8)} KiB  closed after ${fmt(median(ms), 0).padStart(5)} ms  answer read by the client ${answered} of ${ROUNDS}`);
  }
} finally {
  server.kill('SIGTERM');
  await server.exited;
  await pg.stop();
}
