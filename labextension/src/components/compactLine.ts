/**
 * One GPU as one line of the compact view (`compactLine` in `overview.ts`): name, a memory bar,
 * utilization, free memory and who is on it. The line is a button: it opens the GPU's full card
 * under it (processes, kernel controls, chart) and closes it again. All server strings are text.
 */
import { el, setAttr, setHidden, setStyle, setText } from '../dom';
import { trans } from '../i18n';
import { compactLine } from '../overview';
import type { IGpu } from '../tokens';
import { GpuCard } from './gpuCard';

export class GpuLine {
  readonly node = el('li', 'jp-GpuLine');

  constructor(private _createCard: () => GpuCard) {
    this._meter.append(this._used);
    this._row.append(this._label, this._meter, this._utilization, this._free, this._who);
    this.node.append(this._row);
    this._row.addEventListener('click', () => {
      this._expanded = !this._expanded;
      setAttr(this._row, 'aria-expanded', String(this._expanded));
      this._onToggle?.();
    });
  }

  /**
   * Show `gpu`; `updateCard` fills the full card when the line is open (it is built on the first
   * opening, and kept, hidden, when closed). `onToggle` is called after a click opened or closed it.
   */
  update(gpu: IGpu, updateCard: (card: GpuCard) => void, onToggle: () => void): void {
    this._onToggle = onToggle;
    const line = compactLine(gpu);
    setAttr(this.node, 'data-gpu-index', String(gpu.index));
    setText(this._label, line.label);
    setStyle(this._used, 'width', `${line.memoryPercent.toFixed(1)}%`);
    setAttr(this._meter, 'aria-valuenow', String(Math.round(line.memoryPercent)));
    setText(this._utilization, line.utilization);
    setText(this._free, line.free);
    setText(this._who, line.who);
    setAttr(this._row, 'title', line.title);
    setAttr(this._row, 'aria-label', line.title);
    setAttr(this._row, 'aria-expanded', String(this._expanded));
    this.node.classList.toggle('jp-mod-free', line.isFree);
    this.node.classList.toggle('jp-mod-idle', line.idle);
    this.node.classList.toggle('jp-mod-error', line.error);
    if (this._expanded) {
      if (!this._card) {
        this._card = this._createCard();
        this.node.append(this._card.node);
      }
      updateCard(this._card);
    }
    if (this._card) {
      setHidden(this._card.node, !this._expanded);
    }
  }

  get expanded(): boolean {
    return this._expanded;
  }

  private _expanded = false;
  private _card: GpuCard | null = null;
  private _onToggle: (() => void) | null = null;
  private _row = el('button', 'jp-GpuLine-row', { type: 'button', 'aria-expanded': 'false' });
  private _label = el('span', 'jp-GpuLine-label');
  private _meter = el('span', 'jp-GpuLine-meter', {
    role: 'meter',
    'aria-label': trans.__('Memory used'),
    'aria-valuemin': '0',
    'aria-valuemax': '100'
  });
  private _used = el('span', 'jp-GpuLine-used');
  private _utilization = el('span', 'jp-GpuLine-utilization');
  private _free = el('span', 'jp-GpuLine-free');
  private _who = el('span', 'jp-GpuLine-who');
}
