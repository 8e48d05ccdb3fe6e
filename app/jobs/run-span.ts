/**
 * A job run's trace: one per run key (app/tracing/trace-ids.ts derives its id from the key, so
 * a retry in a new task joins it), always kept, with the Step Functions execution that started
 * the task named on its root span. Its children: a span per attempt and per batch (from one
 * checkpoint to the next); reconnects and retries are events on the run's span.
 */
import { context, ROOT_CONTEXT, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { runTraceId, withTraceId } from '../tracing/trace-ids.js';
import { failSpan, KEEP_TRACE, tracer, tracingOn } from '../tracing/trace.js';
import type { RunOutcome } from './outcome.js';
import type { RunState } from './run-state.js';

/** Runs `fn` (the whole run) in the run's root span, ended with its outcome. */
export async function inRunSpan(s: RunState, fn: () => Promise<RunOutcome>): Promise<RunOutcome> {
  if (!tracingOn()) return fn();
  const attributes = {
    'job.name': s.job.name,
    'job.scheduled_time': s.iso,
    'job.run_key': `${s.job.name}@${s.iso}`,
    [KEEP_TRACE]: true,
    ...(s.o.config.SFN_EXECUTION_ARN ? { 'aws.step_functions.execution.arn': s.o.config.SFN_EXECUTION_ARN } : {}),
  };
  const span = withTraceId(runTraceId(s.job.name, s.o.scheduledTime), () => tracer.startSpan(`job ${s.job.name}`, { root: true, attributes }, ROOT_CONTEXT));
  try {
    const outcome = await context.with(trace.setSpan(ROOT_CONTEXT, span), fn);
    span.setAttribute('job.outcome', outcome.kind);
    if (outcome.kind === 'failed') span.setStatus({ code: SpanStatusCode.ERROR, message: `the run failed (${outcome.reason})` });
    return outcome;
  } catch (err) {
    failSpan(span, err);
    throw err;
  } finally {
    span.end();
  }
}

/** The batches of one attempt: a span from the attempt's start or last checkpoint to the next. */
export class BatchSpans {
  private current: Span | undefined;
  private n = 0;
  /** The attempt's context: every batch is its child, wherever the checkpoint is saved from (a handler's transaction). */
  private readonly parent = context.active();

  constructor(private readonly job: string) {
    this.next();
  }

  /** A checkpoint was saved: the batch ends with `processed` items done, and the next begins. */
  checkpoint(processed: number): void {
    this.current?.setAttribute('job.processed', processed);
    this.current?.end();
    this.next();
  }

  /** The attempt is over: the open batch ends, failed when `error` is given (named by its kind, never its message). */
  end(error?: unknown): void {
    if (error !== undefined && this.current !== undefined) failSpan(this.current, error);
    this.current?.end();
    this.current = undefined;
  }

  private next(): void {
    if (!tracingOn()) return;
    this.n += 1;
    this.current = tracer.startSpan(`${this.job} batch`, { attributes: { 'job.batch': this.n } }, this.parent);
  }
}
