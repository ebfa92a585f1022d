import { defineConfig } from 'vitest/config';

// Used only by Stryker (stryker.config.mjs): the core's unit and property tests.
export default defineConfig({
  test: {
    include: ['test/core/**/*.test.ts'],
    testTimeout: 60_000,
  },
});
