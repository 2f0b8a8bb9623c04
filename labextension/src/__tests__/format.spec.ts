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

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;

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

  it.each([
    [0, '0 MiB'],
    [512 * MIB, '512 MiB'],
    [1.5 * MIB, '2 MiB'],
    [1000 * MIB, '1000 MiB'],
    [GIB, '1.0 GiB'],
    [3.9 * GIB, '3.9 GiB'],
    [24 * GIB, '24.0 GiB'],
    [99.94 * GIB, '99.9 GiB'],
    [100 * GIB, '100 GiB'],
    [141.6 * GIB, '142 GiB']
  ])('formats %d bytes as %s', (bytes, text) => {
    expect(formatBytes(bytes)).toBe(text);
  });
});

describe('formatDuration', () => {
  it.each([null, undefined, NaN, Infinity])('shows %s as a dash', value => {
    expect(formatDuration(value)).toBe('—');
  });

  it.each([
    [-5, '0 s'],
    [0, '0 s'],
    [59.9, '59 s'],
    [60, '1 min'],
    [3599, '59 min'],
    [3600, '1 h 0 min'],
    [3 * 3600 + 5 * 60 + 59, '3 h 5 min'],
    [86399, '23 h 59 min'],
    [86400, '1 d 0 h'],
    [2 * 86400 + 4 * 3600 + 59 * 60, '2 d 4 h'],
    [1e9, '11574 d 1 h']
  ])('formats %d s as %s', (seconds, text) => {
    expect(formatDuration(seconds)).toBe(text);
  });
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
    [1, NaN, 0]
  ])('percent(%d, %d) is %d', (part, whole, value) => {
    expect(percent(part, whole)).toBe(value);
  });
});

describe('neutralize', () => {
  // The same table as jupyter_gpu/text.py: the bidi controls of UAX #9 and the C0/C1 controls.
  const BIDI = ['\u061c', '\u200e', '\u200f', '\u202a', '\u202b', '\u202c', '\u202d', '\u202e'];
  const ISOLATES = ['\u2066', '\u2067', '\u2068', '\u2069'];
  const CONTROLS = ['\u0000', '\t', '\n', '\r', '\u001b', '\u001f', '\u007f', '\u0080', '\u0085', '\u009f'];

  it.each([...BIDI, ...ISOLATES, ...CONTROLS])('replaces U+%s with U+FFFD', char => {
    expect(neutralize(`a${char}b`)).toBe('a\ufffdb');
  });

  it('replaces every occurrence, so the Trojan Source spoof reads as what it is', () => {
    expect(neutralize('a\u202eevil\u202e\u2066x')).toBe('a\ufffdevil\ufffd\ufffdx');
    expect(neutralize('evil\u202egnp.ipynb')).toBe('evil\ufffdgnp.ipynb');
  });

  it.each([
    ['Hebrew', 'שלום'],
    ['Arabic', 'مرحبا'],
    ['no-break and narrow no-break spaces', 'a\u00a0b\u202fc'],
    ['zero-width joiner in an emoji', '👩\u200d💻'],
    ['combining marks', 'e\u0301'],
    ['neighbours of the ranges', '\u0020\u00a0\u061b\u061d\u200d\u2029\u202f\u2065\u206a'],
    ['astral characters', '𝔘𝔫𝔦😀']
  ])('leaves %s alone', (_, text) => {
    expect(neutralize(text)).toBe(text);
  });
});

describe('truncate', () => {
  it('keeps text that fits', () => {
    expect(truncate('hello', 5)).toBe('hello');
    expect(truncate('hello', 50)).toBe('hello');
    expect(truncate('', 1)).toBe('');
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
