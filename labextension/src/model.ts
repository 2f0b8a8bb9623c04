/**
 * The polling model behind the sidebar and the status-bar item.
 *
 * One `Poll` per page (not per view), so opening the sidebar and showing the status bar costs one
 * request per interval. The poll stands by while the browser tab is hidden (`when-hidden`), but it
 * keeps running while the sidebar panel is merely collapsed: the status bar still needs the data and
 * the history chart must not have a hole when the panel is shown again.
 *
 * The charts open full: when polling starts, the model loads the server's own history once
 * (`GET jupyter-gpu/history`, the last 15 minutes it sampled) and merges it under what the polls
 * bring; a server without that route (an older jupyter_gpu) just means charts that start empty.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { trans } from './i18n';

import { requestAPI, ServerExtensionMissingError } from './server';
import type { IGpuMonitorModel, IHistoryAnswer, IHistorySample, ISnapshot, MonitorState } from './tokens';

/** How far the poll backs off while the server fails (unless the poll interval itself is longer). */
const MAX_BACKOFF_MS = 30 * 1000;

/** The longest sampling interval taken from the server (a day); anything longer is not believed. */
const MAX_INTERVAL_S = 86_400;

function finite(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/** `value` when it is a finite number within `low..high`, else null (what a chart may plot). */
function within(value: unknown, low: number, high: number): number | null {
  return finite(value) && value >= low && value <= high ? value : null;
}

/** A sampling interval from the server, in seconds, or null when it is not a sane one. */
function intervalS(value: unknown): number | null {
  return finite(value) && value > 0 && value <= MAX_INTERVAL_S ? value : null;
}

/** A GPU's memory use in percent (0..100) from its byte counts, or null when they make none. */
function memoryPercent(used: unknown, total: unknown): number | null {
  return finite(used) && finite(total) && total > 0 ? within((100 * used) / total, 0, 100) : null;
}

/**
 * Why `snapshot` cannot be taken (a one-line reason), or null: a snapshot must be an object with a
 * finite `timestamp` and a `gpus` list of objects. Checked before the model changes anything.
 */
export function snapshotProblem(snapshot: unknown): string | null {
  if (typeof snapshot !== 'object' || snapshot === null) {
    return trans.__('the server sent no snapshot object');
  }
  const { timestamp, gpus } = snapshot as Record<string, unknown>;
  if (!finite(timestamp)) {
    return trans.__('the server sent a snapshot without a timestamp');
  }
  if (!Array.isArray(gpus) || !gpus.every(gpu => typeof gpu === 'object' && gpu !== null)) {
    return trans.__('the server sent a snapshot without a list of GPUs');
  }
  return null;
}

export namespace GpuMonitorModel {
  export interface IOptions {
    /** Milliseconds between polls (the server samples NVML once per its own interval anyway). */
    refreshIntervalMs?: number;
    /** How much history the chart keeps, in minutes. */
    historyMinutes?: number;
    /** Where snapshots come from; defaults to the server extension's endpoint. */
    fetchSnapshot?: () => Promise<ISnapshot>;
    /** Where the server's history comes from (once, at start); defaults to the history endpoint. */
    fetchHistory?: () => Promise<IHistoryAnswer>;
    /** Start polling at once (tests and benchmarks may want to feed `ingest` themselves). */
    autoStart?: boolean;
  }
}

export class GpuMonitorModel implements IGpuMonitorModel {
  constructor(options: GpuMonitorModel.IOptions = {}) {
    this._historyS = (options.historyMinutes ?? 15) * 60;
    this._fetch = options.fetchSnapshot ?? (() => requestAPI<ISnapshot>('snapshot'));
    this._fetchHistory = options.fetchHistory ?? (() => requestAPI<IHistoryAnswer>('history'));
    this._poll = new Poll({
      auto: false,
      factory: () => this._tick(),
      frequency: {
        interval: options.refreshIntervalMs ?? 2000,
        // Back off when the server fails (up to 30 s) instead of hammering a broken endpoint.
        backoff: true,
        max: Math.max(MAX_BACKOFF_MS, options.refreshIntervalMs ?? 2000)
      },
      name: 'jupyter-gpu:snapshot',
      standby: 'when-hidden'
    });
    if (options.autoStart ?? true) {
      void this._poll.start();
      void this.loadHistory();
    }
  }

  /**
   * Load the server's history once and merge it under the polled samples. Resolves to the number
   * of samples added (0 when the server has no history route, fails, or answers something that is
   * not a history: not an error worth showing). Never rejects.
   */
  async loadHistory(): Promise<number> {
    try {
      return this.ingestHistory(await this._fetchHistory());
    } catch (error) {
      console.debug('jupyter-gpu: no server history', error);
      return 0;
    }
  }

  /**
   * Merge a history answer (older samples than those polled so far are put in front). What is not
   * a history (no `gpus` list, a GPU without a `t` list) adds nothing; a time that is not a finite
   * number is skipped, and a value outside 0..100 is a gap (null).
   */
  ingestHistory(answer: IHistoryAnswer): number {
    let added = 0;
    if (typeof answer !== 'object' || answer === null || !Array.isArray(answer.gpus)) {
      return 0;
    }
    const interval = intervalS(answer.interval_s);
    if (interval !== null) {
      this._sampleIntervalS = interval;
    }
    const gpus = answer.gpus.filter(
      gpu => typeof gpu === 'object' && gpu !== null && typeof gpu.uuid === 'string' && Array.isArray(gpu.t)
    );
    const column = (values: unknown, i: number): number | null =>
      Array.isArray(values) ? within(values[i], 0, 100) : null;
    const newest = gpus.reduce(
      (t, gpu) => gpu.t.reduce((a: number, b: unknown) => (finite(b) ? Math.max(a, b) : a), t),
      this._snapshot?.timestamp ?? -Infinity
    );
    const oldest = newest - this._historyS;
    for (const gpu of gpus) {
      const current = this._history.get(gpu.uuid) ?? [];
      const firstPolled = current.length ? current[0].t : Infinity;
      const older: IHistorySample[] = [];
      for (let i = 0; i < gpu.t.length; i++) {
        const t: unknown = gpu.t[i];
        if (!finite(t)) {
          continue;
        }
        if (t >= firstPolled) {
          break;
        }
        if (t < oldest) {
          continue;
        }
        older.push({ t, utilization: column(gpu.utilization, i), memory: column(gpu.memory, i) });
      }
      if (older.length) {
        this._history.set(gpu.uuid, older.concat(current));
        added += older.length;
      }
    }
    if (added > 0) {
      this._changed.emit();
    }
    return added;
  }

  /**
   * Samples further apart than this (seconds) are not joined in a chart: three times the slower of
   * the server's sampling and this page's polling.
   */
  get gapS(): number {
    const pollS = (this._poll.frequency.interval ?? 2000) / 1000;
    return 3 * Math.max(this._sampleIntervalS, pollS);
  }

  /** The server's sampling interval in seconds (what a gap in the history is measured against). */
  get sampleIntervalS(): number {
    return this._sampleIntervalS;
  }

  get snapshot(): ISnapshot | null {
    return this._snapshot;
  }

  get state(): MonitorState {
    return this._state;
  }

  get message(): string | null {
    return this._message;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** Change the poll interval (from the user's settings). */
  set refreshIntervalMs(interval: number) {
    // Poll refuses an interval above its backoff maximum (it threw, and the rest of the settings
    // were never applied): the maximum grows with a long interval.
    this._poll.frequency = { ...this._poll.frequency, interval, max: Math.max(MAX_BACKOFF_MS, interval) };
  }

  /** Change how many minutes of history are kept. */
  set historyMinutes(minutes: number) {
    this._historyS = minutes * 60;
  }

  history(uuid: string): readonly IHistorySample[] {
    return this._history.get(uuid) ?? [];
  }

  /**
   * Take `snapshot`: state, history sample, one change signal. A malformed one (`snapshotProblem`)
   * throws before anything changes. Only `nvml_available: true` is `ok`; only finite numbers in
   * their ranges are plotted (utilization and memory 0..100 %, else a gap).
   */
  ingest(snapshot: ISnapshot): void {
    const problem = snapshotProblem(snapshot);
    if (problem !== null) {
      throw new Error(problem);
    }
    const interval = intervalS(snapshot.interval_s);
    this._record(snapshot);
    this._snapshot = snapshot;
    if (interval !== null) {
      this._sampleIntervalS = interval;
    }
    this._state = snapshot.nvml_available === true ? 'ok' : 'no-nvml';
    this._message = null;
    this._changed.emit();
  }

  async refresh(): Promise<void> {
    await this._poll.refresh();
    await this._poll.tick;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _tick(): Promise<void> {
    try {
      this.ingest(await this._fetch());
    } catch (error) {
      // Keep the last good snapshot on screen, marked stale by the state; rethrow so Poll backs off.
      this._state = error instanceof ServerExtensionMissingError ? 'missing-extension' : 'error';
      this._message = error instanceof Error ? error.message : String(error);
      this._changed.emit();
      throw error;
    }
  }

  /** Append one sample per GPU and forget what is older than the history window. */
  private _record(snapshot: ISnapshot): void {
    const oldest = snapshot.timestamp - this._historyS;
    const present = new Set<string>();
    for (const gpu of snapshot.gpus) {
      present.add(gpu.uuid);
      let samples = this._history.get(gpu.uuid);
      if (!samples) {
        samples = [];
        this._history.set(gpu.uuid, samples);
      }
      const last = samples[samples.length - 1];
      if (last && last.t >= snapshot.timestamp) {
        continue; // the server's cache answered again with the same sample
      }
      samples.push({
        t: snapshot.timestamp,
        utilization: gpu.error ? null : within(gpu.utilization, 0, 100),
        memory: gpu.error ? null : memoryPercent(gpu.memory_used, gpu.memory_total)
      });
      let drop = 0;
      while (drop < samples.length && samples[drop].t < oldest) {
        drop++;
      }
      if (drop > 0) {
        samples.splice(0, drop);
      }
    }
    for (const uuid of this._history.keys()) {
      if (!present.has(uuid)) {
        this._history.delete(uuid);
      }
    }
  }

  private _fetch: () => Promise<ISnapshot>;
  private _fetchHistory: () => Promise<IHistoryAnswer>;
  private _sampleIntervalS = 1;
  private _poll: Poll;
  private _historyS: number;
  private _snapshot: ISnapshot | null = null;
  private _state: MonitorState = 'loading';
  private _message: string | null = null;
  private _history = new Map<string, IHistorySample[]>();
  private _changed = new Signal<this, void>(this);
}
