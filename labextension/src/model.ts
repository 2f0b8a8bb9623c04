/**
 * The polling model behind the sidebar and the status-bar item.
 *
 * One `Poll` per page (not per view), so opening the sidebar and showing the status bar costs one
 * request per interval. The poll stands by while the browser tab is hidden (`when-hidden`), but it
 * keeps running while the sidebar panel is merely collapsed: the status bar still needs the data and
 * the history chart must not have a hole when the panel is shown again.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { requestAPI, ServerExtensionMissingError } from './server';
import type { IGpuMonitorModel, IHistorySample, ISnapshot, MonitorState } from './tokens';

export namespace GpuMonitorModel {
  export interface IOptions {
    /** Milliseconds between polls (the server samples NVML once per its own interval anyway). */
    refreshIntervalMs?: number;
    /** How much history the chart keeps, in minutes. */
    historyMinutes?: number;
    /** Where snapshots come from; defaults to the server extension's endpoint. */
    fetchSnapshot?: () => Promise<ISnapshot>;
    /** Start polling at once (tests and benchmarks may want to feed `ingest` themselves). */
    autoStart?: boolean;
  }
}

export class GpuMonitorModel implements IGpuMonitorModel {
  constructor(options: GpuMonitorModel.IOptions = {}) {
    this._historyS = (options.historyMinutes ?? 5) * 60;
    this._fetch = options.fetchSnapshot ?? (() => requestAPI<ISnapshot>('snapshot'));
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
    }
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
        memory:
          gpu.error || !(gpu.memory_total > 0) ? null : (100 * gpu.memory_used) / gpu.memory_total
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
  private _poll: Poll;
  private _historyS: number;
  private _snapshot: ISnapshot | null = null;
  private _state: MonitorState = 'loading';
  private _message: string | null = null;
  private _history = new Map<string, IHistorySample[]>();
  private _changed = new Signal<this, void>(this);
}
