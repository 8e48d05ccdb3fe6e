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
