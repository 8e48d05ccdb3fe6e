/**
 * `npm run bench:json-bounds`: what the raw-bytes scan before JSON.parse (app/api/json-bounds.ts:
 * depth, element count, duplicate keys, inexact numbers) costs, as a ratio against JSON.parse
 * of the same bytes (decoded from UTF-8, as body-parser does) in the same run. The bodies are
 * the two a client sends most, and the worst of each kind the scan does extra work for, just
 * under the 100 KB body limit and the element bound: many keys (plain and escaped), many
 * numbers that take the slow path (long, or with a three-digit exponent), one huge number,
 * many small objects, and one long string. Each body is timed alternately with its baseline,
 * BENCH_ROUNDS rounds (default 7), medians, on the compiled module the server runs.
 */
import { fmt, median } from './lib.js';

// The compiled module, as the server runs it (`npm run bench:json-bounds` builds it first).
const { checkJsonShape, MAX_JSON_ELEMENTS } = (await import('../dist/app/api/json-bounds.js' as string)) as typeof import('../app/api/json-bounds.js');

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
/** Bytes timed per measure and round: enough for a stable reading of a 100-byte body too. */
const BYTES_PER_MEASURE = 20_000_000;

const members = MAX_JSON_ELEMENTS - 2;
const pad = 'x'.repeat(90);
const BODIES: Record<string, string> = {
  'usage event': JSON.stringify({ metric: 'api.calls', quantity: 12345, occurredAt: '2026-12-01T10:00:00.123Z', idempotencyKey: 'k-0123456789abcdef' }),
  'new account': JSON.stringify({ name: 'Acme Corporation', email: 'billing@acme.example', plan: 'standard', unitPriceCents: 250 }),
  [`${members} plain keys`]: `{${Array.from({ length: members }, (_, i) => `"a${pad}${i}":0`).join(',')}}`,
  [`${members} escaped keys`]: `{${Array.from({ length: members }, (_, i) => `"\\u0061${pad}${i}":0`).join(',')}}`,
  [`${members} long numbers`]: `[${Array.from({ length: members }, () => `1.${'0'.repeat(95)}`).join(',')}]`,
  [`${members} exponents`]: `[${Array.from({ length: members }, (_, i) => `1.5e${100 + (i % 200)}`).join(',')}]`,
  'one 99 KB number': `[1.${'0'.repeat(99_000)}]`,
  [`${members / 2} small objects`]: `[${Array.from({ length: members / 2 }, (_, i) => `{"a${pad}":${i}}`).join(',')}]`,
  'one 99 KB string': JSON.stringify([pad.repeat(1_100)]),
};

function nsPerCall(fn: () => void, bytes: number): number {
  const calls = Math.max(20, Math.round(BYTES_PER_MEASURE / bytes));
  for (let i = 0; i < calls / 10; i++) fn();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) fn();
  return Number(process.hrtime.bigint() - t0) / calls;
}

console.log(`json-bounds: the scan against JSON.parse of the same bytes, ${ROUNDS} rounds, medians`);
for (const [name, text] of Object.entries(BODIES)) {
  const body = Buffer.from(text);
  checkJsonShape(body);
  const scan: number[] = [];
  const parse: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    scan.push(nsPerCall(() => checkJsonShape(body), body.length));
    parse.push(nsPerCall(() => JSON.parse(body.toString('utf8')), body.length));
  }
  const s = median(scan);
  const p = median(parse);
  console.log(`  ${name.padEnd(22)} ${String(body.length).padStart(7)} B  scan ${fmt(s / 1_000, 2).padStart(8)} µs  JSON.parse ${fmt(p / 1_000, 2).padStart(8)} µs  scan/JSON.parse ${fmt(s / p, 2)}×`);
}
