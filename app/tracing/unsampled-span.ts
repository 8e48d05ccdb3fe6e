/**
 * The span of a request the sampler did not pick (most requests, at the default
 * TRACES_SAMPLE_RATIO). It records only what decides whether the request is kept: when it
 * started, and the first failure inside it (`failSpan` on a failed statement). Its ids are
 * real, so the request's log lines carry them; if the request fails, its server span is made
 * when it ends (app/tracing/request-span.ts), under those ids and from that start, and
 * exported. A clean one costs no SDK span at all.
 */
import { SpanStatusCode, TraceFlags, type Span, type SpanContext, type SpanStatus } from '@opentelemetry/api';

export class UnsampledSpan implements Span {
  /** `performance.now()` at the start, which the SDK takes as a start time. */
  readonly startedAt = performance.now();
  /** The first error status set on it, if any. */
  failure: SpanStatus | undefined;
  private readonly context: SpanContext;

  constructor(traceId: string, spanId: string) {
    this.context = { traceId, spanId, traceFlags: TraceFlags.NONE };
  }

  spanContext(): SpanContext {
    return this.context;
  }

  setStatus(status: SpanStatus): this {
    if (status.code === SpanStatusCode.ERROR) this.failure ??= status;
    return this;
  }

  isRecording(): boolean {
    return false;
  }

  // What a kept span says is set when it is made: nothing else is recorded.
  setAttribute(): this {
    return this;
  }

  setAttributes(): this {
    return this;
  }

  addEvent(): this {
    return this;
  }

  addLink(): this {
    return this;
  }

  addLinks(): this {
    return this;
  }

  updateName(): this {
    return this;
  }

  end(): void {}

  recordException(): void {}
}
