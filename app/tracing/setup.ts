/**
 * Turns tracing on (TRACES=console|file|xray), loaded by dynamic import after the process's
 * first log line, as the logger is, so that a job's start-up pays nothing for it when off and
 * little when on. Registers the tracer provider (ids in X-Ray's format, the keeping sampler
 * and processor), AsyncLocalStorage for the current span, and the propagators; hands the log
 * lines their trace ids; and returns the "traces" shutdown step, which exports what is left
 * within the shutdown deadline.
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { SERVICE_METRICS } from '../../lib/metrics.js';
import { emf } from '../jobs/emf.js';
import { setLogMixin, type Logger } from '../logger.js';
import type { ShutdownStep } from '../shutdown.js';
import { UsageError } from '../errors.js';
import { EXPORT_TIMEOUT_MS, KeepingProcessor } from './keeping-processor.js';
import { propagator } from './propagation.js';
import { keepingSampler } from './sampler.js';
import { traceIds } from './trace-ids.js';
import { markTracingOn, traceFields, type TracingConfig } from './trace.js';

/** No attribute value longer than this: an attribute is a name or an id, never a payload. */
const ATTRIBUTE_VALUE_LIMIT = 256;

export type TracingSettings = TracingConfig & { readonly AWS_REGION?: string };

/** The longest the last export may take at shutdown: one export's timeout, at most a tenth of the deadline. */
export function flushBudgetMs(shutdownTimeoutMs: number): number {
  return Math.min(EXPORT_TIMEOUT_MS, Math.floor(shutdownTimeoutMs / 10));
}

export interface Tracing {
  readonly processor: KeepingProcessor;
  /** The "traces" shutdown step: the spans still queued go out, within the deadline. */
  readonly step: ShutdownStep;
}

/** The exporter TRACES names; each loads only when chosen (the X-Ray one brings the AWS signing and credentials). */
export async function exporterFor(settings: TracingSettings): Promise<SpanExporter> {
  if (settings.TRACES === 'console' || settings.TRACES === 'file') {
    const { consoleExporter, fileExporter } = await import('./json-exporter.js');
    return settings.TRACES === 'console' ? consoleExporter() : fileExporter(settings.TRACES_FILE);
  }
  const region = settings.AWS_REGION ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION;
  if (region === undefined) throw new UsageError('Invalid configuration:\n  AWS_REGION=(unset): TRACES=xray needs the region of X-Ray\'s endpoint (ECS sets it in a task)', 'CONFIG_INVALID');
  const { XRayOtlpExporter, xrayEndpoint } = await import('./xray-exporter.js');
  return new XRayOtlpExporter(xrayEndpoint(region), region);
}

/** Starts tracing, its spans to `exporter` (exporterFor's, or the tests' in-memory one). Once per process. */
export function startTracing(settings: TracingSettings, logger: Logger, service: string, exporter: SpanExporter): Tracing {
  const metrics = logger.child({}, { level: 'info' });
  const processor = new KeepingProcessor(exporter, (count) =>
    metrics.info({ ...emf(settings.METRICS_NAMESPACE, {}, { [SERVICE_METRICS.tracesDropped]: { value: count, unit: 'Count' } }) }, `metrics: ${count} span(s) dropped (queue full or export failed)`),
  );
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': service, 'cloud.provider': 'aws' }),
    idGenerator: traceIds,
    sampler: keepingSampler(settings.TRACES_SAMPLE_RATIO),
    spanProcessors: [processor],
    spanLimits: { attributeValueLengthLimit: ATTRIBUTE_VALUE_LIMIT },
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(propagator);
  trace.setGlobalTracerProvider(provider);
  setLogMixin(traceFields);
  markTracingOn(settings.TRACES_SAMPLE_RATIO);
  logger.info({ traces: settings.TRACES, sampleRatio: settings.TRACES_SAMPLE_RATIO }, `tracing on: ${settings.TRACES}, ${settings.TRACES_SAMPLE_RATIO * 100}% of traces sampled, every failure and job run kept`);
  return {
    processor,
    step: {
      name: 'traces',
      // Its own share of the deadline: an exporter that hangs must not turn a clean drain into a forced exit.
      run: (signal) => processor.flush(AbortSignal.any([signal, AbortSignal.timeout(flushBudgetMs(settings.SHUTDOWN_TIMEOUT_MS))])),
      pending: () => 'the last spans to be exported',
    },
  };
}
