/// <reference types="node" />
/**
 * The golden table `tests/golden/format.json` (also read by `tests/test_golden_format.py`) against
 * the sidebar's `format.ts` and the hub console's `console.js`: every face formats sizes,
 * durations and text from elsewhere by the rules of `jupyter_gpu/core/units.py` and `core/text.py`.
 */
import { readFileSync } from 'node:fs';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';

import { displayText, formatBytes, formatDuration, neutralize, truncate } from '../format';
import { availability, IAvailabilityFacts, runDescription } from '../overview';

interface IRow {
  input: unknown;
  expected: string;
  why?: string;
  max_chars?: number;
  missing?: string;
}

const read = (relative: string): string => readFileSync(new URL(relative, import.meta.url), 'utf-8');
const GOLDEN = JSON.parse(read('../../../tests/golden/format.json')) as Record<string, IRow[]>;

/** The console's namespace: console.js run in a context without a document, as node sees it. */
interface IConsoleFormat {
  formatBytes(bytes: unknown): string;
  formatDuration(seconds: unknown): string;
  neutralize(text: string): string;
  truncate(text: string, maxChars: number): string;
  displayText(value: unknown, missing: string, maxChars: number): string;
}
const context: { jupyterGpuFormat?: IConsoleFormat } = {};
runInNewContext(read('../../../jupyter_gpu/hub/static/console.js'), context);
const CONSOLE = context.jupyterGpuFormat as IConsoleFormat;

const SPECIAL: Record<string, number> = { NaN: NaN, Infinity: Infinity, '-Infinity': -Infinity };
const number = (value: unknown): number | null =>
  typeof value === 'string' ? SPECIAL[value] : (value as number | null);
const label = (row: IRow, n: number): string => `${n}: ${row.why ?? JSON.stringify(row.input).slice(0, 40)}`;
const cases = (name: string): [string, IRow][] => GOLDEN[name].map((row, n) => [label(row, n), row]);

describe.each([
  ['format.ts', { formatBytes, formatDuration, neutralize, truncate, displayText }],
  ['console.js', CONSOLE]
])('%s follows the golden table', (_, format) => {
  it('has rows in every section', () => {
    for (const name of ['bytes', 'duration', 'neutralize', 'truncate', 'display']) {
      expect(GOLDEN[name].length).toBeGreaterThan(3);
    }
  });

  it.each(cases('bytes'))('bytes %s', (_, row) => {
    expect(format.formatBytes(number(row.input))).toBe(row.expected);
  });

  it.each(cases('duration'))('duration %s', (_, row) => {
    expect(format.formatDuration(number(row.input))).toBe(row.expected);
  });

  it.each(cases('neutralize'))('neutralize %s', (_, row) => {
    expect(format.neutralize(row.input as string)).toBe(row.expected);
  });

  it.each(cases('truncate'))('truncate %s', (_, row) => {
    expect(format.truncate(row.input as string, row.max_chars as number)).toBe(row.expected);
  });

  it.each(cases('display'))('display %s', (_, row) => {
    const value = row.input as string | null;
    expect(format.displayText(value, row.missing as string, row.max_chars as number)).toBe(row.expected);
  });
});

interface IAvailabilityRow {
  facts: IAvailabilityFacts;
  expected: string;
  why?: string;
}
interface IRunRow {
  label: string;
  since: number;
  now: number;
  expected: string;
  why?: string;
}
const RULE = JSON.parse(read('../../../tests/golden/availability.json')) as {
  availability: IAvailabilityRow[];
  run: IRunRow[];
};

describe('overview.ts follows the golden table of free (core/availability.py)', () => {
  it.each(
    RULE.availability.map((row, n): [string, IAvailabilityRow] => [`${n}: ${row.why ?? row.expected}`, row])
  )('availability %s', (_, row) => {
    expect(availability(row.facts)).toBe(row.expected);
  });

  it.each(RULE.run.map((row, n): [string, IRunRow] => [`${n}: ${row.why ?? row.expected}`, row]))(
    'run %s',
    (_, row) => {
      expect(runDescription({ label: row.label, since: row.since }, row.now)).toBe(row.expected);
    }
  );
});
