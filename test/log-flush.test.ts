/**
 * Every log line out, in order, at exit, however slow the reader of stdout: the server logs
 * into a pipe that a slow reader (test/fixtures/slow-reader.mjs) holds full, takes a SIGTERM
 * while blocked on it, and the lines that reach the reader are complete, in order, one for
 * every answered request, ending with the shutdown's last line.
 */
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../app/dev/embedded-postgres.js';
import { createTestDatabase, eventually, type TestDatabase } from './helpers/db.js';
import { get } from './helpers/load.js';
import { MAIN } from './helpers/process.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

const REQUESTS = 1_200;

describe('a slow stdout reader at exit', () => {
  it('gets every line, whole and in order, and the server still exits 0 within its deadline', { timeout: 90_000 }, async () => {
    // A named pipe: a real 64 KiB pipe, non-blocking on the server's side, as a container's
    // stdout can be. The reader holds it full until told, then reads 2 KiB every 10 ms.
    const dir = mkdtempSync(path.join(tmpdir(), 'log-flush-'));
    const fifo = path.join(dir, 'stdout');
    const release = path.join(dir, 'release');
    execFileSync('mkfifo', [fifo]);
    const readEnd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    const writeEnd = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
    const reader = spawn(process.execPath, ['test/fixtures/slow-reader.mjs', release, '2048', '10'], { stdio: [readEnd, 'pipe', 'inherit'] });
    let out = '';
    reader.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
    const readerDone = new Promise<void>((resolve) => reader.once('exit', () => resolve()));

    const port = await freePort();
    const server = spawn(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH, DATABASE_URL: db.url, PORT: String(port), ENABLE_DEBUG_ROUTES: 'true', ENABLE_WORKERS: 'false', SHUTDOWN_TIMEOUT_MS: '40000' },
      stdio: ['ignore', writeEnd, 'inherit'],
    });
    // The children have their ends; ours would keep the reader from ever seeing EOF.
    closeSync(readEnd);
    closeSync(writeEnd);
    const exited = new Promise<number>((resolve) => server.once('exit', (code) => resolve(code ?? -1)));
    const url = `http://127.0.0.1:${port}`;
    for (;;) {
      const up = await get(`${url}/healthz`, false).then(() => true, () => false);
      if (up) break;
      await new Promise((r) => setTimeout(r, 50));
    }

    const agent = new http.Agent({ keepAlive: true, maxSockets: 50 });
    const answered: string[] = [];
    const requests = Array.from({ length: REQUESTS }, (_, i) =>
      new Promise<void>((resolve) => {
        const req = http.get(`${url}/debug/sleep?ms=0`, { agent, headers: { 'x-request-id': `r${i}` } }, (res) => {
          res.resume().on('end', () => {
            // 200, or 503 when the pool wait ran out while the server waited on the pipe: answered either way.
            answered.push(`r${i}`);
            resolve();
          });
        });
        req.on('error', () => resolve());
      }),
    );
    // Once the access log has filled the pipe, the server waits on its writes and the answers
    // stop: half a second without one, however slow the machine, since the reader never reads.
    let seen = -1;
    let lastAnswerAt = Date.now();
    const blocked = await eventually(async () => {
      if (answered.length !== seen) [seen, lastAnswerAt] = [answered.length, Date.now()];
      return answered.length > 100 && Date.now() - lastAnswerAt >= 500;
    }, 60_000);
    expect(blocked, `answered ${answered.length}`).toBe(true);
    const sigtermAt = Date.now();
    server.kill('SIGTERM');
    // The signal waits, as the lines do, while the pipe stays full a moment longer.
    await new Promise((r) => setTimeout(r, 1_000));
    writeFileSync(release, '');
    await Promise.all(requests);
    const code = await exited;
    const exitedAt = Date.now();
    await readerDone;
    agent.destroy();

    expect(code).toBe(0);
    expect(exitedAt - sigtermAt).toBeLessThan(40_000);
    const lines = out.split('\n');
    expect(lines.pop()).toBe('');
    // Whole lines only: each one parses.
    const logs = lines.map((l) => JSON.parse(l) as { msg: string; time: string; requestId?: string; step?: string });
    // In order: time never goes back.
    for (let i = 1; i < logs.length; i++) expect(Date.parse(logs[i]!.time)).toBeGreaterThanOrEqual(Date.parse(logs[i - 1]!.time));
    // One line for every answered request, none for the others.
    const logged = logs.filter((l) => l.msg === 'request' && (l as { completed?: boolean }).completed).map((l) => l.requestId!);
    expect(logged).toHaveLength(new Set(logged).size);
    expect(answered.length).toBeGreaterThan(100);
    expect(new Set(logged)).toEqual(new Set(answered));
    expect(logs.filter((l) => /^shutdown: \w+ done in/.test(l.msg)).map((l) => l.step)).toEqual(['readiness', 'http', 'workers', 'pool']);
    expect(logs.at(-1)!.msg).toMatch(/^shutdown complete in \d+ ms; flushing logs and exiting 0$/);
  });
});
