import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Each test file in its own child process: native memory, page-fault counters and RLIMITs stay apart.
    pool: 'forks',
    execArgv: ['--expose-gc'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
