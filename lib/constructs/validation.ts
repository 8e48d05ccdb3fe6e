/**
 * Validation for construct props and context settings: collect every problem, then throw
 * once, so that someone with three mistakes sees all three on one synth.
 */
import { Token, type Duration } from 'aws-cdk-lib';

/** Thrown when props or settings are invalid; its message lists every problem, one per line. */
export class InvalidSettingsError extends Error {
  /** `plural`: `what` is a plural noun ("The settings"), so the message says "have". */
  constructor(readonly what: string, readonly problems: readonly string[], plural = false) {
    super(`${what} ${plural ? 'have' : 'has'} ${problems.length} problem${problems.length === 1 ? '' : 's'}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'InvalidSettingsError';
  }
}

/** Throws an InvalidSettingsError naming `what` when `problems` is not empty. */
export function throwIfProblems(what: string, problems: readonly string[], plural = false): void {
  if (problems.length > 0) throw new InvalidSettingsError(what, problems, plural);
}

/** A collector of problems, with the checks the constructs share. Values that are tokens are skipped. */
export class Problems {
  readonly list: string[] = [];

  add(problem: string): void {
    this.list.push(problem);
  }

  /** `value` must be a whole number in [min, max]. */
  whole(name: string, value: number | undefined, min: number, max = Number.MAX_SAFE_INTEGER): void {
    if (value === undefined || Token.isUnresolved(value)) return;
    if (!Number.isInteger(value) || value < min || value > max) {
      const range = max === Number.MAX_SAFE_INTEGER ? `of at least ${min}` : `between ${min} and ${max}`;
      this.add(`${name} must be a whole number ${range}, got ${value}`);
    }
  }

  /** `value` must be a whole number of seconds in [range.min, range.max]. */
  seconds(name: string, value: Duration | number | undefined, range: { readonly min: number; readonly max: number }): boolean {
    if (value === undefined || Token.isUnresolved(value) || (typeof value !== 'number' && value.isUnresolved())) return true;
    const s = typeof value === 'number' ? value : value.toSeconds({ integral: false });
    if (Number.isInteger(s) && s >= range.min && s <= range.max) return true;
    this.add(`${name} must be a whole number of seconds between ${range.min} and ${range.max}, got ${s}`);
    return false;
  }
}
