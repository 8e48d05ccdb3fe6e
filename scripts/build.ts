/**
 * `npm run build`, and the first step of every local command: compiles app/ (and the lib/
 * modules it imports) into dist/, with the SQL migrations beside it.
 *
 * - Nothing to do when nothing changed: a hash of every input's content is kept in
 *   dist/.build-stamp, and a build that finds it equal stops there (a few milliseconds).
 * - Never pulls a file from under a running command: the compiler writes into dist.next/, and
 *   each changed file then replaces its old version in dist/ by a rename, which a process
 *   loading modules sees as either the old file or the new one, never as missing.
 * - Builds queue: a lock folder (dist.lock, holding the builder's pid) lets one build at a
 *   time; the next one then usually finds the stamp current. A lock left by a killed build
 *   (its pid gone) is taken over.
 *
 * Run by Node itself (its type stripping: erasable syntax only, no imports but node:*), so it
 * costs no compiler start when there is nothing to build.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const at = (...parts: string[]) => path.join(root, ...parts);
const DIST = at('dist');
const STAGING = at('dist.next');
const LOCK = at('dist.lock');
const STAMP = path.join(DIST, '.build-stamp');
/** What the compiler reads (tsconfig.build.json's include and the lib/ modules app/ imports), and how. */
const INPUT_DIRS = ['app', 'lib'];
const INPUT_FILES = ['tsconfig.json', 'tsconfig.build.json', 'package-lock.json', 'scripts/build.ts'];
/** How long a build waits for another one to finish before it gives up. */
const LOCK_WAIT_MS = 5 * 60_000;

function filesUnder(dir: string, base = dir): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return filesUnder(full, base);
    return e.isFile() ? [path.relative(base, full)] : [];
  }).sort();
}

function inputsHash(): string {
  const hash = createHash('sha256');
  const files = [...INPUT_DIRS.flatMap((d) => filesUnder(at(d)).map((f) => path.join(d, f))), ...INPUT_FILES.filter((f) => existsSync(at(f)))];
  for (const file of files) hash.update(`${file}\0`).update(readFileSync(at(file))).update('\0');
  return hash.digest('hex');
}

const current = (hash: string) => existsSync(STAMP) && readFileSync(STAMP, 'utf8').trim() === hash;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function lock(): () => void {
  const until = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      mkdirSync(LOCK);
      writeFileSync(path.join(LOCK, 'pid'), String(process.pid));
      return () => rmSync(LOCK, { recursive: true, force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let holder = NaN;
    try {
      holder = Number(readFileSync(path.join(LOCK, 'pid'), 'utf8'));
    } catch {
      // Just created, its pid not yet written: wait as for a live one.
    }
    if (Number.isInteger(holder) && !alive(holder)) {
      rmSync(LOCK, { recursive: true, force: true });
      continue;
    }
    if (Date.now() > until) {
      process.stderr.write(`build: another build (pid ${holder}) has held ${LOCK} for ${LOCK_WAIT_MS / 60_000} minutes; if none is running, remove that folder\n`);
      process.exit(1);
    }
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
  }
}

function sameContent(a: string, b: string): boolean {
  return existsSync(b) && statSync(a).size === statSync(b).size && readFileSync(a).equals(readFileSync(b));
}

/** Moves each changed file of the staging folder into dist/ by a rename, and removes what the build no longer makes. */
function install(): void {
  const built = filesUnder(STAGING);
  for (const file of built) {
    const from = path.join(STAGING, file);
    const to = path.join(DIST, file);
    if (sameContent(from, to)) continue;
    mkdirSync(path.dirname(to), { recursive: true });
    renameSync(from, to);
  }
  const keep = new Set([...built, path.basename(STAMP)]);
  for (const file of filesUnder(DIST)) {
    // A migration left behind would be applied: the folder must hold exactly the project's.
    if (!keep.has(file)) rmSync(path.join(DIST, file), { force: true });
  }
}

function build(): void {
  let hash = inputsHash();
  if (current(hash)) return;
  const unlock = lock();
  try {
    // The build that held the lock may have built this very tree.
    hash = inputsHash();
    if (current(hash)) return;
    rmSync(STAGING, { recursive: true, force: true });
    const tsc = spawnSync(at('node_modules', '.bin', 'tsc'), ['-p', at('tsconfig.build.json'), '--outDir', STAGING], { stdio: 'inherit' });
    if (tsc.status !== 0) process.exit(tsc.status ?? 1);
    const migrations = at('app', 'migrations');
    for (const file of filesUnder(migrations)) {
      mkdirSync(path.dirname(path.join(STAGING, 'app', 'migrations', file)), { recursive: true });
      copyFileSync(path.join(migrations, file), path.join(STAGING, 'app', 'migrations', file));
    }
    // The jobs table is checked here once, and stamped, instead of at every start (app/jobs-table-check.ts).
    const check = spawnSync(process.execPath, [path.join(STAGING, 'app', 'jobs-table-check.js')], { stdio: 'inherit' });
    if (check.status !== 0) process.exit(check.status ?? 1);
    install();
    rmSync(STAGING, { recursive: true, force: true });
    const tmp = `${STAMP}.${process.pid}`;
    writeFileSync(tmp, `${hash}\n`);
    renameSync(tmp, STAMP);
  } finally {
    unlock();
  }
}

build();
