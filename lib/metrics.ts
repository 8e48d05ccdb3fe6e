/**
 * The job metrics contract. The container writes them as CloudWatch Embedded Metric Format
 * lines on stdout (the awslogs driver turns them into metrics); the infrastructure's alarms
 * and dashboard read them. Both sides import these names, so they cannot drift apart.
 */

/** The CloudWatch namespace when METRICS_NAMESPACE is not set. */
export const DEFAULT_METRICS_NAMESPACE = 'EcsSaasBackend/Jobs';

/** The one dimension every job metric carries: the job's name. */
export const JOB_DIMENSION = 'Job';

export const JOB_METRICS = {
  /** 1 on every heartbeat of a running job. */
  heartbeat: 'Heartbeat',
  /** Items processed so far by the running attempt (a gauge, on every heartbeat). */
  processed: 'Processed',
  /** Milliseconds from the run's start to its end. */
  duration: 'Duration',
  /** 1 when a run succeeds (the missed-run alarm's dead man's switch reads it). */
  succeeded: 'Succeeded',
  /** 1 when a run fails for good, after its retries. */
  failed: 'Failed',
} as const;

/** The dimension of the server's worker metrics: the worker's name. */
export const WORKER_DIMENSION = 'Worker';

/** The server's background workers, by the name their lock, logs and metrics carry. */
export const USAGE_SUMMARY_WORKER = 'usage-summary';

/** Metrics the API server writes (same namespace); the service alarms read them. */
export const SERVICE_METRICS = {
  /** 1 each period a replica sees a worker stalled: no batch completed here and no live leader elsewhere for WORKER_STALL_PERIODS periods. */
  workerStalled: 'WorkerStalled',
  /** 1 each probe (every 10 s, app/health.ts) that found the database unreachable or slower than the probe's limit, else 0. */
  databaseUnavailable: 'DatabaseUnavailable',
  /** Spans the tracer dropped (its queue full, or an export failed), counted since the last report. */
  tracesDropped: 'TracesDropped',
  /** Milliseconds the HTTP drain took, from SIGTERM to the last request answered (one per drain). */
  drainDuration: 'DrainDuration',
  /** Connections of the API's pool checked out, and callers waiting for one (with every database probe). */
  poolInUse: 'PoolInUse',
  poolWaiting: 'PoolWaiting',
} as const;

/** The dimension of the per-route request metrics: the route's template (`GET /accounts/:id`). */
export const ROUTE_DIMENSION = 'Route';

/**
 * Written on the request's access log line (EMF), with the ROUTE_DIMENSION. Latency is on every
 * line (its sample count is the request count); the others only on the lines they count, so
 * a line carries one or two metrics, not five.
 */
export const REQUEST_METRICS = {
  /** Milliseconds from the request's arrival to its answer's end; its SampleCount counts requests. */
  latency: 'Latency',
  /** 1 per answer with a 5xx status. */
  errors: 'Errors',
  /** 1 per 429 (rate limited). */
  throttled: 'Throttled',
  /** 1 per 503 (the database pool or a statement over its limit, or draining). */
  unavailable: 'Unavailable',
} as const;
