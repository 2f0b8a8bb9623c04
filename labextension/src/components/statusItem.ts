/**
 * The status-bar item: "GPU 2/4 · yours 4.0 GiB". It turns the warning colour when one of this
 * user's kernels is idle while holding GPU memory, and clicking it opens the sidebar.
 */
import { Widget } from '@lumino/widgets';

import { setAttr, setText } from '../dom';
import { cullsDue } from '../culling';
import { formatBytes, formatDuration } from '../format';
import type { IGpuMonitorModel } from '../tokens';

export class GpuStatusItem extends Widget {
  constructor(
    private _model: IGpuMonitorModel,
    onActivate: () => void
  ) {
    super({ node: document.createElement('button') });
    this.addClass('jp-GpuStatus');
    this.node.setAttribute('type', 'button');
    this.node.addEventListener('click', onActivate);
    this._model.changed.connect(this.render, this);
    this.render();
  }

  render(): void {
    const { snapshot, state } = this._model;
    let text: string;
    let title: string;
    let idle = 0;
    let cullInS: number | null = null;
    if (!snapshot || state === 'missing-extension' || state === 'no-nvml') {
      text = 'GPU: n/a';
      title =
        state === 'loading'
          ? 'Waiting for the GPU status'
          : (this._model.message ?? snapshot?.error ?? 'No GPU information');
    } else {
      const inUse = snapshot.gpus.filter(g => g.processes.length > 0).length;
      let own = 0;
      for (const gpu of snapshot.gpus) {
        for (const p of gpu.processes) {
          if (p.own) {
            own += p.memory ?? 0;
            if (p.idle) {
              idle++;
            }
          }
        }
      }
      for (const cull of cullsDue(snapshot).values()) {
        cullInS = Math.min(cullInS ?? Infinity, cull.cullInS);
      }
      const failed = snapshot.gpus.filter(g => g.error !== null).length;
      // "GPU 2/4" is what a glance needs; the user's own share only when there is one.
      text = `GPU ${inUse}/${snapshot.gpus.length}` + (own > 0 ? ` · yours ${formatBytes(own)}` : '');
      if (failed > 0) {
        text += ` · ${failed} failed`;
      }
      if (cullInS !== null) {
        text += ` · idle kernel shut down in ${formatDuration(cullInS)}`;
      }
      title =
        `${inUse} of ${snapshot.gpus.length} GPUs in use; your kernels hold ${formatBytes(own)}` +
        (idle > 0 ? `; ${idle} of your kernels idle while holding GPU memory` : '') +
        (state === 'error' ? ` (stale: ${this._model.message ?? 'update failed'})` : '');
    }
    setText(this.node, text);
    setAttr(this.node, 'title', title);
    setAttr(this.node, 'aria-label', `${title}. Open the GPU monitor.`);
    this.node.classList.toggle('jp-mod-warning', idle > 0 || cullInS !== null);
    this.node.classList.toggle('jp-mod-error', state === 'error' || state === 'missing-extension');
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.changed.disconnect(this.render, this);
    super.dispose();
  }
}
