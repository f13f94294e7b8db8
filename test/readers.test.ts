import { describe, expect, it } from 'vitest';

import { fuzzReaders } from './fuzz/readers';

describe('file readers under mutation (test/fuzz/readers.ts; longer runs: npm run fuzz)', () => {
  it('every mutated real file ends in a result or a TensorPoolError naming the file', () => {
    const results = fuzzReaders({ seed: 20261123, runs: 300 });
    for (const r of results) {
      expect(r.failure, r.reader).toBeUndefined();
      expect(r.runs, r.reader).toBe(300);
      expect(r.rejected, `${r.reader}: mutations must reach the readers' errors`).toBeGreaterThan(0);
    }
    // The readers still accept what they should: some mutations (in numbers, say) leave a valid file.
    expect(results.reduce((n, r) => n + r.parsed, 0)).toBeGreaterThan(0);
  }, 120_000);
});
