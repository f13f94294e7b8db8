/**
 * `npm run fuzz` (after the libFuzzer targets): the file readers under mutation for FUZZ_SECONDS each (test/fuzz/readers.ts),
 * first on the fixtures as they are, then on them grown to ~1 MB with a 1 s limit per input. A fresh seed
 * each run (FUZZ_SEED to repeat one); prints a table, exits 1 on a finding.
 *
 *   npx tsx test/fuzz/readers-main.ts      FUZZ_SECONDS=5 FUZZ_SEED=42 npx tsx test/fuzz/readers-main.ts
 */
import { fuzzReaders, type ReaderFuzzResult } from './readers';

const seconds = Number(process.env.FUZZ_SECONDS ?? 60);
const seed = process.env.FUZZ_SEED === undefined ? Date.now() % 2 ** 31 : Number(process.env.FUZZ_SEED);
if (!Number.isInteger(seconds) || seconds < 1) throw new Error(`FUZZ_SECONDS must be a whole number >= 1, got ${process.env.FUZZ_SECONDS}`);
if (!Number.isInteger(seed)) throw new Error(`FUZZ_SEED must be an integer, got ${process.env.FUZZ_SEED}`);

const rows: [string, ReaderFuzzResult][] = [];
for (const r of fuzzReaders({ seed, seconds: Math.max(1, Math.round(seconds / 2)) })) rows.push(['as recorded', r]);
for (const r of fuzzReaders({ seed, seconds: Math.max(1, Math.round(seconds / 2)), growTo: 1 << 20, maxMs: 1000 })) rows.push(['~1 MB', r]);

console.log(`readers (fast-check seed ${seed}, ${seconds} s per reader)`);
console.log(['reader', 'inputs', 'runs', 'parsed', 'rejected', 'slowest ms'].map((h) => h.padEnd(17)).join(''));
for (const [size, r] of rows) {
  console.log([r.reader, size, r.runs, r.parsed, r.rejected, r.slowestMs.toFixed(1)].map((v) => String(v).padEnd(17)).join(''));
}
const failures = rows.filter(([, r]) => r.failure);
for (const [size, r] of failures) console.error(`fuzz: ${r.reader} (${size}): ${r.failure}`);
process.exit(failures.length ? 1 : 0);
