/**
 * Small, pure formatting helpers: one place decides how sizes, durations and names read.
 *
 * The twins of `jupyter_gpu/core/units.py` (`format_bytes`, `format_duration`) and
 * `jupyter_gpu/core/text.py` (`neutralize`, `truncate`, `display_text`), whose docstrings state the
 * rules; `tests/golden/format.json` pins both sides (`src/__tests__/golden.spec.ts` here).
 */

const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

/**
 * `80 GiB`, `74.2 GiB`, `512 MiB`, `-2 GiB`; `—` for unknown (the rule of `core/units.py`).
 *
 * Half-up on the exact byte count: the quotient by a power of two and its remainder are exact in
 * binary floating point, so `q * 10 + floor((r * 10 + GIB / 2) / GIB)` counts tenths of a GiB
 * exactly up to 2**53 bytes, ties included (no `toFixed`, which rounds the decimal it sees).
 */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes)) {
    return '—';
  }
  const magnitude = Math.abs(bytes);
  let count = Math.floor(magnitude);
  if (magnitude - count >= 0.5) {
    count += 1;
  }
  const mibWhole = Math.floor(count / MIB);
  const mebibytes = mibWhole + (2 * (count - mibWhole * MIB) >= MIB ? 1 : 0);
  let text: string;
  if (count < GIB && mebibytes < 1024) {
    text = `${mebibytes} MiB`;
  } else {
    const gibWhole = Math.floor(count / GIB);
    const tenths = gibWhole * 10 + Math.floor((10 * (count - gibWhole * GIB) + GIB / 2) / GIB);
    const tenth = tenths % 10;
    text = `${(tenths - tenth) / 10}${tenth ? `.${tenth}` : ''} GiB`;
  }
  return bytes < 0 && text !== '0 MiB' ? `-${text}` : text;
}

/** `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`; `—` for unknown (the rule of `core/units.py`). */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) {
    return '—';
  }
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const minutes = Math.floor(s / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  // "1 h", not "1 h 0 min": a zero part is left out (the sidebar's "idle after 1 h").
  if (hours < 24) {
    return minutes % 60 ? `${hours} h ${minutes % 60} min` : `${hours} h`;
  }
  return hours % 24 ? `${Math.floor(hours / 24)} d ${hours % 24} h` : `${Math.floor(hours / 24)} d`;
}

/** The last path segment, what users call a notebook ("train.ipynb"). */
export function basename(path: string): string {
  const parts = path.split('/');
  return parts[parts.length - 1] || path;
}

/** A percentage for bar widths, clamped to 0..100; 0 when it is not a number (NaN, Infinity/Infinity). */
export function percent(part: number, whole: number): number {
  if (!(whole > 0)) {
    return 0;
  }
  const value = (100 * part) / whole;
  return Number.isNaN(value) ? 0 : Math.min(100, Math.max(0, value));
}

/**
 * The code points `neutralize` replaces: Cc, Cf, Cs, Co, Zl and Zp as of Unicode 15.1, as explicit
 * ranges (the same list as `HIDDEN_RANGES` in `jupyter_gpu/core/text.py`, whose docstring says
 * why). With the `u` flag a surrogate range matches lone surrogates only.
 */
const HIDDEN = new RegExp(
  '[' +
    [
      '\\u{0}-\\u{1f}', // Cc: C0 controls
      '\\u{7f}-\\u{9f}', // Cc: DEL and C1 controls
      '\\u{ad}', // Cf: SOFT HYPHEN
      '\\u{600}-\\u{605}', // Cf: Arabic number signs
      '\\u{61c}', // Cf: ARABIC LETTER MARK
      '\\u{6dd}', // Cf: ARABIC END OF AYAH
      '\\u{70f}', // Cf: SYRIAC ABBREVIATION MARK
      '\\u{890}-\\u{891}', // Cf: Arabic pound/piastre mark above
      '\\u{8e2}', // Cf: ARABIC DISPUTED END OF AYAH
      '\\u{180e}', // Cf: MONGOLIAN VOWEL SEPARATOR
      '\\u{200b}-\\u{200f}', // Cf: ZWSP, ZWNJ, ZWJ, LRM, RLM
      '\\u{2028}-\\u{2029}', // Zl, Zp: LINE SEPARATOR, PARAGRAPH SEPARATOR
      '\\u{202a}-\\u{202e}', // Cf: LRE, RLE, PDF, LRO, RLO
      '\\u{2060}-\\u{2064}', // Cf: WORD JOINER, invisible operators
      '\\u{2066}-\\u{206f}', // Cf: LRI, RLI, FSI, PDI, deprecated format characters
      '\\u{d800}-\\u{dfff}', // Cs: surrogates (only lone ones exist in text)
      '\\u{e000}-\\u{f8ff}', // Co: private use
      '\\u{feff}', // Cf: ZERO WIDTH NO-BREAK SPACE (BOM)
      '\\u{fff9}-\\u{fffb}', // Cf: interlinear annotation
      '\\u{110bd}', // Cf: KAITHI NUMBER SIGN
      '\\u{110cd}', // Cf: KAITHI NUMBER SIGN ABOVE
      '\\u{13430}-\\u{1343f}', // Cf: Egyptian hieroglyph format controls
      '\\u{1bca0}-\\u{1bca3}', // Cf: shorthand format controls
      '\\u{1d173}-\\u{1d17a}', // Cf: musical symbol format controls
      '\\u{e0001}', // Cf: LANGUAGE TAG
      '\\u{e0020}-\\u{e007f}', // Cf: tag characters
      '\\u{f0000}-\\u{ffffd}', // Co: supplementary private use area A
      '\\u{100000}-\\u{10fffd}' // Co: supplementary private use area B
    ].join('') +
    ']',
  'gu'
);

/** `text` with every hidden character (see `HIDDEN`) replaced by U+FFFD. */
export function neutralize(text: string): string {
  return text.replace(HIDDEN, '\ufffd');
}

/**
 * `text` cut to `maxChars` characters (code points), the last one "…" when it was cut.
 *
 * A `maxChars` below 1 (or NaN) counts as 1, and a fraction is rounded down: Python's `truncate`
 * raises ValueError there, but a view must not throw on a width, nor show almost the whole text
 * (the slice end `maxChars - 1` was negative, counted from the end). For valid input (an integer
 * of at least 1) both sides agree (`tests/golden/format.json`).
 */
export function truncate(text: string, maxChars: number): string {
  maxChars = maxChars >= 1 ? Math.floor(maxChars) : 1;
  if (text.length <= maxChars) {
    return text;
  }
  const chars = Array.from(text);
  if (chars.length <= maxChars) {
    return text;
  }
  let cut = maxChars - 1;
  // Keep a combining mark with its base character.
  while (cut > 0 && /\p{M}/u.test(chars[cut])) {
    cut--;
  }
  return chars.slice(0, cut).join('') + '…';
}

/**
 * What the sidebar shows for a string from the server: neutralised, and cut at `maxChars` (CSS
 * cuts it again to the width with an ellipsis; the element's tooltip holds the full text).
 */
export function displayText(value: string | null | undefined, missing: string, maxChars = 200): string {
  if (value === null || value === undefined) {
    return missing;
  }
  return truncate(neutralize(String(value)), maxChars);
}

/** The tooltip form: neutralised, long but bounded (a 10 KB name makes no 10 KB tooltip). */
export function tooltipText(value: string | null | undefined, missing: string): string {
  return displayText(value, missing, 1000);
}
