// The LangGraph.js saver's suites (spec/langgraph), run with vitest; `node --test` runs test/.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    globals: true,
    include: ['spec/**/*.spec.mjs'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
