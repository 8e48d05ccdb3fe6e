/**
 * TRACES=console and TRACES=file: each span as one JSON line, to stderr (stdout carries the
 * log lines) or appended to TRACES_FILE. For a local run, to see a request's or a run's spans
 * without an AWS account.
 */
import { appendFile } from 'node:fs/promises';
import { SpanKind } from '@opentelemetry/api';
import { ExportResultCode, hrTimeToMilliseconds, type ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import { xrayTraceId } from './trace.js';

/** One span as a plain object: ids in X-Ray's format, times in epoch milliseconds. */
export function spanJson(span: ReadableSpan): Record<string, unknown> {
  const { traceId, spanId } = span.spanContext();
  return {
    traceId: xrayTraceId(traceId),
    spanId,
    parentSpanId: span.parentSpanContext?.spanId,
    name: span.name,
    kind: SpanKind[span.kind],
    startMs: hrTimeToMilliseconds(span.startTime),
    durationMs: hrTimeToMilliseconds(span.duration),
    status: span.status,
    attributes: span.attributes,
    events: span.events.map((e) => ({ name: e.name, atMs: hrTimeToMilliseconds(e.time), attributes: e.attributes })),
  };
}

export class JsonLinesExporter implements SpanExporter {
  constructor(private readonly write: (text: string) => Promise<void>) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    const text = spans.map((s) => `${JSON.stringify(spanJson(s))}\n`).join('');
    this.write(text).then(
      () => done({ code: ExportResultCode.SUCCESS }),
      (error: Error) => done({ code: ExportResultCode.FAILED, error }),
    );
  }

  async shutdown(): Promise<void> {}
}

export const consoleExporter = () => new JsonLinesExporter((text) => new Promise((resolve) => process.stderr.write(text, () => resolve())));
export const fileExporter = (file: string) => new JsonLinesExporter((text) => appendFile(file, text));
