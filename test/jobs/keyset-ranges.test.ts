/**
 * The keyset ranges that billing-run's batches run side by side: the watermark and the ranges
 * done beyond it, for commits in any order and for a resumed run whose ranges are cut
 * elsewhere than its checkpoint's; the turns its checkpoints take; and the lanes.
 */
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { sideBySide } from '../../app/jobs/billing-run.js';
import { RangesDone, Turns, cutRanges, type KeyRange } from '../../app/jobs/keyset-ranges.js';

const NUM_RUNS = Number(process.env.FC_NUM_RUNS ?? 200);

/** Ascending range ends after `after`, from sorted distinct ids. */
const ends = fc.uniqueArray(fc.integer({ min: 1, max: 500 }), { maxLength: 12 }).map((ids) => ids.sort((a, b) => a - b).map(String));

/** The ids a range holds, of 1..600. */
function idsOf(r: KeyRange): number[] {
  const last = r.through === null ? 600 : Number(r.through);
  return Array.from({ length: Math.max(0, last - Number(r.after)) }, (_, i) => Number(r.after) + 1 + i);
}

/** What `done` says is committed: every id up to the watermark, and the ranges beyond it. */
function claimed(done: RangesDone): Set<number> {
  return new Set([...idsOf({ after: '0', through: done.watermark }), ...done.ahead.flatMap(idsOf)]);
}

describe('the ranges done', () => {
  test.prop([ends, fc.infiniteStream(fc.nat())], { numRuns: NUM_RUNS })('commits in any order: never claims a range not committed, keeps at most one range per gap, and ends at the last end', (cuts, picks) => {
    const ranges = cutRanges('0', cuts);
    const pending = [...ranges];
    const committed = new Set<number>();
    let done = new RangesDone('0');
    const it = picks[Symbol.iterator]();
    while (pending.length > 0) {
      const [range] = pending.splice(it.next().value % pending.length, 1);
      const before = BigInt(done.watermark);
      done = done.with(range!, idsOf(range!).length);
      idsOf(range!).forEach((id) => committed.add(id));
      expect(BigInt(done.watermark)).toBeGreaterThanOrEqual(before);
      expect([...claimed(done)].filter((id) => !committed.has(id))).toEqual([]);
      // Each range kept beyond the watermark is followed by a gap: a range not yet committed.
      expect(done.ahead.length).toBeLessThanOrEqual(pending.length + 1);
      for (const r of ranges) if (idsOf(r).every((id) => committed.has(id)) && BigInt(r.after) >= BigInt(done.watermark)) expect(done.covers(r)).toBe(true);
    }
    // All done: one range to the end of the ids, from the watermark, holding every item after it.
    expect(done.ahead).toEqual([{ after: done.watermark, through: null, items: 600 - Number(done.watermark) }]);
    expect(ranges.every((r) => done.covers(r) || BigInt(r.through ?? 0) <= BigInt(done.watermark))).toBe(true);
  });

  test.prop([ends, ends, fc.nat({ max: 11 }), fc.infiniteStream(fc.nat())], { numRuns: NUM_RUNS })('resumed with ranges cut elsewhere: still claims only what committed, and its watermark reaches the end', (oldCuts, newCuts, k, picks) => {
    // An earlier attempt committed some of its ranges, in any order, then stopped.
    const old = cutRanges('0', oldCuts);
    const it = picks[Symbol.iterator]();
    let done = new RangesDone('0');
    const committed = new Set<number>();
    for (let i = 0; i < Math.min(k, old.length); i++) {
      const r = old[it.next().value % old.length]!;
      done = done.with(r, idsOf(r).length);
      idsOf(r).forEach((id) => committed.add(id));
    }
    // The resumed attempt cuts its own ranges after the watermark and runs those not covered.
    const resumed = cutRanges(done.watermark, newCuts.filter((c) => Number(c) > Number(done.watermark)));
    for (const r of resumed.filter((r) => !done.covers(r))) {
      done = done.with(r, idsOf(r).length);
      idsOf(r).forEach((id) => committed.add(id));
      expect([...claimed(done)].filter((id) => !committed.has(id))).toEqual([]);
    }
    for (let id = Number(oldCuts[0] ?? 0) + 1; id <= 600; id++) expect(committed.has(id) || id <= Number(done.watermark)).toBe(true);
    expect(done.ahead.length).toBeLessThanOrEqual(1);
  });

  it('reads a checkpoint of the format before the ranges (no `ahead`) as a bare watermark', () => {
    const done = new RangesDone('40', undefined);
    expect(done.itemsAhead).toBe(0);
    expect(done.covers({ after: '40', through: '50' })).toBe(false);
    expect(done.with({ after: '40', through: '50' }, 10).watermark).toBe('50');
  });
});

describe('turns', () => {
  it('hands out one turn at a time, in the order asked', async () => {
    const turns = new Turns();
    const order: string[] = [];
    const take = async (name: string, hold: Promise<void>) => {
      const end = await turns.take();
      order.push(`${name} in`);
      await hold;
      order.push(`${name} out`);
      end();
    };
    let letGo!: () => void;
    const held = new Promise<void>((resolve) => (letGo = resolve));
    const a = take('a', held);
    const b = take('b', Promise.resolve());
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual(['a in']);
    letGo();
    await Promise.all([a, b]);
    expect(order).toEqual(['a in', 'a out', 'b in', 'b out']);
  });
});

describe('lanes side by side', () => {
  it('runs each item once, at most `width` at a time', async () => {
    let running = 0;
    let most = 0;
    const seen: number[] = [];
    await sideBySide([1, 2, 3, 4, 5, 6, 7], 3, new AbortController().signal, async (n) => {
      running++;
      most = Math.max(most, running);
      await new Promise((resolve) => setImmediate(resolve));
      seen.push(n);
      running--;
    });
    expect(seen.sort()).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(most).toBe(3);
  });

  it('after a failure starts no other item, waits for the items running, then throws the failure', async () => {
    const started: number[] = [];
    let slowEnded = false;
    const run = sideBySide([1, 2, 3, 4], 2, new AbortController().signal, async (n) => {
      started.push(n);
      if (n === 1) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        slowEnded = true;
        return;
      }
      throw new Error(`item ${n} failed`);
    });
    await expect(run).rejects.toThrow('item 2 failed');
    expect(slowEnded).toBe(true);
    expect(started).toEqual([1, 2]);
  });

  it('stops between items once its signal aborts', async () => {
    const stop = new AbortController();
    const done: number[] = [];
    const run = sideBySide([1, 2, 3], 1, stop.signal, async (n) => {
      done.push(n);
      stop.abort(new Error('SIGTERM'));
    });
    await expect(run).rejects.toThrow('SIGTERM');
    expect(done).toEqual([1]);
  });
});
