/**
 * Real child processes of the built container entry (dist/app/main.js), with their JSON log
 * lines collected, for tests of signals, exit codes and timing.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';

export const MAIN = path.resolve('dist/app/main.js');

export interface LogLine {
  readonly level: string;
  readonly msg: string;
  readonly [key: string]: unknown;
}

export interface Proc {
  readonly child: ChildProcess;
  readonly logs: LogLine[];
  readonly stdout: () => string;
  readonly stderr: () => string;
  /** Resolves with the exit code (or 128 + signal number) and the time of exit. */
  readonly exited: Promise<{ code: number; at: number }>;
  /** Resolves with the first log line matching `pred` (already seen or to come). */
  waitForLog(pred: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  kill(signal?: NodeJS.Signals): void;
}

const SIGNALS: Record<string, number> = { SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };

/** Starts `node <MAIN> ...args` (or another command) with `env` on top of a minimal environment. */
export function start(args: string[], env: Record<string, string | undefined>, command: string[] = [process.execPath, MAIN]): Proc {
  const child = spawn(command[0]!, [...command.slice(1), ...args], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: LogLine[] = [];
  let out = '';
  let err = '';
  let partial = '';
  const waiters: { pred: (l: LogLine) => boolean; resolve: (l: LogLine) => void }[] = [];
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
    partial += chunk;
    const lines = partial.split('\n');
    partial = lines.pop()!;
    for (const text of lines) {
      let line: LogLine;
      try {
        line = JSON.parse(text) as LogLine;
      } catch {
        continue;
      }
      logs.push(line);
      for (const w of [...waiters]) {
        if (w.pred(line)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
      }
    }
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
  const exited = new Promise<{ code: number; at: number }>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code: code ?? 128 + (SIGNALS[signal ?? ''] ?? 0), at: Date.now() }));
  });
  return {
    child,
    logs,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitForLog(pred, timeoutMs = 60_000) {
      const seen = logs.find(pred);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no matching log line within ${timeoutMs} ms; stdout:\n${out}\nstderr:\n${err}`)),
          timeoutMs,
        );
        const waiter = { pred, resolve: (l: LogLine) => (clearTimeout(timer), resolve(l)) };
        waiters.push(waiter);
        void exited.then(() => {
          if (waiters.includes(waiter)) {
            clearTimeout(timer);
            reject(new Error(`process exited before a matching log line; stdout:\n${out}\nstderr:\n${err}`));
          }
        });
      });
    },
    kill(signal = 'SIGTERM') {
      child.kill(signal);
    },
  };
}

/** Starts the HTTP server on a free port and resolves once it listens. */
export async function startServer(env: Record<string, string | undefined>): Promise<Proc & { port: number; url: string }> {
  const proc = start([], { PORT: '0', ...env });
  const line = await proc.waitForLog((l) => l.msg.startsWith('listening on port'));
  const port = line.port as number;
  return Object.assign(proc, { port, url: `http://127.0.0.1:${port}` });
}

/** Runs `node <MAIN> ...args` to completion. */
export async function run(args: string[], env: Record<string, string | undefined>, timeoutMs = 120_000): Promise<{ code: number; stdout: string; stderr: string; logs: LogLine[] }> {
  const proc = start(args, env);
  const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  const { code } = await proc.exited;
  clearTimeout(timer);
  return { code, stdout: proc.stdout(), stderr: proc.stderr(), logs: proc.logs };
}
