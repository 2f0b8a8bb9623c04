/**
 * The MIG slices of a GPU in MIG mode, listed under its card: per slice its `<gpu>:<index>` name
 * (what `%gpu_select` takes), profile, MIG UUID (tooltip), a memory bar with your kernels' share,
 * "util n/a on MIG" (NVML measures no utilization per slice), and its processes, yours marked.
 * All server strings are set as text.
 */
import { el, reconcile, setAttr, setHidden, setText } from '../dom';
import { displayText, formatBytes, tooltipText } from '../format';
import { trans } from '../i18n';
import type { IGpuProcess, IMigSlice } from '../tokens';
import { MemoryBar } from './memoryBar';
import { kernelLabel } from './processRow';

class SliceProcess {
  readonly node = el('li', 'jp-GpuSlice-process');

  update(process: IGpuProcess): void {
    this.node.classList.toggle('jp-mod-own', process.own);
    const unknownUser = trans.__('unknown user');
    const noNotebook = trans.__('no notebook');
    const who = process.own
      ? trans.__('yours · %1', kernelLabel(process))
      : `${displayText(process.user, unknownUser, 40)} · ${displayText(process.name, `pid ${process.pid}`, 60)}`;
    setText(this.node, `${who} · ${formatBytes(process.memory)}`);
    setAttr(
      this.node,
      'title',
      `pid ${process.pid}${process.own ? ` · ${tooltipText(process.notebook, noNotebook)}` : ''}`
    );
  }
}

class SliceView {
  readonly node = el('li', 'jp-GpuSlice');

  constructor() {
    this._header.append(this._title, this._utilization);
    this.node.append(this._header, this._error, this._memory.node, this._list);
    this._utilization.textContent = trans.__('util n/a on MIG');
  }

  update(gpuIndex: number, slice: IMigSlice): void {
    const label = `${gpuIndex}:${slice.index}`;
    setText(this._title, `${label} · MIG ${displayText(slice.profile, '?', 32)}`);
    setAttr(this._title, 'title', `${label} · ${tooltipText(slice.uuid, '')}`);
    setAttr(this.node, 'data-mig-uuid', slice.uuid);
    setAttr(this.node, 'aria-label', trans.__('MIG slice %1 %2', label, displayText(slice.profile, '?', 32)));
    setHidden(this._error, slice.error === null);
    setText(
      this._error,
      slice.error === null ? '' : trans.__('Cannot read this slice: %1', displayText(slice.error, '', 300))
    );
    setHidden(this._memory.node, slice.error !== null);
    const own = slice.processes.filter(p => p.own).reduce((sum, p) => sum + (p.memory ?? 0), 0);
    this._memory.update(slice.memory_used, slice.memory_total, own);
    const processes = [...slice.processes].sort((a, b) => (b.memory ?? 0) - (a.memory ?? 0));
    reconcile(
      this._list,
      this._rows,
      processes,
      p => String(p.pid),
      () => new SliceProcess(),
      (row, p) => row.update(p)
    );
  }

  private _header = el('div', 'jp-GpuSlice-header');
  private _title = el('span', 'jp-GpuSlice-title');
  private _utilization = el('span', 'jp-GpuSlice-utilization');
  private _error = el('div', 'jp-GpuCard-error', { role: 'alert' });
  private _memory = new MemoryBar();
  private _list = el('ul', 'jp-GpuSlice-processes', { 'aria-label': trans.__('Processes on this slice') });
  private _rows = new Map<string, SliceProcess>();
}

/** The slices of one GPU (hidden when the GPU is not in MIG mode). */
export class MigSlices {
  readonly node = el('ul', 'jp-GpuSlices', { 'aria-label': trans.__('MIG slices') });

  update(gpuIndex: number, slices: readonly IMigSlice[] | undefined): void {
    setHidden(this.node, !slices || slices.length === 0);
    reconcile(
      this.node,
      this._views,
      slices ?? [],
      s => s.uuid,
      () => new SliceView(),
      (view, s) => view.update(gpuIndex, s)
    );
  }

  private _views = new Map<string, SliceView>();
}
