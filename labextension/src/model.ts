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

import { requestAPI, ServerExtensionMissingError } from './server';
import type { IGpuMonitorModel, IHistoryAnswer, IHistorySample, ISnapshot, MonitorState } from './tokens';

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
        max: 30 * 1000
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
   * of samples added (0 when the server has no history route or fails: not an error worth showing).
   */
  async loadHistory(): Promise<number> {
    let answer: IHistoryAnswer;
    try {
      answer = await this._fetchHistory();
    } catch (error) {
      console.debug('jupyter-gpu: no server history', error);
      return 0;
    }
    return this.ingestHistory(answer);
  }

  /** Merge a history answer (older samples than those polled so far are put in front). */
  ingestHistory(answer: IHistoryAnswer): number {
    let added = 0;
    if (answer.interval_s > 0) {
      this._sampleIntervalS = answer.interval_s;
    }
    const newest = answer.gpus.reduce(
      (t, gpu) => Math.max(t, gpu.t.length ? gpu.t[gpu.t.length - 1] : -Infinity),
      this._snapshot?.timestamp ?? -Infinity
    );
    const oldest = newest - this._historyS;
    for (const gpu of answer.gpus) {
      const current = this._history.get(gpu.uuid) ?? [];
      const firstPolled = current.length ? current[0].t : Infinity;
      const older: IHistorySample[] = [];
      for (let i = 0; i < gpu.t.length; i++) {
        const t = gpu.t[i];
        if (t >= firstPolled) {
          break;
        }
        if (t < oldest) {
          continue;
        }
        older.push({ t, utilization: gpu.utilization[i] ?? null, memory: gpu.memory[i] ?? null });
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
    this._poll.frequency = { ...this._poll.frequency, interval };
  }

  /** Change how many minutes of history are kept. */
  set historyMinutes(minutes: number) {
    this._historyS = minutes * 60;
  }

  history(uuid: string): readonly IHistorySample[] {
    return this._history.get(uuid) ?? [];
  }

  ingest(snapshot: ISnapshot): void {
    this._snapshot = snapshot;
    if (typeof snapshot.interval_s === 'number' && snapshot.interval_s > 0) {
      this._sampleIntervalS = snapshot.interval_s;
    }
    this._state = snapshot.nvml_available ? 'ok' : 'no-nvml';
    this._message = null;
    this._record(snapshot);
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
    let snapshot: ISnapshot;
    try {
      snapshot = await this._fetch();
    } catch (error) {
      // Keep the last good snapshot on screen, marked stale by the state; rethrow so Poll backs off.
      this._state = error instanceof ServerExtensionMissingError ? 'missing-extension' : 'error';
      this._message = error instanceof Error ? error.message : String(error);
      this._changed.emit();
      throw error;
    }
    this.ingest(snapshot);
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
        utilization: gpu.error ? null : gpu.utilization,
        memory: gpu.error || !(gpu.memory_total > 0) ? null : (100 * gpu.memory_used) / gpu.memory_total
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
