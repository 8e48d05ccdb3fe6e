/**
 * Head sampling that records every span it is asked about and exports a share: a span is
 * recorded (so a trace that fails can still be kept whole, app/tracing/keeping-processor.ts),
 * and a trace is marked sampled, exported whatever happens, when
 *   - its caller's context says sampled (a traceparent or X-Amzn-Trace-Id with the flag set),
 *   - it is a job run, a drain or a failed request's late span (its root carries KEEP_TRACE), or
 *   - its trace id falls in TRACES_SAMPLE_RATIO (taken from the id's random end, not X-Ray's
 *     timestamp at its start).
 * A child span follows its local parent's decision. A request's server span is decided by the
 * same rule (`rootSampled`) before it is made: one not sampled never reaches the SDK
 * (app/tracing/request-span.ts).
 */
import { trace, TraceFlags, type Attributes, type Context } from '@opentelemetry/api';
import { SamplingDecision, type Sampler, type SamplingResult } from '@opentelemetry/sdk-trace-base';

import { KEEP_TRACE, rootSampled } from './trace.js';

const SAMPLED: SamplingResult = { decision: SamplingDecision.RECORD_AND_SAMPLED };
const RECORDED: SamplingResult = { decision: SamplingDecision.RECORD };

export function keepingSampler(ratio: number): Sampler {
  return {
    shouldSample(context: Context, traceId: string, _name: string, _kind: unknown, attributes: Attributes): SamplingResult {
      const parent = trace.getSpanContext(context);
      if (parent !== undefined && !parent.isRemote) return (parent.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED ? SAMPLED : RECORDED;
      return attributes[KEEP_TRACE] === true || rootSampled(parent, traceId, ratio) ? SAMPLED : RECORDED;
    },
    toString: () => `KeepingSampler{ratio=${ratio}}`,
  };
}
