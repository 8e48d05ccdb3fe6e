/**
 * Who listens on a local TCP port, for a message that says what took it: on Linux, from
 * /proc/net/tcp{,6} (the listening socket's inode) and /proc/<pid>/fd (the process holding it).
 * Undefined when it cannot be known (another OS, another user's process).
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

const LISTEN = '0A';

function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && f[3] === LISTEN && parseInt(f[1]!.split(':')[1]!, 16) === port) inodes.add(f[9]!);
    }
  }
  return inodes;
}

/** The program's file name from its command line ("node", "postgres"), else the kernel's short name. */
function programName(pid: string): string {
  const argv0 = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0];
  return argv0 ? argv0.split('/').at(-1)! : readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
}

function holderOf(inodes: Set<string>): { pid: number; name: string } | undefined {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      for (const fd of readdirSync(`/proc/${entry}/fd`)) {
        const target = readlinkSync(`/proc/${entry}/fd/${fd}`);
        if (inodes.has(target.slice('socket:['.length, -1)) && target.startsWith('socket:[')) {
          return { pid: Number(entry), name: programName(entry) };
        }
      }
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return undefined;
}

/** "node (pid 4242)" for the process listening on `port`, or undefined when unknown. */
export function portOwner(port: number): string | undefined {
  try {
    const inodes = listeningInodes(port);
    if (inodes.size === 0) return undefined;
    const holder = holderOf(inodes);
    return holder ? `${holder.name} (pid ${holder.pid})` : undefined;
  } catch {
    return undefined;
  }
}

/** The one line for a port that is taken: which port, by what when knowable, and the variable to set. */
export function portTakenMessage(port: number, variable: string, what: string): string {
  const owner = portOwner(port);
  return `Port ${port} is taken${owner ? ` by ${owner}` : ' by another program'}, so ${what} cannot listen on it. Set ${variable} to a free port (for example ${variable}=${port + 1}).`;
}
