import { describe, expect, it } from 'vitest';

import {
  basename,
  displayText,
  formatBytes,
  formatDuration,
  neutralize,
  percent,
  tooltipText,
  truncate
} from '../format';

/** Code points, what `truncate` counts (not UTF-16 units). */
const codePoints = (text: string): number => Array.from(text).length;

/** True when `text` holds a high or low surrogate without its partner (a cut astral character). */
function hasLoneSurrogate(text: string): boolean {
  return /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(text);
}

describe('formatBytes', () => {
  it.each([null, undefined, NaN, Infinity, -Infinity])('shows %s as a dash', value => {
    expect(formatBytes(value)).toBe('—');
  });

  // The values: tests/golden/format.json (golden.spec.ts), the table Python's tests read too.
});

describe('formatDuration', () => {
  it.each([null, undefined, NaN, Infinity])('shows %s as a dash', value => {
    expect(formatDuration(value)).toBe('—');
  });
  // The values: tests/golden/format.json (golden.spec.ts).
});

describe('basename and percent', () => {
  it.each([
    ['work/train.ipynb', 'train.ipynb'],
    ['train.ipynb', 'train.ipynb'],
    ['a/b/c/d.ipynb', 'd.ipynb'],
    ['dir/', 'dir/'],
    ['', '']
  ])('basename(%j) is %j', (path, name) => {
    expect(basename(path)).toBe(name);
  });

  it.each([
    [1, 4, 25],
    [4, 4, 100],
    [5, 4, 100],
    [-1, 4, 0],
    [1, 0, 0],
    [1, -3, 0],
    [1, NaN, 0],
    [NaN, 4, 0],
    [Infinity, Infinity, 0],
    [Infinity, 4, 100],
    [-Infinity, 4, 0]
  ])('percent(%d, %d) is %d', (part, whole, value) => {
    expect(percent(part, whole)).toBe(value);
  });
});

describe('neutralize', () => {
  // The table of replaced and kept characters: tests/golden/format.json (golden.spec.ts).
  it('replaces every occurrence, so the Trojan Source spoof reads as what it is', () => {
    expect(neutralize('a\u202eevil\u202e\u2066x')).toBe('a\ufffdevil\ufffd\ufffdx');
  });
});

describe('truncate', () => {
  it('keeps text that fits', () => {
    expect(truncate('hello', 5)).toBe('hello');
    expect(truncate('hello', 50)).toBe('hello');
    expect(truncate('', 1)).toBe('');
  });

  it('counts a maxChars below 1 as 1 and rounds a fraction down (Python raises there)', () => {
    for (const bad of [0, -1, -100, NaN, 0.5]) {
      expect(truncate('hello world', bad)).toBe('…');
      expect(truncate('a', bad)).toBe('a');
    }
    expect(truncate('hello world', 3.9)).toBe('he…');
    expect(truncate('hello world', Infinity)).toBe('hello world');
  });

  it('cuts to maxChars characters, the last one an ellipsis', () => {
    expect(truncate('hello!', 5)).toBe('hell…');
    expect(truncate('ab', 1)).toBe('…');
  });

  it('counts astral characters as one and never splits a surrogate pair', () => {
    // 3 code points, 6 UTF-16 units: fits in 3.
    expect(truncate('😀😀😀', 3)).toBe('😀😀😀');
    expect(truncate('😀😀😀😀', 3)).toBe('😀😀…');
    expect(truncate('a😀b😀c😀', 4)).toBe('a😀b…');
    for (let max = 1; max <= 8; max++) {
      const cut = truncate('𝔘𝔫𝔦𝔠𝔬𝔡𝔢😀 text', max);
      expect(hasLoneSurrogate(cut)).toBe(false);
      expect(codePoints(cut)).toBeLessThanOrEqual(max);
    }
  });

  it('drops a base character together with its combining marks instead of stripping the marks', () => {
    // 'é' as e + U+0301: cutting between them would show a bare 'e'.
    expect(truncate('abe\u0301cd', 4)).toBe('ab…');
    expect(truncate('abe\u0301cd', 5)).toBe('abe\u0301…');
    // Several marks on one base.
    expect(truncate('xa\u0301\u0302yz', 4)).toBe('x…');
    // Spacing and enclosing marks count too (\p{M}: Mn, Mc, Me).
    expect(truncate('kक\u0903zz', 3)).toBe('k…');
    expect(truncate('k1\u20e3zz', 3)).toBe('k…');
    // Nothing but marks: only the ellipsis is left.
    expect(truncate('\u0301\u0301\u0301\u0301', 2)).toBe('…');
  });

  it('never returns more than maxChars characters', () => {
    const samples = [
      'plain ascii text',
      'e\u0301e\u0301e\u0301e\u0301e\u0301',
      '😀e\u0301😀\u0301x',
      'שלום עולם'
    ];
    for (const text of samples) {
      for (let max = 1; max <= codePoints(text) + 1; max++) {
        const cut = truncate(text, max);
        expect(codePoints(cut)).toBeLessThanOrEqual(max);
        expect(cut === text || cut.endsWith('…')).toBe(true);
        expect(text.startsWith(cut.replace(/…$/, ''))).toBe(true);
      }
    }
  });
});

describe('displayText and tooltipText', () => {
  it('shows the placeholder only for null and undefined', () => {
    expect(displayText(null, 'unknown user')).toBe('unknown user');
    expect(displayText(undefined, 'unknown user')).toBe('unknown user');
    expect(displayText('', 'unknown user')).toBe('');
  });

  it('neutralises, then cuts at 200 characters by default', () => {
    expect(displayText('a\u202eevil', '?')).toBe('a\ufffdevil');
    const long = 'x'.repeat(300);
    expect(displayText(long, '?')).toBe('x'.repeat(199) + '…');
    expect(displayText('x'.repeat(200), '?')).toBe('x'.repeat(200));
    expect(displayText('\u202e'.repeat(10), '?', 4)).toBe('\ufffd\ufffd\ufffd…');
  });

  it('turns a non-string from the server into text instead of failing', () => {
    expect(displayText(42 as unknown as string, '?')).toBe('42');
    expect(displayText(false as unknown as string, '?')).toBe('false');
  });

  it('bounds tooltips at 1000 characters', () => {
    const cut = tooltipText('y'.repeat(10_000), '?');
    expect(codePoints(cut)).toBe(1000);
    expect(cut.endsWith('…')).toBe(true);
    expect(tooltipText('a\u2066b', '?')).toBe('a\ufffdb');
    expect(tooltipText(null, 'no notebook')).toBe('no notebook');
  });
});
