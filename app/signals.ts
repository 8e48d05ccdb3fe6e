/**
 * The process's one SIGTERM/SIGINT listener, installed by the entry before anything else loads
 * and never removed; it hands each signal to whoever owns shutdown at that moment.
 *
 * Why one permanent listener: removing a signal's last listener closes Node's watcher for it,
 * and a signal already delivered to that watcher but not yet dispatched is dropped with it. A
 * hand-over by remove-then-add (the start-up guard's listener out, the coordinator's in) lost a
 * SIGTERM that came in between; on Node 24 start-up is fast enough to hit that window. Here an
 * owner changes by assignment, so no signal can fall between two owners.
 *
 * Owners in order: the start-up default (app/startup-guard.ts: exit at once with the
 * documented code), then the shutdown coordinator (its sequence). A signal that arrives while
 * no owner is set is remembered and given to the next owner as it takes over.
 */
export type SignalOwner = (signal: NodeJS.Signals) => void;

export const SHUTDOWN_SIGNALS = ['SIGTERM', 'SIGINT'] as const;

let owner: SignalOwner | undefined;
let listening = false;
const early: NodeJS.Signals[] = [];

function dispatch(signal: NodeJS.Signals): void {
  if (owner) owner(signal);
  else early.push(signal);
}

/** Installs the permanent listener (once); idempotent, so an in-process caller without the entry is covered too. */
export function listenForSignals(): void {
  if (listening) return;
  listening = true;
  for (const sig of SHUTDOWN_SIGNALS) process.on(sig, dispatch);
}

/** Makes `next` the owner of shutdown signals; it first receives any signal that came while no owner was set. */
export function takeSignals(next: SignalOwner): void {
  listenForSignals();
  owner = next;
  for (const sig of early.splice(0)) next(sig);
}
