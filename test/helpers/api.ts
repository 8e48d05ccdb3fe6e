/**
 * The API served in this process, as the app serves it (createApi behind the DrainableServer),
 * on a pool of its own: the set-up of the tests that call the routes over real HTTP.
 */
import type { AddressInfo } from 'node:net';
import { createApi } from '../../app/api.js';
import { loadConfig } from '../../app/config.js';
import { createPool, type Pool } from '../../app/db.js';
import { DrainableServer } from '../../app/http-server.js';
import { createLogger } from '../../app/logger.js';

export interface InProcessApi {
  readonly base: string;
  readonly port: number;
  readonly pool: Pool;
  readonly server: DrainableServer;
  /** Drains the server, then ends the pool. */
  stop(): Promise<void>;
}

/** Starts the API with the environment `env` (DATABASE_URL at least) on port 0. */
export async function startApi(env: Record<string, string>, { max = 5, waitMs = 2_000, statementTimeoutMs = 5_000 } = {}): Promise<InProcessApi> {
  const config = loadConfig(env);
  const logger = createLogger('silent');
  const pool = createPool(config.database, { role: 'test-api', max, logger, waitMs, statementTimeoutMs });
  const server = new DrainableServer(createApi({ pool, logger, config, isDraining: () => false }), config);
  const { port } = (await server.listen(0)) as AddressInfo;
  return {
    base: `http://127.0.0.1:${port}`,
    port,
    pool,
    server,
    async stop() {
      await server.drain();
      await pool.end();
    },
  };
}
