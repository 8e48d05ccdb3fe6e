/**
 * Shared benchmark plumbing: a Postgres (DATABASE_URL, or a throwaway embedded one), fresh
 * databases, medians and a keep-alive load generator. Benchmarks print ratios against a
 * baseline measured in the same run, because this machine is noisy.
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { get } from '../test/helpers/load.js';
import { spawnPostgresHost, type PostgresHost } from '../app/dev/embedded-postgres.js';

export interface BenchPostgres {
  /** A fresh, empty database on the server. */
  createDatabase(): Promise<string>;
  /**
   * The server's CPU time so far, in ms: its postmaster, the processes it has reaped (ended
   * backends) and those alive. CPU time holds up on a loaded machine where wall time does not.
   * Undefined for a server given by DATABASE_URL, or without Linux's /proc.
   */
  cpuMs(): number | undefined;
  stop(): Promise<void>;
}

/** utime + stime (+ cutime + cstime with `children`) of a process, in ms, from /proc/<pid>/stat. */
function processCpuMs(pid: number, children: boolean): number {
  // The fields after the command name: state is [0], utime [11], stime [12], cutime [13], cstime [14].
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ').map(Number);
  const ticks = f[11]! + f[12]! + (children ? f[13]! + f[14]! : 0);
  return (ticks * 1_000) / CLOCK_TICKS_PER_SECOND;
}

/** Linux's USER_HZ, which /proc/<pid>/stat counts in on every architecture Node runs on. */
const CLOCK_TICKS_PER_SECOND = 100;

function postgresCpuMs(dataDir: string): number | undefined {
  try {
    const postmaster = Number(readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    // A backend reaped while its siblings are read would be missed (or counted twice): read
    // until the postmaster's own count is the same before and after.
    for (;;) {
      const before = processCpuMs(postmaster, true);
      const ms = before + childrenCpuMs(postmaster);
      if (processCpuMs(postmaster, true) === before) return ms;
    }
  } catch {
    return undefined;
  }
}

function childrenCpuMs(postmaster: number): number {
  let ms = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const parent = Number(readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
      if (parent === postmaster) ms += processCpuMs(Number(entry), false);
    } catch {
      // The process ended meanwhile: the postmaster's children count has it.
    }
  }
  return ms;
}

export async function benchPostgres(): Promise<BenchPostgres> {
  let embedded: PostgresHost | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    embedded = await spawnPostgresHost({ dataDir: `.data/bench-postgres-${process.pid}`, port: 0, persistent: false, database: 'postgres' });
    adminUrl = embedded.url;
  }
  const created: string[] = [];
  const admin = async (sql: string) => {
    const c = new pg.Client(adminUrl);
    await c.connect();
    try {
      await c.query(sql);
    } finally {
      await c.end();
    }
  };
  return {
    async createDatabase() {
      const name = `bench_${randomBytes(5).toString('hex')}`;
      await admin(`CREATE DATABASE ${name}`);
      created.push(name);
      const url = new URL(adminUrl!);
      url.pathname = `/${name}`;
      return url.toString();
    },
    cpuMs: () => (embedded ? postgresCpuMs(embedded.dataDir) : undefined),
    async stop() {
      for (const name of created) await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
      await embedded?.stop();
    },
  };
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Requests per second over `seconds`, from `connections` keep-alive loops on `path`. */
export async function throughput(base: string, path: string, { connections = 32, seconds = 3, headers = {} as http.OutgoingHttpHeaders } = {}): Promise<number> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
  const end = Date.now() + seconds * 1000;
  let done = 0;
  let failed = 0;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (Date.now() < end) {
        const r = await get(`${base}${path}`, agent, undefined, headers).catch(() => ({ status: 0 }));
        if (r.status === 200) done++;
        else failed++;
      }
    }),
  );
  agent.destroy();
  if (failed > 0) throw new Error(`${failed} requests to ${path} failed during the throughput run`);
  return done / seconds;
}

export const fmt = (n: number, digits = 1) => n.toFixed(digits);
