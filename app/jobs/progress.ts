/**
 * A run's progress: processed/total, the rate and the ETA. The heartbeat logs it; on a
 * terminal (`npm run job`) one status line on stderr shows it live.
 */

export interface ProgressSnapshot {
  readonly processed: number;
  readonly total: number | null;
  /** Items per second since this attempt began. */
  readonly rate: number | null;
  /** Seconds left at that rate, when the total is known. */
  readonly etaSeconds: number | null;
}

export class Progress {
  processed = 0;
  total: number | null = null;
  private startedAt = 0;
  private startProcessed: number | null = null;

  constructor(private readonly now: () => number = () => performance.now()) {}

  /**
   * Starts counting the rate from the next report. An attempt that resumes from a checkpoint
   * keeps the progress so far, so the heartbeat never reports it going back; a fresh one
   * starts from zero.
   */
  begin(fresh: boolean): void {
    this.startedAt = this.now();
    this.startProcessed = null;
    if (!fresh) return;
    this.processed = 0;
    this.total = null;
  }

  /**
   * `total` undefined keeps the known total; null means unknown. Never lower than what was
   * reported since `begin`: after a reconnect the handler counts again from its last committed
   * checkpoint, which may be a batch behind what it had reported.
   */
  report(processed: number, total?: number | null): void {
    if (this.startProcessed === null) {
      this.startProcessed = processed;
      this.startedAt = this.now();
    }
    this.processed = Math.max(this.processed, processed);
    if (total !== undefined) this.total = total;
  }

  snapshot(): ProgressSnapshot {
    const seconds = (this.now() - this.startedAt) / 1_000;
    const done = this.processed - (this.startProcessed ?? this.processed);
    const rate = seconds > 0.2 && done > 0 ? done / seconds : null;
    const left = this.total === null ? null : Math.max(0, this.total - this.processed);
    const etaSeconds = left === null || rate === null ? null : left / rate;
    return { processed: this.processed, total: this.total, rate, etaSeconds };
  }
}

/**
 * A whole number with thousands separators, as `Intl.NumberFormat('en-US')` writes it. Not Intl
 * itself: its first use loads ICU's number data, about 20 ms of CPU at the start of every job
 * process that imports this module (docs/performance.md#process-start).
 */
const n = { format: (x: number): string => String(Math.round(x)).replace(/\B(?=(\d{3})+(?!\d))/g, ',') };

export function formatDuration(seconds: number): string {
  if (seconds < 1) return `${Math.round(seconds * 1_000)}ms`;
  if (seconds < 10) return `${(Math.round(seconds * 10) / 10).toString()}s`;
  if (seconds < 60) return `${Math.round(seconds)}s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m}m${String(Math.round(seconds % 60)).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

/** "12,000/100,000 (12%) · 4,210/s · ETA 21s" */
export function formatProgress(p: ProgressSnapshot): string {
  const parts = [p.total === null ? n.format(p.processed) : `${n.format(p.processed)}/${n.format(p.total)}${p.total > 0 ? ` (${Math.floor((100 * p.processed) / p.total)}%)` : ''}`];
  if (p.rate !== null) parts.push(`${n.format(p.rate)}/s`);
  if (p.etaSeconds !== null) parts.push(`ETA ${formatDuration(p.etaSeconds)}`);
  return parts.join(' · ');
}

/** Redraws one status line on a terminal's stderr; does nothing when stderr is not a TTY. */
export class ProgressLine {
  private timer: NodeJS.Timeout | undefined;
  private drawn = false;

  constructor(
    private readonly label: string,
    private readonly progress: Progress,
    private readonly stream: NodeJS.WriteStream = process.stderr,
    private readonly everyMs = 250,
  ) {}

  start(): void {
    if (!this.stream.isTTY || this.timer) return;
    this.timer = setInterval(() => this.draw(), this.everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (!this.timer) return;
    clearInterval(this.timer);
    this.timer = undefined;
    this.draw();
    if (this.drawn) this.stream.write('\n');
  }

  private draw(): void {
    const line = `${this.label}: ${formatProgress(this.progress.snapshot())}`;
    this.stream.write(`\r\x1b[K${line.slice(0, Math.max(20, (this.stream.columns || 100) - 1))}`);
    this.drawn = true;
  }
}
