/**
 * Validation for construct props and context settings: collect every problem, then throw
 * once, so that someone with three mistakes sees all three on one synth.
 */
import { Token, type Duration } from 'aws-cdk-lib';

/** Where a group of problems comes from: the file or the settings to fix, named as the user edits them. */
export interface ProblemSource {
  /** "The jobs table (lib/jobs.ts)", "The settings (cdk.json context) of stack Dev". */
  readonly what: string;
  readonly problems: readonly string[];
  /** `what` is a plural noun ("The settings"), so the message says "have". */
  readonly plural?: boolean;
}

/** The jobs table's problems are the table's, wherever they are found (synth, a construct, the CLI). */
export const JOBS_TABLE = 'The jobs table (lib/jobs.ts)';

function describe({ what, problems, plural }: ProblemSource): string {
  return `${what} ${plural ? 'have' : 'has'} ${problems.length} problem${problems.length === 1 ? '' : 's'}:\n${problems.map((p) => `  - ${p}`).join('\n')}`;
}

/**
 * Thrown when props or settings are invalid; its message lists every problem, one per line,
 * grouped by the place each comes from, so that the user opens the right file.
 */
export class InvalidSettingsError extends Error {
  readonly sources: readonly ProblemSource[];

  constructor(what: string, problems: readonly string[], plural?: boolean);
  constructor(sources: readonly ProblemSource[]);
  constructor(what: string | readonly ProblemSource[], problems: readonly string[] = [], plural = false) {
    const sources = typeof what === 'string' ? [{ what, problems, plural }] : what.filter((s) => s.problems.length > 0);
    super(sources.map(describe).join('\n\n'));
    this.name = 'InvalidSettingsError';
    this.sources = sources;
  }

  /** Every problem, whatever its source. */
  get problems(): readonly string[] {
    return this.sources.flatMap((s) => s.problems);
  }
}

/** Throws an InvalidSettingsError naming `what` when `problems` is not empty. */
export function throwIfProblems(what: string, problems: readonly string[], plural = false): void {
  if (problems.length > 0) throw new InvalidSettingsError(what, problems, plural);
}

/** Throws one InvalidSettingsError with every source that has a problem, each under its own name. */
export function throwIfAnyProblems(sources: readonly ProblemSource[]): void {
  if (sources.some((s) => s.problems.length > 0)) throw new InvalidSettingsError(sources);
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
