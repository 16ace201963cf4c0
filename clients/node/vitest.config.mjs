// The LangGraph.js saver's suites (spec/langgraph), run with vitest; `node --test` runs test/.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    globals: true,
    // Several runs at once (one per backend under pytest-xdist) share no results file.
    cache: false,
    include: ['spec/**/*.spec.mjs'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
