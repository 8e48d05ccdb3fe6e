/**
 * npm run bench:server: the drain's overhead, zero failures under load with a SIGTERM, and
 * throughput against a bare Express app serving the same routes, all in one run.
 */
import http from 'node:http';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startServer, start, type Proc } from '../test/helpers/process.js';
import { get, loadAcrossSigterm } from '../test/helpers/load.js';
import { benchPostgres, fmt, median, throughput } from './lib.js';

const CYCLES = Number(process.env.BENCH_DRAIN_CYCLES ?? 12);
const LOAD_REQUESTS = Number(process.env.BENCH_LOAD_REQUESTS ?? 2500);

async function drainOverhead(url: string): Promise<number[]> {
  const overheads: number[] = [];
  for (let i = 0; i < CYCLES; i++) {
    const server = await startServer({ DATABASE_URL: url, ENABLE_DEBUG_ROUTES: 'true', ENABLE_WORKERS: 'false', LOG_LEVEL: 'info' });
    const agent = new http.Agent({ keepAlive: true });
    const sentAt = Date.now();
    const durations = Array.from({ length: 20 }, () => 300 + Math.round(Math.random() * 400));
    const requests = durations.map((ms) => get(`${server.url}/debug/sleep?ms=${ms}`, agent));
    await sleep(150);
    const sigtermAt = Date.now();
    server.kill('SIGTERM');
    const replies = await Promise.all(requests);
    const { code, at } = await server.exited;
    if (code !== 0 || replies.some((r) => r.status !== 200)) throw new Error(`drain cycle ${i} failed: exit ${code}`);
    const longestRemaining = sentAt + Math.max(...durations) - sigtermAt;
    overheads.push(at - sigtermAt - longestRemaining);
    agent.destroy();
  }
  return overheads;
}

async function zeroFailures(url: string) {
  const server = await startServer({ DATABASE_URL: url, ENABLE_DEBUG_ROUTES: 'true', ENABLE_WORKERS: 'false', LOG_LEVEL: 'info' });
  return loadAcrossSigterm(server, { connections: 40, requests: LOAD_REQUESTS });
}

async function throughputs(url: string) {
  // One account with usage, so the DB-backed route does its real join.
  const seed = start(['migrate'], { DATABASE_URL: url });
  await seed.exited;
  const pgmod = (await import('pg')).default;
  const client = new pgmod.Client(url);
  await client.connect();
  await client.query(`INSERT INTO accounts (name, email) VALUES ('Bench', 'bench@example.com') ON CONFLICT DO NOTHING`);
  await client.query(`INSERT INTO usage (account_id, metric, quantity) SELECT id, 'api_calls', 3 FROM accounts`);
  await client.query('REFRESH MATERIALIZED VIEW account_usage_30d');
  const { rows } = await client.query<{ id: string }>('SELECT id::text FROM accounts LIMIT 1');
  await client.end();
  const routes = ['/healthz', `/accounts/${rows[0]!.id}`];

  const results: Record<string, { ours: number[]; bare: number[] }> = {};
  for (const r of routes) results[r] = { ours: [], bare: [] };
  for (let round = 0; round < 3; round++) {
    for (const which of round % 2 ? (['bare', 'ours'] as const) : (['ours', 'bare'] as const)) {
      const proc: Proc & { url: string } =
        which === 'ours'
          ? await startServer({ DATABASE_URL: url, LOG_LEVEL: 'info', ENABLE_WORKERS: 'false' })
          : await startBare(url);
      // The server's log lines (one per request with the access log) still get written, but this
      // process, which also generates the load, no longer parses them.
      proc.child.stdout!.removeAllListeners('data').resume();
      for (const route of routes) {
        await throughput(proc.url, route, { seconds: 1 }); // warm-up
        results[route]![which].push(await throughput(proc.url, route, { seconds: 3 }));
      }
      proc.kill('SIGTERM');
      await proc.exited;
    }
  }
  return results;
}

async function startBare(url: string) {
  const proc = start([], { DATABASE_URL: url, PORT: '0' }, [process.execPath, path.resolve('node_modules/tsx/dist/cli.mjs'), 'bench/bare-server.ts']);
  const line = await proc.waitForLog((l) => l.msg.startsWith('listening on port'));
  return Object.assign(proc, { url: `http://127.0.0.1:${line.port as number}` });
}

async function main() {
  const pg = await benchPostgres();
  try {
    const url = await pg.createDatabase();
    const first = start(['migrate'], { DATABASE_URL: url });
    await first.exited;

    const overheads = await drainOverhead(url);
    const drainMedian = median(overheads);
    console.log(`drain overhead: median ${fmt(drainMedian)} ms over ${CYCLES} cycles (SIGTERM to exit, minus the longest remaining request; target <= 100 ms) [${overheads.map((o) => o.toFixed(0)).join(', ')}]`);

    const load = await zeroFailures(url);
    console.log(
      `zero failures: ${load.failed} failed of ${load.inFlight} requests sent before the listener closed (40 keep-alive clients, SIGTERM during load; exit ${load.exitCode})` +
        `${load.errors.length ? ` errors: ${load.errors.join(', ')}` : ''}; ${load.after} sent after it closed (not counted)`,
    );

    const tp = await throughputs(url);
    for (const [route, { ours, bare }] of Object.entries(tp)) {
      const o = median(ours);
      const b = median(bare);
      console.log(`throughput ${route}: ${fmt(o, 0)} req/s vs bare Express ${fmt(b, 0)} req/s = ${fmt(o / b, 2)}x (target >= 0.9x; median of 3 rounds)`);
    }
  } finally {
    await pg.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
