// Unit tests for the extension's pure TypeScript (src/__tests__), in node: no browser, no watch.
// A test file that needs a DOM asks for one itself (`// @vitest-environment jsdom`).
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/__tests__/**/*.spec.ts'],
    environment: 'node',
    watch: false
  }
});
