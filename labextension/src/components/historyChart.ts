/**
 * A GPU's utilization and memory over the history window, readable at a glance:
 *
 * - a fixed 0–100 % scale with labelled grid lines (0, 50, 100 %), so two cards compare directly;
 * - memory as a filled area, utilization as a line on top: the two differ by shape, not only by
 *   colour (the legend's keys show the same shapes), and both keep the theme's colours;
 * - the current values in the legend ("util 87 %", "mem 31 %") and in the chart's ARIA label;
 * - a gap where no sample exists (the server slept while nobody looked, or a value was unknown),
 *   never a straight line across it.
 *
 * Drawing is two `path` attributes per poll in a viewBox whose x unit is a second since the chart's
 * origin; the window slides by moving the viewBox, and the browser scales the strokes
 * (`vector-effect: non-scaling-stroke`).
 */
import type { IHistorySample } from '../tokens';
import { el, setAttr, setText } from '../dom';
import { formatDuration } from '../format';
import { trans } from '../i18n';

const SVG_NS = 'http://www.w3.org/2000/svg';

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string>
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    node.setAttribute(name, value);
  }
  return node;
}

function percentText(value: number | null | undefined): string {
  return value === null || value === undefined ? '—' : `${Math.round(value)} %`;
}

/**
 * One sample's formatted coordinates: x, the y of utilization and of memory (null when unknown),
 * and the two values they were formatted from (to notice a changed value at the same time).
 */
type Coords = [string, string | null, string | null, number | null, number | null];

/**
 * Formats each sample's coordinates once and reuses them while the sample stays in the window:
 * samples are ordered by time, so matching the previous call's samples is a merge, and a poll
 * formats only the new sample instead of the whole window (8 charts x 900 samples).
 */
export class CoordsCache {
  constructor(readonly origin: number) {}

  coords(samples: readonly IHistorySample[], first: number): Coords[] {
    const times: number[] = [];
    const coords: Coords[] = [];
    let j = 0;
    const prevTimes = this._times;
    const prevCoords = this._coords;
    for (let i = first; i < samples.length; i++) {
      const sample = samples[i];
      while (j < prevTimes.length && prevTimes[j] < sample.t) {
        j++;
      }
      let c: Coords;
      if (
        j < prevTimes.length &&
        prevTimes[j] === sample.t &&
        prevCoords[j][3] === sample.utilization &&
        prevCoords[j][4] === sample.memory
      ) {
        c = prevCoords[j];
      } else {
        c = [
          (sample.t - this.origin).toFixed(1),
          sample.utilization === null ? null : yOf(sample.utilization),
          sample.memory === null ? null : yOf(sample.memory),
          sample.utilization,
          sample.memory
        ];
      }
      times.push(sample.t);
      coords.push(c);
    }
    this._times = times;
    this._coords = coords;
    return coords;
  }

  private _times: number[] = [];
  private _coords: Coords[] = [];
}

function yOf(percent: number): string {
  return (100 - Math.min(100, Math.max(0, percent))).toFixed(1);
}

/**
 * SVG path data for `samples` after `start` (seconds): the utilization line and the memory area.
 * x is seconds since `origin`, y is 100 − percent; a gap longer than `gapS` or an unknown value
 * starts a new segment. Exported for tests.
 */
export function chartPaths(
  samples: readonly IHistorySample[],
  start: number,
  origin: number,
  gapS: number,
  cache: CoordsCache = new CoordsCache(origin)
): { utilization: string; memory: string } {
  const util: string[] = [];
  const memory: string[] = [];
  let utilOpen = false;
  let memOpen = false;
  let memLastX = '';
  let previousT = -Infinity;
  // Include the last sample before the window, so the line enters from the left edge.
  let first = 0;
  while (first < samples.length - 1 && samples[first + 1].t < start) {
    first++;
  }
  const coords = cache.coords(samples, first);
  for (let k = 0; k < coords.length; k++) {
    const t = samples[first + k].t;
    const [x, uy, my] = coords[k];
    const gap = t - previousT > gapS;
    previousT = t;
    if (uy === null || gap) {
      utilOpen = false;
    }
    if (uy !== null) {
      util.push(utilOpen ? `L${x},${uy}` : `M${x},${uy}`);
      utilOpen = true;
    }
    if ((my === null || gap) && memOpen) {
      memory.push(`L${memLastX},100Z`);
      memOpen = false;
    }
    if (my !== null) {
      memory.push(memOpen ? `L${x},${my}` : `M${x},100L${x},${my}`);
      memOpen = true;
      memLastX = x;
    }
  }
  if (memOpen) {
    memory.push(`L${memLastX},100Z`);
  }
  return { utilization: util.join(''), memory: memory.join('') };
}

