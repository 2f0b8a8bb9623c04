/**
 * A sparkline of a GPU's utilization and memory over the history window.
 *
 * SVG polylines whose `points` are rewritten per poll: one attribute write per line, no layout of
 * child nodes, so eight charts cost well under a millisecond.
 */
import type { IHistorySample } from '../tokens';
import { setAttr, setText } from '../dom';

const SVG_NS = 'http://www.w3.org/2000/svg';
const WIDTH = 300;
const HEIGHT = 40;

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

/** `x,y` pairs for the samples that have a value; a gap (null) starts a new polyline segment. */
function points(
  samples: readonly IHistorySample[],
  key: 'utilization' | 'memory',
  start: number,
  windowS: number
): string {
  const out: string[] = [];
  for (const sample of samples) {
    const value = sample[key];
    if (value === null) {
      continue;
    }
    const x = (WIDTH * (sample.t - start)) / windowS;
    const y = HEIGHT - (HEIGHT * Math.min(100, Math.max(0, value))) / 100;
    out.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  }
  return out.join(' ');
}

export class HistoryChart {
  readonly node: HTMLElement = document.createElement('figure');

  constructor() {
    this.node.className = 'jp-GpuHistory';
    this._svg.append(this._grid, this._memory, this._utilization);
    const caption = document.createElement('figcaption');
    caption.className = 'jp-GpuHistory-legend';
    const util = document.createElement('span');
    util.className = 'jp-GpuHistory-key jp-mod-utilization';
    util.textContent = 'utilization';
    const memory = document.createElement('span');
    memory.className = 'jp-GpuHistory-key jp-mod-memory';
    memory.textContent = 'memory';
    caption.append(util, memory, this._window);
    this.node.append(this._svg, caption);
  }

  /** Redraw from `samples`, the right edge being `now` (seconds) and the width `windowS`. */
  update(samples: readonly IHistorySample[], now: number, windowS: number): void {
    const start = now - windowS;
    setAttr(this._utilization, 'points', points(samples, 'utilization', start, windowS));
    setAttr(this._memory, 'points', points(samples, 'memory', start, windowS));
    const minutes = Math.round(windowS / 60);
    setText(this._window, `last ${minutes} min`);
    const last = samples[samples.length - 1];
    const describe = (v: number | null | undefined): string =>
      v === null || v === undefined ? 'unknown' : `${Math.round(v)} %`;
    setAttr(
      this._svg,
      'aria-label',
      `Utilization and memory over the last ${minutes} minutes; now ${describe(
        last?.utilization
      )} and ${describe(last?.memory)}`
    );
  }

  private _svg = svg('svg', {
    class: 'jp-GpuHistory-chart',
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    preserveAspectRatio: 'none',
    role: 'img'
  });
  private _grid = svg('line', {
    class: 'jp-GpuHistory-grid',
    x1: '0',
    x2: String(WIDTH),
    y1: String(HEIGHT / 2),
    y2: String(HEIGHT / 2)
  });
  private _utilization = svg('polyline', { class: 'jp-GpuHistory-utilization' });
  private _memory = svg('polyline', { class: 'jp-GpuHistory-memory' });
  private _window = document.createElement('span');
}
