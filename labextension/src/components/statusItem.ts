/**
 * The status-bar item: "2/4 GPUs in use · yours 4 GiB · idle 5 min" (`statusSummary` in `overview.ts`).
 * The idle state is said in words and also turns it the warning colour; clicking it opens the
 * sidebar.
 */
import { Widget } from '@lumino/widgets';

import { setAttr, setText } from '../dom';
import { trans } from '../i18n';
import { statusSummary } from '../overview';
import type { IGpuMonitorModel } from '../tokens';

export class GpuStatusItem extends Widget {
  /** `short`: the narrow text (`IStatusSummary.short`), for Notebook 7's menu bar. */
  constructor(
    private _model: IGpuMonitorModel,
    onActivate: () => void,
    private _short = false
  ) {
    super({ node: document.createElement('button') });
    this.addClass('jp-GpuStatus');
    this.node.setAttribute('type', 'button');
    this.node.addEventListener('click', onActivate);
    this._model.changed.connect(this.render, this);
    this.render();
  }

  render(): void {
    const { snapshot, state, message } = this._model;
    const { text, short, title, warning } = statusSummary(snapshot, state, message);
    setText(this.node, this._short ? short : text);
    setAttr(this.node, 'title', title);
    setAttr(this.node, 'aria-label', trans.__('%1. Open the GPU monitor.', title));
    this.node.classList.toggle('jp-mod-warning', warning);
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
