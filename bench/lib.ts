/**
 * Shared benchmark plumbing: a Postgres (DATABASE_URL, or a throwaway embedded one), fresh
 * databases, medians and a keep-alive load generator. Benchmarks print ratios against a
 * baseline measured in the same run, because this machine is noisy.
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { get } from '../test/helpers/load.js';
import { spawnPostgresHost, type PostgresHost } from '../app/dev/embedded-postgres.js';

export interface BenchPostgres {
  /** A fresh, empty database on the server. */
  createDatabase(): Promise<string>;
  stop(): Promise<void>;
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
