/**
 * npm run bench:server: the drain's overhead, zero failures under load with a SIGTERM, and
 * throughput against a bare Express app serving the same routes, all in one run; the DB
 * route with an account key (authentication and row-level security included), and the
 * isolation's own cost on the bare app.
 */
import http from 'node:http';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startServer, start, type Proc } from '../test/helpers/process.js';
import { get, loadAcrossSigterm } from '../test/helpers/load.js';
import { newApiKey } from '../app/auth.js';
import { benchPostgres, fmt, median, throughput } from './lib.js';

const BENCH_ADMIN_KEY = randomBytes(32).toString('base64url');

const CYCLES = Number(process.env.BENCH_DRAIN_CYCLES ?? 12);
const LOAD_REQUESTS = Number(process.env.BENCH_LOAD_REQUESTS ?? 2500);
/**
 * Throughput rounds, each with a fresh server of each kind. Within a round both servers run
 * side by side and the measures of one comparison take turns in short slices, in an order
 * that reverses every cycle (A B, B A, ...): the machine's drift (its two cores are shared by
 * the servers, Postgres and this load generator) then falls on both sides alike, where
 * measuring one server for seconds, then the other, swung a round's ratio by about ±15%. A
 * cycle's slices form one pair, and the result is the median of every pair's ratio: one
 * slice in a few swings by a third on this machine, and the median is not moved by it.
 */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SLICE_CYCLES = Number(process.env.BENCH_SLICE_CYCLES ?? 8);
const SLICE_SECONDS = 1.5;
/**
 * Load on each measure before its slices. V8 compiles a request path's functions as they get
 * hot, on a background thread that shares the two cores, and a server of the project's has
 * more of them than the bare app: in slices from a server's first second, the DB route's
 * ratio rose from about 0.75x to its level within 2-3 s.
 */
/**
 * BENCH_TRACES=file (or console, xray) measures the API with tracing on, at the default sampling
 * unless BENCH_TRACES_SAMPLE_RATIO says otherwise, and the DB route also on a third server with
 * tracing off, in the same slices; unset, tracing is off, as it is by default.
 */
const TRACING: Record<string, string> = process.env.BENCH_TRACES
  ? {
      TRACES: process.env.BENCH_TRACES,
      TRACES_FILE: path.resolve('.data', `bench-traces-${process.pid}.jsonl`),
      ...(process.env.BENCH_TRACES_SAMPLE_RATIO ? { TRACES_SAMPLE_RATIO: process.env.BENCH_TRACES_SAMPLE_RATIO } : {}),
    }
  : {};
const WARM_SECONDS = Number(process.env.BENCH_WARM_SECONDS ?? 5);

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

/**
 * What one throughput figure measures: a route on our server, on the bare one, or (with
 * BENCH_TRACES) on our server with tracing off, so that tracing's own cost is a ratio of
 * pairs measured in the same seconds, not of two runs on a machine whose state moves.
 */
interface Measure {
  readonly server: 'ours' | 'bare' | 'untraced';
  readonly path: string;
  readonly headers?: Record<string, string>;
}

async function throughputs(url: string) {
  // One account with usage, so the DB-backed route does its real join, and an API key for it.
  const seed = start(['migrate'], { DATABASE_URL: url });
  await seed.exited;
  const pgmod = (await import('pg')).default;
  const client = new pgmod.Client(url);
  await client.connect();
  await client.query(`INSERT INTO accounts (name, email) VALUES ('Bench', 'bench@example.com') ON CONFLICT DO NOTHING`);
  await client.query(`INSERT INTO usage (account_id, metric, quantity) SELECT id, 'api_calls', 3 FROM accounts`);
  await client.query('REFRESH MATERIALIZED VIEW account_usage_30d');
  const { rows } = await client.query<{ id: string }>('SELECT id::text FROM accounts LIMIT 1');
  const account = rows[0]!.id;
  const key = newApiKey();
  await client.query('INSERT INTO api_keys (account_id, prefix, key_hash) VALUES ($1, $2, $3)', [account, key.prefix, key.hash]);
  await client.end();

  const measures = {
    healthOurs: { server: 'ours', path: '/healthz' },
    healthBare: { server: 'bare', path: '/healthz' },
    // The whole path of a tenant's request: key lookup, then the query under RLS in a transaction.
    dbOurs: { server: 'ours', path: `/accounts/${account}`, headers: { authorization: `Bearer ${key.key}` } },
    dbBare: { server: 'bare', path: `/accounts/${account}` },
    // The same SQL on the bare app, through withIdentity: the isolation's cost alone.
    dbBareIsolated: { server: 'bare', path: `/isolated/accounts/${account}` },
    dbUntraced: { server: 'untraced', path: `/accounts/${account}`, headers: { authorization: `Bearer ${key.key}` } },
  } satisfies Record<string, Measure>;
  const results = Object.fromEntries(Object.keys(measures).map((k) => [k, [] as number[]])) as Record<keyof typeof measures, number[]>;
  const comparisons: (keyof typeof measures)[][] = [
    ['healthOurs', 'healthBare'],
    ['dbOurs', 'dbBare', 'dbBareIsolated', ...(TRACING.TRACES ? (['dbUntraced'] as const) : [])],
  ];
  for (let round = 0; round < ROUNDS; round++) {
    // The rate limit counts every request but is never reached: the benchmark measures its cost, not its 429s.
    const api = { DATABASE_URL: url, LOG_LEVEL: 'info', ENABLE_WORKERS: 'false', ADMIN_API_KEY: BENCH_ADMIN_KEY, RATE_LIMIT_REQUESTS: '1000000000', RATE_LIMIT_OPERATOR_REQUESTS: '1000000000' };
    const servers = {
      ours: await startServer({ ...api, ...TRACING }),
      bare: await startBare(url),
      ...(TRACING.TRACES ? { untraced: await startServer(api) } : {}),
    };
    for (const proc of Object.values(servers)) drainElsewhere(proc);
    const run = (name: keyof typeof measures, seconds: number) => {
      const m: Measure = measures[name];
      return throughput(servers[m.server]!.url, m.path, { seconds, headers: m.headers });
    };
    for (const names of comparisons) {
      for (const name of names) await run(name, WARM_SECONDS);
      for (let cycle = 0; cycle < SLICE_CYCLES; cycle++) {
        for (const name of cycle % 2 ? [...names].reverse() : names) results[name].push(await run(name, SLICE_SECONDS));
      }
    }
    for (const proc of Object.values(servers)) {
      proc.kill('SIGTERM');
      await proc.exited;
    }
  }
  return results;
}

