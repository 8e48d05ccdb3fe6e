/**
 * Job metrics as CloudWatch Embedded Metric Format lines on stdout.
 *
 * In ECS the awslogs driver ships stdout to CloudWatch Logs, which extracts a metric from
 * every log event carrying an `_aws` block; no agent, no API call, no extra dependency.
 * (The aws-embedded-metrics library would send to a CloudWatch agent in ECS, which this
 * stack does not run.) The lines go through the process's logger, so they never interleave
 * with a log line half-written, but at a fixed `info` level: LOG_LEVEL=warn must not
 * silence the metric the missed-run alarm waits for. Names come from lib/metrics.ts, which
 * the alarms read too.
 */
import { JOB_DIMENSION, JOB_METRICS } from '../../lib/metrics.js';
import type { Logger } from '../logger.js';

export type JobMetric = keyof typeof JOB_METRICS;

const UNITS: Record<JobMetric, 'Count' | 'Milliseconds'> = {
  heartbeat: 'Count',
  processed: 'Count',
  duration: 'Milliseconds',
  succeeded: 'Count',
  failed: 'Count',
};

/** An EMF document: `values` (name → value and unit) under one set of dimensions. */
export function emf(
  namespace: string,
  dimensions: Record<string, string>,
  values: Record<string, { value: number; unit: 'Count' | 'Milliseconds' }>,
  timestamp = Date.now(),
): Record<string, unknown> {
  const entries = Object.entries(values).filter(([, v]) => Number.isFinite(v.value));
  const doc: Record<string, unknown> = {
    _aws: {
      Timestamp: timestamp,
      CloudWatchMetrics: [{ Namespace: namespace, Dimensions: [Object.keys(dimensions)], Metrics: entries.map(([name, v]) => ({ Name: name, Unit: v.unit })) }],
    },
    ...dimensions,
  };
  for (const [name, v] of entries) doc[name] = v.value;
  return doc;
}

/** The EMF document for one set of values of one job. */
export function emfDocument(namespace: string, job: string, values: Partial<Record<JobMetric, number>>, timestamp = Date.now()): Record<string, unknown> {
  const named = Object.fromEntries((Object.entries(values) as [JobMetric, number][]).map(([m, value]) => [JOB_METRICS[m], { value, unit: UNITS[m] }]));
  return emf(namespace, { [JOB_DIMENSION]: job }, named, timestamp);
}

export class JobMetrics {
  private readonly out: Logger;

  constructor(
    logger: Logger,
    private readonly namespace: string,
    private readonly job: string,
  ) {
    this.out = logger.child({}, { level: 'info' });
  }

  /** Writes one EMF line; `fields` and `msg` make the same line readable as a log line. */
  emit(values: Partial<Record<JobMetric, number>>, fields: Record<string, unknown> = {}, msg = 'metrics'): void {
    this.out.info({ ...fields, ...emfDocument(this.namespace, this.job, values) }, msg);
  }
}
