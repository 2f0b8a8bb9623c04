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
