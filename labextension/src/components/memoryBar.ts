/**
 * A GPU's memory as one bar: the share held by this user's kernels, the rest of the used memory,
 * and free space. An ARIA meter, so a screen reader reads "Memory 12.0 of 80.0 GiB".
 */
import { el, setAttr, setStyle, setText } from '../dom';
import { formatBytes, percent } from '../format';
import { trans } from '../i18n';

export class MemoryBar {
  readonly node = el('div', 'jp-GpuMemory');

  constructor() {
    this._meter.append(this._own, this._others);
    this.node.append(this._meter, this._label);
  }

  update(used: number, total: number, own: number): void {
    const ownPct = percent(own, total);
    const othersPct = Math.max(0, percent(used, total) - ownPct);
    setStyle(this._own, 'width', `${ownPct.toFixed(2)}%`);
    setStyle(this._others, 'width', `${othersPct.toFixed(2)}%`);
    const text = `${formatBytes(used)} / ${formatBytes(total)}`;
    setText(this._label, own > 0 ? `${text} (yours: ${formatBytes(own)})` : text);
    setAttr(this._meter, 'aria-valuenow', String(Math.round(percent(used, total))));
    setAttr(
      this._meter,
      'aria-valuetext',
      own > 0
        ? trans.__(
            'Memory %1 of %2 used, %3 by your kernels',
            formatBytes(used),
            formatBytes(total),
            formatBytes(own)
          )
        : trans.__('Memory %1 of %2 used', formatBytes(used), formatBytes(total))
    );
  }

  private _meter = el('div', 'jp-GpuMemory-meter', {
    role: 'meter',
    'aria-label': trans.__('Memory'),
    'aria-valuemin': '0',
    'aria-valuemax': '100'
  });
  private _own = el('div', 'jp-GpuMemory-own');
  private _others = el('div', 'jp-GpuMemory-others');
  private _label = el('div', 'jp-GpuMemory-label');
}
