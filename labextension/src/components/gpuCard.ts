/** One GPU: title, error, memory bar, utilization/temperature/power, history chart, processes. */
import { el, reconcile, setAttr, setHidden, setText } from '../dom';
import { displayText, tooltipText } from '../format';
import { trans } from '../i18n';
import { availabilityText, unitAvailability } from '../overview';
import type { IGpu, IGpuProcess, IHistorySample } from '../tokens';
import { HistoryChart } from './historyChart';
import { MemoryBar } from './memoryBar';
import { MigSlices } from './migSlices';
import { IProcessActions, OtherProcessRow, OwnProcessRow } from './processRow';

function orNone<T>(value: T | null, show: (v: T) => string): string {
  return value === null ? '—' : show(value);
}

export class GpuCard {
  readonly node = el('section', 'jp-GpuCard');

  constructor(private _actions: IProcessActions) {
    const header = el('header', 'jp-GpuCard-header');
    header.append(this._title, this._inUse);
    this._stats.append(this._utilization, this._temperature, this._power);
    this._ownSection.append(this._ownHeading, this._ownList);
    this._otherSection.append(this._otherHeading, this._otherList);
    this._ownHeading.textContent = trans.__('Your kernels');
    this._otherHeading.textContent = trans.__('Other processes');
    this._empty.textContent = trans.__('No processes');
    this.node.append(
      header,
      this._error,
      this._memory.node,
      this._stats,
      this._chart.node,
      this._slices.node,
      this._ownSection,
      this._otherSection,
      this._empty
    );
  }

  update(
    gpu: IGpu,
    history: readonly IHistorySample[],
    now: number,
    historyS: number,
    idleThresholdS: number,
    gapS: number
  ): void {
    this._label = `GPU ${gpu.index}`;
    const unknown = trans.__('unknown GPU');
    const name = displayText(gpu.name, unknown, 120);
    setText(this._title, `GPU ${gpu.index} · ${name}`);
    setAttr(this._title, 'title', `GPU ${gpu.index} · ${tooltipText(gpu.name, unknown)}`);
    setAttr(this.node, 'aria-label', `GPU ${gpu.index}: ${name}`);
    setAttr(this.node, 'data-gpu-index', String(gpu.index));
    this.node.classList.toggle('jp-mod-error', gpu.error !== null);
    setHidden(this._error, gpu.error === null);
    setText(
      this._error,
      gpu.error === null ? '' : trans.__('Cannot read this GPU: %1', displayText(gpu.error, '', 500))
    );

    const own = gpu.processes.filter(p => p.own);
    // In MIG mode other processes are listed under their slice (yours stay here, with their controls).
    const others = gpu.processes
      .filter(p => !p.own && !gpu.mig_mode)
      .sort((a, b) => (b.memory ?? 0) - (a.memory ?? 0));
    const ownBytes = own.reduce((sum, p) => sum + (p.memory ?? 0), 0);
    setText(
      this._inUse,
      gpu.processes.length > 0
        ? trans._n('%1 proc', '%1 procs', gpu.processes.length)
        : availabilityText(unitAvailability(gpu))
    );
    this._memory.update(gpu.memory_used, gpu.memory_total, ownBytes);
    // A GPU that cannot be read has no numbers worth showing (NVML answers zeros): hide them.
    setHidden(this._memory.node, gpu.error !== null);
    setHidden(this._stats, gpu.error !== null);
    // Utilization is said once per card, in the chart's legend; here only why it is missing on MIG.
    const migUtil = gpu.mig_mode === true && gpu.utilization === null;
    setText(this._utilization, migUtil ? trans.__('util n/a on MIG') : '');
    setHidden(this._utilization, !migUtil);
    this._slices.update(gpu.index, gpu.mig_mode ? gpu.slices : undefined);
    setText(
      this._temperature,
      orNone(gpu.temperature, v => `${v} °C`)
    );
    setText(
      this._power,
      gpu.power === null
        ? '— W'
        : gpu.power_limit === null
          ? `${Math.round(gpu.power)} W`
          : `${Math.round(gpu.power)} / ${Math.round(gpu.power_limit)} W`
    );
    this._chart.update(history, now, historyS, gapS);

    reconcile(
      this._ownList,
      this._ownRows,
      own,
      p => String(p.pid),
      () => new OwnProcessRow(this._actions, this._label),
      (row, p) => row.update(p, idleThresholdS)
    );
    reconcile(
      this._otherList,
      this._otherRows,
      others,
      (p: IGpuProcess) => String(p.pid),
      () => new OtherProcessRow(),
      (row, p) => row.update(p)
    );
    setHidden(this._ownSection, own.length === 0);
    setHidden(this._otherSection, others.length === 0);
    setHidden(this._empty, gpu.processes.length > 0 || gpu.error !== null);
  }

  private _label = '';
  private _title = el('h3', 'jp-GpuCard-title');
  private _inUse = el('span', 'jp-GpuCard-inUse');
  private _error = el('div', 'jp-GpuCard-error', { role: 'alert' });
  private _memory = new MemoryBar();
  private _stats = el('div', 'jp-GpuCard-stats');
  private _utilization = el('span', 'jp-GpuCard-utilization');
  private _temperature = el('span', 'jp-GpuCard-temperature');
  private _power = el('span', 'jp-GpuCard-power');
  private _chart = new HistoryChart();
  private _slices = new MigSlices();
  private _ownSection = el('div', 'jp-GpuCard-section jp-mod-own');
  private _ownHeading = el('h4', 'jp-GpuCard-sectionTitle');
  private _ownList = el('ul', 'jp-GpuCard-processes', { 'aria-label': trans.__('Your kernels') });
  private _otherSection = el('div', 'jp-GpuCard-section jp-mod-other');
  private _otherHeading = el('h4', 'jp-GpuCard-sectionTitle');
  private _otherList = el('ul', 'jp-GpuCard-processes', { 'aria-label': trans.__('Other processes') });
  private _empty = el('p', 'jp-GpuCard-empty');
  private _ownRows = new Map<string, OwnProcessRow>();
  private _otherRows = new Map<string, OtherProcessRow>();
}
