/**
 * Keyset ranges that batches run side by side: `(after, through]` of ids, `through` null for
 * "to the end". The ranges are cut up front, each ending on every `size`-th id, so each batch
 * knows its own and none waits for the one before it to find where it starts.
 *
 * What is done is kept as a watermark (every range up to it committed) and the ranges
 * committed beyond it (`ahead`), since batches that run side by side finish in any order. A
 * resumed run skips the ranges its checkpoint has ahead and redoes the others from the
 * watermark; a redone batch inserts nothing twice.
 */
export interface KeyRange {
  /** The range starts after this id. */
  readonly after: string;
  /** The range ends at this id, included; null: at the last one. */
  readonly through: string | null;
}

/** A range committed beyond the watermark, with how many items it held. */
export interface DoneRange extends KeyRange {
  readonly items: number;
}

/** The ranges from `after` on, cut at `ends` (each a range's last id, ascending), then one to the end. */
export function cutRanges(after: string, ends: readonly string[]): KeyRange[] {
  const ranges: KeyRange[] = [];
  let from = after;
  for (const end of ends) {
    ranges.push({ after: from, through: end });
    from = end;
  }
  ranges.push({ after: from, through: null });
  return ranges;
}

/** Whether `inner` lies within `outer`. */
function within(inner: KeyRange, outer: KeyRange): boolean {
  if (BigInt(inner.after) < BigInt(outer.after)) return false;
  if (outer.through === null) return true;
  return inner.through !== null && BigInt(inner.through) <= BigInt(outer.through);
}

/** The watermark, and what is done beyond it. */
export class RangesDone {
  constructor(
    private mark: string,
    private beyond: readonly DoneRange[] = [],
  ) {}

  /** Every range up to this id is committed; null once the last range is. */
  get watermark(): string {
    return this.mark;
  }

  get ahead(): readonly DoneRange[] {
    return this.beyond;
  }

  /** Items in the ranges done beyond the watermark. */
  get itemsAhead(): number {
    return this.beyond.reduce((n, r) => n + r.items, 0);
  }

  /** Whether `range` is done already (a resumed run skips it). */
  covers(range: KeyRange): boolean {
    return this.beyond.some((done) => within(range, done));
  }

  /**
   * What is done once `range` commits too; this one does not change. Ranges that meet or
   * overlap merge, so what is kept beyond the watermark is at most one range per gap: the
   * batches still running. (A resumed run's ranges may be cut elsewhere than its checkpoint's.)
   */
  with(range: KeyRange, items: number): RangesDone {
    const mark = BigInt(this.mark);
    const end = (r: KeyRange) => (r.through === null ? null : BigInt(r.through));
    const sorted = [...this.beyond, { ...range, items }]
      .filter((r) => end(r) === null || end(r)! > mark)
      .map((r) => (BigInt(r.after) < mark ? { ...r, after: this.mark } : r))
      .sort((a, b) => (BigInt(a.after) < BigInt(b.after) ? -1 : 1));
    const merged: DoneRange[] = [];
    for (const r of sorted) {
      const last = merged.at(-1);
      const lastEnd = last === undefined ? undefined : end(last);
      if (last === undefined || (lastEnd !== null && BigInt(r.after) > lastEnd!)) {
        merged.push(r);
        continue;
      }
      const through = lastEnd === null || end(r) === null ? null : lastEnd! > end(r)! ? last.through : r.through;
      merged[merged.length - 1] = { after: last.after, through, items: last.items + r.items };
    }
    const first = merged[0]!;
    // Done from the watermark on: it moves to the range's end, unless that is the end of the ids.
    if (first.after === this.mark && first.through !== null) return new RangesDone(first.through, merged.slice(1));
    return new RangesDone(this.mark, merged);
  }
}

/** Hands out turns one at a time, in the order they were asked for. */
export class Turns {
  private tail: Promise<void> = Promise.resolve();

  /** Resolves with the function that ends the turn, once every earlier turn has ended. */
  take(): Promise<() => void> {
    let end!: () => void;
    const ended = new Promise<void>((resolve) => (end = resolve));
    const ready = this.tail.then(() => end);
    this.tail = ended;
    return ready;
  }
}
