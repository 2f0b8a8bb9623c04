/** Small, pure formatting helpers: one place decides how sizes, durations and names read. */

const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

/** `3.9 GiB`, `512 MiB`, `—` for unknown. */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes)) {
    return '—';
  }
  if (bytes >= GIB) {
    return `${(bytes / GIB).toFixed(bytes >= 100 * GIB ? 0 : 1)} GiB`;
  }
  return `${Math.round(bytes / MIB)} MiB`;
}

/** `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`. */
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
  if (hours < 24) {
    return `${hours} h ${minutes % 60} min`;
  }
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

/** The last path segment, what users call a notebook ("train.ipynb"). */
export function basename(path: string): string {
  const parts = path.split('/');
  return parts[parts.length - 1] || path;
}

/** A percentage for bar widths, clamped to 0..100. */
export function percent(part: number, whole: number): number {
  if (!(whole > 0)) {
    return 0;
  }
  return Math.min(100, Math.max(0, (100 * part) / whole));
}

/**
 * Unicode's explicit bidirectional formatting characters (ALM, LRM, RLM, LRE..RLO, LRI..PDI) and
 * the C0/C1 control characters: replaced by U+FFFD wherever server text is shown, so `a\u202eevil`
 * cannot read as "alive". The same rule as `jupyter_gpu/text.py` (`neutralize`).
 */
// eslint-disable-next-line no-control-regex -- matching control characters is this pattern's purpose
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** `text` with bidi controls and control characters replaced by U+FFFD. */
export function neutralize(text: string): string {
  return text.replace(UNSAFE, '\ufffd');
}

/** `text` cut to `maxChars` characters (code points), the last one "…" when it was cut. */
export function truncate(text: string, maxChars: number): string {
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