/**
 * Hands the server's stdout to a `cat > /dev/null` of its own, as the awslogs driver reads a
 * task's stdout outside it: its log lines (one per request, with the access log) are still
 * written to a pipe, but this process, which generates the load on the same 2 cores, no
 * longer decodes them.
 */
function drainElsewhere(proc: Proc): void {
  const stdout = proc.child.stdout!;
  stdout.removeAllListeners('data');
  stdout.pause();
  const reader = spawn('cat', [], { stdio: [stdout, 'ignore', 'inherit'] });
  reader.on('error', (err) => {
    throw err;
  });
}

async function startBare(url: string) {
  const proc = start([], { DATABASE_URL: url, PORT: '0' }, [process.execPath, path.resolve('node_modules/tsx/dist/cli.mjs'), 'bench/bare-server.ts']);
  const line = await proc.waitForLog((l) => l.msg.startsWith('listening on port'));
  return Object.assign(proc, { url: `http://127.0.0.1:${line.port as number}` });
}

async function main() {
  console.log(`tracing: ${TRACING.TRACES ? `${TRACING.TRACES}, sample ratio ${TRACING.TRACES_SAMPLE_RATIO ?? 'the default'}` : 'off (the default)'}`);
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
    // The two sides of a pair are measured within the same 3 seconds, so a pair's ratio is the
    // figure; the median of every pair's ratio is the result, with its quartiles.
    const ratio = (label: string, ours: number[], base: number[], baseLabel: string, target: string) => {
      const pairs = ours.map((x, i) => x / base[i]!).sort((a, b) => a - b);
      const r = median(pairs);
      const quartile = (q: number) => pairs[Math.round(q * (pairs.length - 1))]!;
      const perRound = Array.from({ length: ROUNDS }, (_, round) => median(ours.slice(round * SLICE_CYCLES, (round + 1) * SLICE_CYCLES).map((x, i) => x / base[round * SLICE_CYCLES + i]!)));
      console.log(
        `${label}: ${fmt(median(ours), 0)} req/s vs ${baseLabel} ${fmt(median(base), 0)} req/s (medians) = ${fmt(r, 2)}x (${target}; ` +
          `median of ${pairs.length} paired ${SLICE_SECONDS}-s slices, ${SLICE_CYCLES} alternating pairs in each of ${ROUNDS} rounds, after ${WARM_SECONDS} s of warm-up; quartiles ${fmt(quartile(0.25), 2)}-${fmt(quartile(0.75), 2)}; each round's median ${perRound.map((x) => fmt(x, 2)).join(', ')})`,
      );
      return r;
    };
    ratio('throughput /healthz', tp.healthOurs, tp.healthBare, 'bare Express', 'target >= 0.95x');
    ratio('throughput GET /accounts/:id with an account key (auth + RLS)', tp.dbOurs, tp.dbBare, 'bare Express, same SQL, no auth, no RLS', 'target >= 0.9x');
    const isolated = ratio('isolation alone: bare Express through queryAs (role, identity, RLS)', tp.dbBareIsolated, tp.dbBare, 'plain pool.query', 'no target');
    console.log(`isolation overhead: ${fmt((1 - isolated) * 100, 0)}% of the DB route's throughput on the bare app`);
    if (TRACING.TRACES) ratio('tracing alone: GET /accounts/:id with an account key, tracing on', tp.dbOurs, tp.dbUntraced, 'the same server with tracing off', 'no target');
  } finally {
    await pg.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
