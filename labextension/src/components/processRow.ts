/**
 * One row per GPU process: this user's kernels (notebook, memory, idle time, shut down) and other
 * users' processes (user, name, memory). All server strings are set as text.
 */
import { el, setAttr, setHidden, setText } from '../dom';
import { basename, displayText, formatBytes, formatDuration, tooltipText } from '../format';
import { trans } from '../i18n';
import { runDescription } from '../overview';
import type { IGpuProcess } from '../tokens';

/** What a row can ask the application to do; implemented by the plugin. */
export interface IProcessActions {
  openNotebook(path: string): void;
  shutdownKernel(process: IGpuProcess, gpuLabel: string): void;
}

/**
 * How this user's kernel is called in the UI: its notebook's name, or the kernel id; one of this
 * user's runs as `yours: train.py (jupyter-gpu run), 2 h` (from the run's own claim).
 */
export function kernelLabel(process: IGpuProcess, now: number = Date.now() / 1000): string {
  if (process.run && typeof process.run === 'object') {
    return trans.__('yours: %1', runDescription(process.run, now));
  }
  if (process.notebook) {
    return displayText(basename(process.notebook), '');
  }
  if (process.kernel_id) {
    return trans.__('kernel %1', displayText(process.kernel_id.slice(0, 8), ''));
  }
  return displayText(process.name, `pid ${process.pid}`);
}

/** A row for a process of one of this server's kernels. */
export class OwnProcessRow {
  readonly node = el('li', 'jp-GpuProc jp-mod-own');

  constructor(
    private _actions: IProcessActions,
    private _gpuLabel: string
  ) {
    // The button shares the first line with the name (which wraps onto more lines rather than hide
    // behind it), so the second line has the whole width for the idle time and the culler's
    // countdown (250 px wide).
    const top = el('div', 'jp-GpuProc-line');
    top.append(this._open, this._memory, this._shutdown);
    const bottom = el('div', 'jp-GpuProc-line jp-mod-idleLine');
    bottom.append(this._idleBadge, this._idle);
    this._idle.append(this._idleTime, this._countdown);
    this.node.append(top, bottom);
    this._idleBadge.textContent = trans.__('idle');
    // Short, so the notebook's name keeps the width (the accessible name says it all).
    this._shutdown.textContent = trans.__('Shut down');
    this._open.addEventListener('click', () => {
      if (this._process?.notebook) {
        this._actions.openNotebook(this._process.notebook);
      }
    });
    this._shutdown.addEventListener('click', () => {
      if (this._process) {
        this._actions.shutdownKernel(this._process, this._gpuLabel);
      }
    });
  }

  update(process: IGpuProcess, idleThresholdS: number): void {
    this._process = process;
    const label = kernelLabel(process);
    const noNotebook = trans.__('no notebook');
    setText(this._open, label);
    setAttr(this._open, 'title', `${tooltipText(process.notebook, noNotebook)} (pid ${process.pid})`);
    setAttr(this._open, 'aria-label', process.notebook ? trans.__('Open %1', label) : label);
    this._open.disabled = !process.notebook;
    setText(this._memory, formatBytes(process.memory));
    const idleText =
      process.idle_s === null
        ? trans.__('busy or unknown')
        : trans.__('idle for %1', formatDuration(process.idle_s));
    const culling = process.cull_warning === true && typeof process.cull_in_s === 'number';
    setText(this._idleTime, idleText);
    // Its own element, never broken inside: it moves to the next line as a whole when it must.
    setText(this._countdown, culling ? trans.__('shut down in %1', formatDuration(process.cull_in_s)) : '');
    setHidden(this._countdown, !culling);
    this.node.classList.toggle('jp-mod-culling', culling);
    this.node.classList.toggle('jp-mod-idle', process.idle);
    setHidden(this._idleBadge, !process.idle);
    setAttr(
      this._idleBadge,
      'title',
      process.idle
        ? trans.__(
            'Idle longer than %1 while holding %2 of GPU memory',
            formatDuration(idleThresholdS),
            formatBytes(process.memory)
          )
        : null
    );
    setHidden(this._shutdown, !process.kernel_id);
    setAttr(this._shutdown, 'aria-label', trans.__('Shut down kernel of %1 (pid %2)', label, process.pid));
  }

  private _process: IGpuProcess | null = null;
  private _open = el('button', 'jp-GpuProc-notebook', { type: 'button' });
  private _memory = el('span', 'jp-GpuProc-memory');
  private _idleBadge = el('span', 'jp-GpuProc-idleBadge');
  private _idle = el('span', 'jp-GpuProc-idle');
  private _idleTime = el('span', 'jp-GpuProc-idleTime');
  private _countdown = el('span', 'jp-GpuProc-countdown');
  private _shutdown = el('button', 'jp-GpuProc-shutdown jp-mod-styled jp-mod-warn', {
    type: 'button'
  });
}

/** A row for another user's process (or one of this user's not started by this server). */
export class OtherProcessRow {
  readonly node = el('li', 'jp-GpuProc jp-mod-other');

  constructor() {
    this.node.append(this._user, this._name, this._memory);
  }

  update(process: IGpuProcess): void {
    const unknownUser = trans.__('unknown user');
    const unknownProgram = trans.__('unknown program');
    setText(this._user, displayText(process.user, unknownUser, 64));
    setText(this._name, displayText(process.name, `pid ${process.pid}`));
    // The full (neutralised) texts are in the tooltip; the row itself cuts them with an ellipsis.
    setAttr(
      this.node,
      'title',
      `${tooltipText(process.user, unknownUser)}: ${tooltipText(process.name, unknownProgram)}` +
        ` (pid ${process.pid}, ${displayText(process.type, '?', 40)})`
    );
    setText(this._memory, formatBytes(process.memory));
  }

  private _user = el('span', 'jp-GpuProc-user');
  private _name = el('span', 'jp-GpuProc-name');
  private _memory = el('span', 'jp-GpuProc-memory');
}
