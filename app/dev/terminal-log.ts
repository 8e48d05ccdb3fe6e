/**
 * The local launcher's log lines on a terminal: the container's JSON lines, made short.
 *
 * - A request is one line, what a developer scans for first: `GET /accounts 200 4 ms <request id>`.
 * - The metrics lines (the EMF payloads CloudWatch reads, one every DATABASE_PROBE_MS) are
 *   hidden, unless LOCAL_LOG_METRICS=1; shown, each is one line too.
 * - Every other line is pino-pretty's, on one line; warnings and errors keep their fields on
 *   the lines below, but not a stack trace, unless DEBUG is set: a local failure is one line
 *   that names its fix.
 * - A line that is not JSON (a crash's output) passes through as it is.
 *
 * Only the launcher uses this, and only when stdout is a terminal: piped, and always in the
 * container, the JSON lines are left exactly as the process writes them.
 */
import { Transform, type TransformCallback } from 'node:stream';
import { prettyFactory } from 'pino-pretty';

interface Line {
  readonly level?: string;
  readonly time?: string;
  readonly msg?: string;
  readonly _aws?: unknown;
  readonly [key: string]: unknown;
}

const PRETTY = { colorize: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,service' } as const;
const WARN_OR_WORSE = new Set(['warn', 'error', 'fatal']);

function clock(time: string | undefined): string {
  const d = time ? new Date(time) : new Date();
  const pad = (n: number, width = 2) => String(n).padStart(width, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** ANSI colour of a status: green 2xx/3xx, yellow 4xx, red 5xx. */
function statusColour(status: number): string {
  return status >= 500 ? '\x1b[31m' : status >= 400 ? '\x1b[33m' : '\x1b[32m';
}

/** The line without a stack trace, at its top or in its `err` (pino's serialized error). */
function withoutStacks(line: Line): Line {
  const { stack: _stack, ...rest } = line;
  if (typeof rest.err === 'object' && rest.err !== null && 'stack' in rest.err) {
    const { stack: _errStack, ...err } = rest.err as Record<string, unknown>;
    return { ...rest, err };
  }
  return rest;
}

export function isRequestLine(line: Line): boolean {
  return line.msg === 'request' && typeof line.method === 'string' && typeof line.status === 'number';
}

export interface TerminalLogOptions {
  readonly showMetrics: boolean;
  /** Stack traces too (DEBUG). */
  readonly showStacks?: boolean;
  /** Lines to print after the server's `listening on port` line: how to reach it. */
  readonly onListening?: (port: number) => string;
}

export function createTerminalFormatter(options: TerminalLogOptions): (text: string) => string {
  const oneLine = prettyFactory({ ...PRETTY, singleLine: true });
  const full = prettyFactory(PRETTY);
  return (text) => {
    let line: Line;
    try {
      line = JSON.parse(text) as Line;
    } catch {
      return `${text}\n`;
    }
    if (typeof line !== 'object' || line === null) return `${text}\n`;
    if (isRequestLine(line)) {
      const status = line.status as number;
      const cut = line.completed === false ? ' (client gone before the end)' : '';
      return `[${clock(line.time)}] ${line.method as string} ${String(line.path)} ${statusColour(status)}${status}\x1b[0m ${String(line.ms)} ms ${String(line.requestId)}${cut}\n`;
    }
    if (line._aws !== undefined) {
      if (!options.showMetrics) return '';
      const { _aws: _ignored, ...rest } = line;
      return oneLine(rest);
    }
    if (!options.showStacks) line = withoutStacks(line);
    const pretty = (WARN_OR_WORSE.has(String(line.level)) ? full : oneLine)(line);
    if (options.onListening && typeof line.port === 'number' && line.msg?.startsWith('listening on port')) return pretty + options.onListening(line.port);
    return pretty;
  };
}

/** A stream of JSON lines in, terminal lines out. */
export function terminalLogStream(options: TerminalLogOptions): Transform {
  const format = createTerminalFormatter(options);
  let partial = '';
  return new Transform({
    transform(chunk: Buffer, _encoding, done: TransformCallback) {
      const lines = (partial + chunk.toString('utf8')).split('\n');
      partial = lines.pop()!;
      done(null, lines.filter((l) => l !== '').map(format).join(''));
    },
    flush(done: TransformCallback) {
      done(null, partial ? format(partial) : '');
    },
  });
}
