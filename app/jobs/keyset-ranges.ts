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

/**
 * The ranges a run works on, from what is `done` and its plan's `ends`: cut at the ends and
 * where the ranges done beyond the watermark begin and end, so that each range is done or not,
 * never in part; those done are left out.
 */
export function rangesToRun(done: RangesDone, ends: readonly string[]): KeyRange[] {
  const after = BigInt(done.watermark);
  const cuts = [...new Set([...ends, ...done.ahead.flatMap((r) => [r.after, r.through ?? r.after])])].filter((id) => BigInt(id) > after);
  cuts.sort(compareIds);
  return cutRanges(done.watermark, cuts).filter((r) => !done.covers(r));
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
   * What is done once `range` commits too; this one does not change. The watermark moves
   * through every range that starts at it; of the rest, ranges that meet or overlap merge, so
   * what is kept beyond the watermark is at most one range per gap (the batches still running)
   * and the last range, to the end of the ids, once it is done. A resumed run's ranges may be
   * cut elsewhere than its checkpoint's: a range is cut where the watermark has passed.
   */
  with(range: KeyRange, items: number): RangesDone {
    let mark = BigInt(this.mark);
    let rest = sortedAfter(mark, [...this.beyond, { ...range, items }]);
    while (rest[0] !== undefined && BigInt(rest[0].after) === mark && rest[0].through !== null) {
      mark = BigInt(rest[0].through);
      rest = sortedAfter(mark, rest.slice(1));
    }
    const merged: DoneRange[] = [];
    for (const r of rest) {
      const last = merged.at(-1);
      if (last === undefined || (last.through !== null && BigInt(r.after) > BigInt(last.through))) {
        merged.push(r);
        continue;
      }
      // They meet (the items add up) or overlap (what both hold is not known: the larger count stands).
      const meet = r.after === last.through;
      const through = last.through === null || r.through === null ? null : BigInt(r.through) > BigInt(last.through) ? r.through : last.through;
      merged[merged.length - 1] = { after: last.after, through, items: meet ? last.items + r.items : Math.max(last.items, r.items) };
    }
    return new RangesDone(String(mark), merged);
  }
}

/** The parts of `ranges` after `mark` (a range it cuts starts at it), in order. */
function sortedAfter(mark: bigint, ranges: readonly DoneRange[]): DoneRange[] {
  return ranges
    .filter((r) => r.through === null || BigInt(r.through) > mark)
    .map((r) => (BigInt(r.after) < mark ? { ...r, after: String(mark) } : r))
    .sort((a, b) => compareIds(a.after, b.after) || compareEnds(a.through, b.through));
}

function compareIds(a: string, b: string): number {
  return BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0;
}

/** Range ends in order, the end of the ids (null) last. */
function compareEnds(a: string | null, b: string | null): number {
  if (a === b) return 0;
  if (a === null) return 1;
  if (b === null) return -1;
  return compareIds(a, b);
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
