/**
 * The sidebar panel: a header (driver, attribution, last update, the compact toggle, refresh), the
 * summary line of free GPUs and MIG slices, a banner for the states that are not "ok", and one
 * `GpuCard` per GPU keyed by UUID, or in compact mode one `GpuLine` per GPU (which opens its card).
 *
 * It renders synchronously on the model's `changed` signal while visible; while collapsed it only
 * remembers that it is stale and renders once when shown (the model keeps the history meanwhile).
 */
import { refreshIcon } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { el, reconcile, setAttr, setHidden, setText } from '../dom';
import { displayText, formatDuration } from '../format';
import { gpuIcon } from '../icons';
import { trans } from '../i18n';
import { CompactMode, freeSummary, headerLine, isCompact } from '../overview';
import type { IGpu, IGpuMonitorModel } from '../tokens';
import { SIDEBAR_ID } from '../tokens';
import { GpuLine } from './compactLine';
import { GpuCard } from './gpuCard';
import type { IProcessActions } from './processRow';
import { UsageSummary } from './usageSummary';

export class GpuSidebar extends Widget {
  constructor(
    readonly model: IGpuMonitorModel,
    private _actions: IProcessActions,
    private _historyS: () => number,
    private _onCompactModeChange: (mode: CompactMode) => void = () => undefined
  ) {
    super();
    this.id = SIDEBAR_ID;
    this.addClass('jp-GpuSidebar');
    this.title.icon = gpuIcon;
    this.title.caption = trans.__('GPU monitor');
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', trans.__('GPU monitor'));

    const header = el('header', 'jp-GpuSidebar-header');
    const heading = el('h2', 'jp-GpuSidebar-title');
    heading.textContent = trans.__('GPUs');
    const refresh = el('button', 'jp-GpuSidebar-refresh', {
      type: 'button',
      'aria-label': trans.__('Refresh GPU status'),
      title: trans.__('Refresh GPU status')
    });
    refreshIcon.element({ container: refresh, tag: 'span' });
    refresh.addEventListener('click', () => void this.model.refresh().catch(() => undefined));
    this._compactToggle.textContent = trans.__('Compact');
    this._compactToggle.addEventListener('click', () => {
      // The toggle says what is shown now and switches to the other view; the choice is kept (settings).
      this.compactMode = this._compact ? 'cards' : 'compact';
      this._onCompactModeChange(this._compactMode);
    });
    const tools = el('div', 'jp-GpuSidebar-tools');
    tools.append(this._compactToggle, refresh);
    header.append(heading, tools);
    this._warnings.hidden = true;
    this._free.hidden = true;
    this._lines.hidden = true;
    this._linesHead.hidden = true;
    // The column heads of the compact view, aligned with the lines by the same classes (visual only:
    // each line's accessible name spells its values out).
    this._linesHead.setAttribute('aria-hidden', 'true');
    for (const [name, text] of [
      ['label', 'GPU'],
      ['meter', trans._p('column head: GPU memory used', 'mem')],
      ['utilization', trans._p('column head: GPU utilization', 'util')],
      ['free', trans._p('column head: free GPU memory', 'free')],
      ['who', trans._p('column head: who uses the GPU', 'who')]
    ]) {
      const head = el('span', `jp-GpuLine-${name}`);
      head.textContent = text;
      this._linesHead.append(head);
    }
    this.node.append(
      header,
      this._summary,
      this._free,
      this._note,
      this._warnings,
      this._banner,
      this._cards,
      this._linesHead,
      this._lines
    );
    // "Your GPU use this week" (under JupyterHub with the jupyter-gpu service; hidden otherwise).
    this.node.insertBefore(this._usage.node, this._cards);
    void this._usage.refresh();

    this.model.changed.connect(this._onChanged, this);
  }

  /** `auto` (compact above `COMPACT_ABOVE_GPUS` GPUs), `compact` or `cards`; the setting `compactView`. */
  get compactMode(): CompactMode {
    return this._compactMode;
  }

  set compactMode(mode: CompactMode) {
    if (mode !== this._compactMode) {
      this._compactMode = mode;
      this._onChanged();
    }
  }

