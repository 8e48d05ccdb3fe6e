/**
 * Between the spans and the exporter: a bounded queue that never makes a request, a run or
 * the drain wait.
 *
 * - A span of a sampled trace is queued as it ends. A span of an unsampled trace is held
 *   until its local root ends: if any span of the trace failed (an error status, a 5xx), the
 *   whole trace is queued, else it is let go. So every error is kept whole at any ratio.
 * - The queue holds at most MAX_QUEUED spans (and MAX_HELD are held); past that a span is
 *   dropped and counted, and so is every span of an export that failed. The count goes out as
 *   the TracesDropped EMF metric (lib/metrics.ts) with the next export, and at the end of a
 *   flush, with the spans the flush could not send in time, so a process's last spans are
 *   counted too.
 * - One export at a time, every EXPORT_INTERVAL_MS, in batches of at most MAX_BATCH: an
 *   exporter that hangs holds one batch (it has its own timeout), not the process.
 * - `flush(signal)` exports what is queued and returns when done or when `signal` aborts (the
 *   shutdown deadline), whichever is first.
 */
import type { Context } from '@opentelemetry/api';
import { SpanStatusCode } from '@opentelemetry/api';
import { ExportResultCode } from '@opentelemetry/core';
import type { ReadableSpan, Span, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace-base';

export const MAX_QUEUED = 4_096;
export const MAX_HELD = 4_096;
export const MAX_BATCH = 512;
export const EXPORT_INTERVAL_MS = 1_000;
/** Longest one export may take (an exporter's own bound): a slow or dead endpoint costs the batch, never the process. */
export const EXPORT_TIMEOUT_MS = 5_000;

const isSampled = (span: ReadableSpan) => (span.spanContext().traceFlags & 1) === 1;
const isLocalRoot = (span: ReadableSpan) => span.parentSpanContext === undefined || span.parentSpanContext.isRemote === true;
const failed = (span: ReadableSpan) => span.status.code === SpanStatusCode.ERROR;

export class KeepingProcessor implements SpanProcessor {
  private queue: ReadableSpan[] = [];
  /** Spans of unsampled traces by trace id, until the local root ends; and whether one failed. */
  private readonly held = new Map<string, { spans: ReadableSpan[]; failed: boolean }>();
  private heldCount = 0;
  private dropped = 0;
  private exporting: Promise<void> | undefined;
  /** The spans of the export under way, counted as dropped if a flush gives up on it. */
  private inFlight = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly exporter: SpanExporter,
    /** Told how many spans were dropped since it was last told (an EMF line). */
    private readonly reportDropped: (count: number) => void,
  ) {
    this.timer = setInterval(() => void this.exportSome(), EXPORT_INTERVAL_MS).unref();
  }

  onStart(_span: Span, _context: Context): void {}

  onEnd(span: ReadableSpan): void {
    if (isSampled(span)) return this.enqueue([span]);
    const traceId = span.spanContext().traceId;
    let trace = this.held.get(traceId);
    if (!isLocalRoot(span)) {
      if (this.heldCount >= MAX_HELD) return void (this.dropped += failed(span) ? 1 : 0);
      if (trace === undefined) this.held.set(traceId, (trace = { spans: [], failed: false }));
      trace.spans.push(span);
      trace.failed ||= failed(span);
      this.heldCount += 1;
      return;
    }
    this.held.delete(traceId);
    this.heldCount -= trace?.spans.length ?? 0;
    if (trace?.failed || failed(span)) this.enqueue([...(trace?.spans ?? []), span]);
  }

  /**
   * Exports everything queued, batch by batch, until done or `signal` aborts; then reports the
   * spans dropped so far, counting as dropped what was still queued or being exported.
   */
  async flush(signal: AbortSignal): Promise<void> {
    const aborted = new Promise<void>((resolve) => (signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true })));
    const drain = (async () => {
      while (!signal.aborted && (this.queue.length > 0 || this.exporting)) await (this.exporting ?? this.exportSome());
    })();
    await Promise.race([drain, aborted]);
    if (signal.aborted) this.giveUp();
    this.report();
  }

  forceFlush(): Promise<void> {
    return this.flush(AbortSignal.timeout(EXPORT_INTERVAL_MS * 5));
  }

  async shutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.forceFlush();
  }

  /** Spans dropped so far and not yet reported. */
  get droppedSinceReport(): number {
    return this.dropped;
  }

  private enqueue(spans: ReadableSpan[]): void {
    const room = MAX_QUEUED - this.queue.length;
    if (spans.length > room) this.dropped += spans.length - Math.max(room, 0);
    if (room > 0) this.queue.push(...spans.slice(0, room));
  }

  /** A flush ran out of time: what is queued, and the export under way, will not go out. */
  private giveUp(): void {
    this.dropped += this.queue.length + this.inFlight;
    this.queue = [];
    this.inFlight = 0;
  }

  private report(): void {
    if (this.dropped === 0) return;
    this.reportDropped(this.dropped);
    this.dropped = 0;
  }

  private exportSome(): Promise<void> {
    if (this.exporting) return this.exporting;
    this.report();
    if (this.queue.length === 0) return Promise.resolve();
    const batch = this.queue.splice(0, MAX_BATCH);
    this.inFlight = batch.length;
    // An export given up on (giveUp) was counted then: its late result is not counted again.
    const settle = (ok: boolean) => {
      if (!ok) this.dropped += this.inFlight;
      this.inFlight = 0;
    };
    this.exporting = new Promise<void>((resolve) => {
      try {
        this.exporter.export(batch, (result) => {
          settle(result.code === ExportResultCode.SUCCESS);
          resolve();
        });
      } catch {
        settle(false);
        resolve();
      }
    }).finally(() => (this.exporting = undefined));
    return this.exporting;
  }
}