export class HistoryChart {
  readonly node: HTMLElement = el('figure', 'jp-GpuHistory');

  constructor() {
    const plot = el('div', 'jp-GpuHistory-plot');
    const axis = el('div', 'jp-GpuHistory-axis', { 'aria-hidden': 'true' });
    for (const label of ['100 %', '50 %', '0 %']) {
      const tick = el('span', 'jp-GpuHistory-tick');
      tick.textContent = label;
      axis.append(tick);
    }
    for (const y of ['0', '50', '100']) {
      this._grid.append(
        svg('line', {
          class: 'jp-GpuHistory-grid',
          x1: '-1e7',
          x2: '1e7',
          y1: y,
          y2: y
        })
      );
    }
    this._svg.append(this._grid, this._memory, this._utilization);
    plot.append(axis, this._svg);

    const caption = el('figcaption', 'jp-GpuHistory-legend');
    const util = el('span', 'jp-GpuHistory-key jp-mod-utilization');
    util.append(
      el('span', 'jp-GpuHistory-swatch', { 'aria-hidden': 'true' }),
      trans._p('chart legend: GPU utilization', 'util') + ' ',
      this._utilNow
    );
    const memory = el('span', 'jp-GpuHistory-key jp-mod-memory');
    memory.append(
      el('span', 'jp-GpuHistory-swatch', { 'aria-hidden': 'true' }),
      trans._p('chart legend: GPU memory used', 'mem') + ' ',
      this._memNow
    );
    caption.append(util, memory, this._window);
    this.node.append(plot, caption);
  }

  /**
   * Redraw from `samples` (oldest first), the right edge being `now` and the width `windowS`
   * seconds; samples further apart than `gapS` seconds are not joined.
   */
  update(samples: readonly IHistorySample[], now: number, windowS: number, gapS: number): void {
    const start = now - windowS;
    if (!Number.isFinite(this._origin) || now - this._origin > 1e6) {
      this._origin = Math.floor(start);
      this._cache = new CoordsCache(this._origin);
    }
    const paths = chartPaths(samples, start, this._origin, gapS, this._cache);
    setAttr(this._utilization, 'd', paths.utilization);
    setAttr(this._memory, 'd', paths.memory);
    setAttr(this._svg, 'viewBox', `${(start - this._origin).toFixed(1)} 0 ${windowS} 100`);

    const last = samples.length ? samples[samples.length - 1] : undefined;
    setText(this._utilNow, percentText(last?.utilization));
    setText(this._memNow, percentText(last?.memory));
    // The same words as the notebook panel's legend ("last 15 min"): formatDuration.
    const window = formatDuration(windowS);
    setText(this._window, trans.__('last %1', window));
    setAttr(
      this._svg,
      'aria-label',
      trans.__(
        'Utilization (line) and memory (area), 0 to 100 %, over the last %1; now %2 and %3',
        window,
        percentText(last?.utilization),
        percentText(last?.memory)
      )
    );
  }

  private _origin = NaN;
  private _cache = new CoordsCache(0);
  private _svg = svg('svg', {
    class: 'jp-GpuHistory-chart',
    viewBox: '0 0 900 100',
    preserveAspectRatio: 'none',
    role: 'img'
  });
  private _grid = svg('g', { class: 'jp-GpuHistory-grids' });
  private _memory = svg('path', { class: 'jp-GpuHistory-memory' });
  private _utilization = svg('path', { class: 'jp-GpuHistory-utilization' });
  private _utilNow = el('span', 'jp-GpuHistory-now jp-mod-utilization');
  private _memNow = el('span', 'jp-GpuHistory-now jp-mod-memory');
  private _window = el('span', 'jp-GpuHistory-window');
}