  /** Render now, whatever the visibility (the benchmark times exactly this). */
  render(): void {
    this._stale = false;
    const model = this.model;
    const snapshot = model.snapshot;
    this.node.dataset.state = model.state;

    switch (model.state) {
      case 'loading':
        this._showBanner('info', trans.__('Waiting for the first GPU snapshot…'));
        break;
      case 'missing-extension':
        this._showBanner('error', model.message ?? trans.__('The jupyter_gpu server extension is missing.'));
        break;
      case 'error': {
        const reason = model.message ?? trans.__('unknown error');
        this._showBanner(
          'error',
          snapshot
            ? trans.__('Could not update the GPU status: %1 (showing the last answer)', reason)
            : trans.__('Could not update the GPU status: %1', reason)
        );
        break;
      }
      case 'no-nvml': {
        const reason = snapshot?.error ?? trans.__('NVML is not available on this server.');
        this._showBanner('warn', trans.__('No GPU information: %1', reason));
        break;
      }
      default:
        this._showBanner(null, '');
    }

    const gpus: IGpu[] = snapshot && model.state !== 'missing-extension' ? snapshot.gpus : [];
    if (snapshot) {
      const parts = [];
      if (snapshot.driver_version) {
        parts.push(trans.__('driver %1', displayText(snapshot.driver_version, '?', 40)));
      }
      if (snapshot.simulated) {
        parts.push(trans.__('simulated'));
      }
      parts.push(trans.__('idle after %1', formatDuration(snapshot.idle_threshold_s)));
      parts.push(trans.__('updated %1', new Date(snapshot.timestamp * 1000).toLocaleTimeString()));
      setText(this._summary, headerLine(parts));
      const note =
        snapshot.attribution === 'pid'
          ? ''
          : (snapshot.attribution_note ??
            (snapshot.attribution === 'unavailable'
              ? trans.__('Processes cannot be mapped to kernels on this server.')
              : ''));
      setText(this._note, displayText(note, '', 1000));
      // Without NVML the banner already says why ("NVML cannot be read: <the same reason>" twice).
      setHidden(this._note, note === '' || model.state === 'no-nvml');
    } else {
      setText(this._summary, '');
      setHidden(this._note, true);
    }
    setText(this._free, gpus.length > 0 ? freeSummary(gpus) : '');
    setHidden(this._free, gpus.length === 0);
    this._renderWarnings(snapshot?.warnings);

    const historyS = this._historyS();
    const gapS = model.gapS;
    const now = snapshot?.timestamp ?? 0;
    const threshold = snapshot?.idle_threshold_s ?? 0;
    const updateCard = (card: GpuCard, gpu: IGpu): void =>
      card.update(gpu, model.history(gpu.uuid), now, historyS, threshold, gapS);
    const compact = isCompact(this._compactMode, gpus.length);
    this._compact = compact;
    setAttr(this._compactToggle, 'aria-pressed', String(compact));
    setAttr(
      this._compactToggle,
      'title',
      compact
        ? trans.__('Showing one line per GPU: show a card per GPU')
        : trans.__('Showing a card per GPU: show one line per GPU')
    );
    this.node.classList.toggle('jp-mod-compact', compact);
    setHidden(this._cards, compact);
    setHidden(this._lines, !compact);
    setHidden(this._linesHead, !compact || gpus.length === 0);
    reconcile(
      this._cards,
      this._cardViews,
      compact ? [] : gpus,
      gpu => gpu.uuid,
      () => new GpuCard(this._actions),
      updateCard
    );
    reconcile(
      this._lines,
      this._lineViews,
      compact ? gpus : [],
      gpu => gpu.uuid,
      () => new GpuLine(() => new GpuCard(this._actions)),
      (line, gpu) =>
        line.update(
          gpu,
          card => updateCard(card, gpu),
          () => this.render()
        )
    );
    if (snapshot && snapshot.nvml_available && gpus.length === 0) {
      this._showBanner('info', trans.__('NVML is available but reports no GPUs.'));
    }
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    if (this._stale) {
      this.render();
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.changed.disconnect(this._onChanged, this);
    this._usage.dispose();
    super.dispose();
  }

  private _onChanged(): void {
    if (this.isVisible) {
      this.render();
    } else {
      this._stale = true;
    }
  }

  /** The snapshot's `warnings` (e.g. a rejected simulated scenario), one line each, as text. */
  private _renderWarnings(warnings: unknown): void {
    const list = Array.isArray(warnings) ? warnings.filter(w => typeof w === 'string') : [];
    const lines = list.slice(0, 20).map(w => displayText(w as string, '', 500));
    const key = lines.join('\n');
    if (key === this._warningsKey) {
      return;
    }
    this._warningsKey = key;
    this._warnings.replaceChildren(
      ...lines.map(line => {
        const item = el('li', 'jp-GpuSidebar-warning');
        item.textContent = line;
        return item;
      })
    );
    setHidden(this._warnings, lines.length === 0);
  }

  private _showBanner(kind: 'info' | 'warn' | 'error' | null, text: string): void {
    setHidden(this._banner, kind === null);
    this._banner.dataset.kind = kind ?? '';
    // Errors are announced; routine "waiting" text is not.
    const role = kind === 'error' || kind === 'warn' ? 'alert' : 'status';
    if (this._banner.getAttribute('role') !== role) {
      this._banner.setAttribute('role', role);
    }
    setText(this._banner, text);
  }

  private _stale = true;
  private _compactMode: CompactMode = 'auto';
  private _compact = false;
  private _compactToggle = el('button', 'jp-GpuSidebar-compact', { type: 'button', 'aria-pressed': 'false' });
  private _summary = el('p', 'jp-GpuSidebar-summary');
  private _free = el('p', 'jp-GpuSidebar-free');
  private _note = el('p', 'jp-GpuSidebar-note');
  private _banner = el('div', 'jp-GpuSidebar-banner');
  private _warnings = el('ul', 'jp-GpuSidebar-warnings', {
    role: 'status',
    'aria-label': trans.__('Warnings')
  });
  private _warningsKey = '';
  private _cards = el('div', 'jp-GpuSidebar-cards');
  private _usage = new UsageSummary();
  private _cardViews = new Map<string, GpuCard>();
  private _linesHead = el('div', 'jp-GpuLine-row jp-GpuSidebar-linesHead');
  private _lines = el('ul', 'jp-GpuSidebar-lines', { 'aria-label': trans.__('GPUs, one line each') });
  private _lineViews = new Map<string, GpuLine>();
}
