/**
 * Timing numbers that cross the boundary between the infrastructure and the container.
 *
 * Plain data with no aws-cdk-lib import: the CDK constructs derive the container's
 * environment from these functions, and the container's config derives its local defaults
 * from the same functions, so neither side can type a number twice.
 */

/** ECS waits this long between SIGTERM and SIGKILL when a task definition sets no stopTimeout. */
export const ECS_DEFAULT_STOP_TIMEOUT_SECONDS = 30;

/** Fargate accepts a container stopTimeout of at most this many seconds. */
export const FARGATE_MAX_STOP_TIMEOUT_SECONDS = 120;

/** Fargate accepts a container stopTimeout of at least this many seconds. */
export const FARGATE_MIN_STOP_TIMEOUT_SECONDS = 2;

/**
 * The drain deadline falls this long before SIGKILL, so that after a deadline the process
 * still has time to destroy its sockets, release its locks, flush its logs and exit 1 on
 * its own terms rather than be killed mid-write.
 */
export const SHUTDOWN_MARGIN_MS = 5_000;

/** A short stopTimeout keeps this share of itself as the margin instead, so the drain never gets less than 80%. */
export const SHUTDOWN_MARGIN_MAX_SHARE = 0.2;

/** The ALB's own default idle timeout (seconds). */
export const ALB_DEFAULT_IDLE_TIMEOUT_SECONDS = 60;

/**
 * Node must keep an idle keep-alive socket open longer than the ALB does, so that the ALB
 * is always the side that closes it. Otherwise the ALB reuses a socket Node has just
 * closed and answers 502.
 */
export const KEEP_ALIVE_MARGIN_MS = 5_000;

/** SHUTDOWN_TIMEOUT_MS for a container whose stopTimeout is `stopTimeoutSeconds`. */
export function shutdownTimeoutMs(stopTimeoutSeconds: number): number {
  const stopTimeout = stopTimeoutSeconds * 1_000;
  return stopTimeout - Math.min(SHUTDOWN_MARGIN_MS, Math.floor(stopTimeout * SHUTDOWN_MARGIN_MAX_SHARE));
}

/** KEEP_ALIVE_TIMEOUT_MS for a service behind an ALB whose idle timeout is `idleTimeoutSeconds`. */
export function keepAliveTimeoutMs(idleTimeoutSeconds: number): number {
  return idleTimeoutSeconds * 1_000 + KEEP_ALIVE_MARGIN_MS;
}

/**
 * The API's per-request deadline by default (REQUEST_DEADLINE_MS): a few seconds, room for
 * the default pool wait (2 s) and statement timeout (5 s), and far below the ALB's idle
 * timeout, so a stalled request gets the task's 503 rather than the ALB's 504.
 */
export const REQUEST_DEADLINE_MS = 8_000;

/** REQUEST_DEADLINE_MS behind an ALB whose idle timeout is `idleTimeoutSeconds`: the default, or less when the ALB gives up sooner. */
export function requestDeadlineMs(idleTimeoutSeconds: number): number {
  return Math.min(REQUEST_DEADLINE_MS, Math.max(100, idleTimeoutSeconds * 1_000 - KEEP_ALIVE_MARGIN_MS));
}
