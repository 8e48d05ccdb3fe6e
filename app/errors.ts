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

/**
 * Every error code the HTTP API answers, with its status: the OpenAPI document's enum for
 * `error.code` and docs/api.md's table are written from this.
 */
export const API_ERRORS = {
  BAD_REQUEST: 400,
  INVALID_JSON: 400,
  VALIDATION_FAILED: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  REQUEST_TIMEOUT: 408,
  CONFLICT: 409,
  TOO_MANY_KEYS: 409,
  BODY_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  IDEMPOTENCY_KEY_REUSED: 422,
  PERIOD_NOT_BILLABLE: 422,
  USAGE_NOT_BILLABLE: 422,
  RATE_LIMITED: 429,
  HEADERS_TOO_LARGE: 431,
  INTERNAL: 500,
  DEADLINE_EXCEEDED: 503,
  UNAVAILABLE: 503,
} as const;

export type ApiErrorCode = keyof typeof API_ERRORS;
/** The codes of start-up and command-line errors, which no HTTP answer carries. */
export type ErrorCode = ApiErrorCode | 'CONFIG_INVALID' | 'USAGE' | 'UNKNOWN_JOB';

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
