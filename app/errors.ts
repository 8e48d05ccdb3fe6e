/**
 * User-facing errors: one catalogue of stable codes and message templates, so the README,
 * the tests and the HTTP answers all refer to the same code.
 */

/** Process exit codes; the README's table is written from this. */
export const EXIT = {
  /** Success, a run that was already done, or a run skipped by its overlap policy. */
  ok: 0,
  /** A failure: a failed or timed-out job, a drain that missed its deadline, a crash. */
  failure: 1,
  /** A usage error: bad configuration, an unknown job, a malformed argument. Nothing was done. */
  usage: 2,
  /** A job stopped by SIGTERM/SIGINT after saving its checkpoint; rerun the same scheduled time to resume. */
  interrupted: 3,
  /**
   * A job that failed with no alert sent: its shutdown missed the deadline, it crashed before
   * its runner existed (or while its modules loaded), or its alert could not be published. A
   * job exits 1 only once its alert is out; its execution retries this one, then alerts once.
   */
  unalerted: 4,
} as const;

export type ErrorCode =
  | 'CONFIG_INVALID'
  | 'USAGE'
  | 'UNKNOWN_JOB'
  | 'INVALID_JSON'
  | 'VALIDATION_FAILED'
  | 'BODY_TOO_LARGE'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'UNAUTHORIZED'
  | 'FORBIDDEN'
  | 'NOT_FOUND'
  | 'METHOD_NOT_ALLOWED'
  | 'CONFLICT'
  | 'IDEMPOTENCY_KEY_REUSED'
  | 'USAGE_NOT_BILLABLE'
  | 'PERIOD_NOT_BILLABLE'
  | 'TOO_MANY_KEYS'
  | 'BAD_REQUEST'
  | 'HEADERS_TOO_LARGE'
  | 'REQUEST_TIMEOUT'
  | 'UNAVAILABLE'
  | 'DEADLINE_EXCEEDED'
  | 'RATE_LIMITED'
  | 'INTERNAL';

/** An error whose message is safe to show a user as it is; anything else is logged and hidden. */
export class UserError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly status = 400,
    readonly details?: unknown,
    /** Response headers that go with the error, e.g. WWW-Authenticate on a 401. */
    readonly headers?: Readonly<Record<string, string>>,
  ) {
    super(message);
    this.name = 'UserError';
  }
}

/** Bad start-up input (environment, arguments). The entry prints the message, no stack, and exits 2. */
export class UsageError extends UserError {
  constructor(message: string, code: ErrorCode = 'USAGE') {
    super(code, message, 400);
    this.name = 'UsageError';
  }
}

/**
 * A start-up failure of the machine, not of the code (a port taken): its message names the fix,
 * so it is logged without a stack trace.
 */
export class StartupProblem extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StartupProblem';
  }
}
