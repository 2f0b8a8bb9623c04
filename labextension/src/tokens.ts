/**
 * The JSON contract of `GET {baseUrl}jupyter-gpu/snapshot` and the public token of this extension.
 *
 * The names mirror the server's `Snapshot.to_dict()` exactly, so a reader can grep one name across
 * Python and TypeScript. Sizes are bytes, times are seconds, power is watts.
 */
import { Token } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

/** How GPU processes were mapped to this server's kernels. */
export type Attribution = 'pid' | 'kernel-report' | 'unavailable';

/** One process that holds memory on a GPU. */
export interface IGpuProcess {
  pid: number;
  memory: number | null;
  user: string | null;
  name: string | null;
  type: string;
  kernel_id: string | null;
  notebook: string | null;
  /** True when the process belongs to one of this server's kernels. */
  own: boolean;
  idle_s: number | null;
  /** Idle beyond the server's threshold while holding GPU memory. */
  idle: boolean;
  /** Seconds until the server's GPU-aware culler shuts this kernel down; null/absent: it will not. */
  cull_in_s?: number | null;
  /** True within the server's `cull_warn_s` of that shutdown: count down and warn the user. */
  cull_warning?: boolean;
  /** The MIG UUID of the slice it runs in (GPUs in MIG mode only). */
  slice?: string;
  /** A process of this server's user (a kernel's, a run's, or any other): yours. */
  mine?: boolean;
  /** This user's `jupyter-gpu run` holds it (from the run's own claim): what the run is, since when. */
  run?: IRunInfo;
}

/** A `jupyter-gpu run` as its owner sees it: the command's short name and the start (epoch s). */
export interface IRunInfo {
  label: string;
  since: number;
}

/**
 * A GPU or MIG slice chosen by a kernel or a run that holds no memory on it yet. Another user's is
 * `{own: false}` and nothing more; this user's says what holds it.
 */
export interface IReservation {
  own: boolean;
  kind?: 'kernel' | 'run';
  label?: string;
  since?: number;
}

/** One MIG device ("slice") of a GPU in MIG mode; NVML has no utilization/temperature/power for it. */
export interface IMigSlice {
  index: number;
  uuid: string;
  name: string;
  profile: string;
  gpu_instance_id: number;
  compute_instance_id: number;
  memory_total: number;
  memory_used: number;
  memory_free: number;
  error: string | null;
  processes: IGpuProcess[];
  reservations?: IReservation[];
}

/** One GPU as NVML saw it at `ISnapshot.timestamp`. */
export interface IGpu {
  index: number;
  uuid: string;
  name: string;
  memory_total: number;
  memory_used: number;
  memory_free: number;
  memory_reserved: number | null;
  utilization: number | null;
  temperature: number | null;
  power: number | null;
  power_limit: number | null;
  /** Set when this GPU could not be read (e.g. "GPU is lost"); the numbers are then stale or zero. */
  error: string | null;
  processes: IGpuProcess[];
  /** MIG mode (absent from servers older than MIG support). */
  mig_mode?: boolean;
  slices?: IMigSlice[];
  reservations?: IReservation[];
}

/** One of this server's kernels (`ISnapshot.kernels`), as the server's idle check and culler see it. */
export interface IKernelSummary {
  kernel_id: string;
  notebook: string | null;
  /** Bytes NVML attributes to the kernel and its children (0 where PIDs cannot be matched). */
  gpu_memory: number;
  /** Bytes per device as the kernel itself reports them (its framework's allocator), or null. */
  reported_gpu_memory: Record<string, number> | null;
  /** Seconds until the GPU-aware culler shuts it down; null: it will not (as things stand). */
  cull_in_s: number | null;
  cull_warning: boolean;
}

/** The whole endpoint answer. */
export interface ISnapshot {
  nvml_available: boolean;
  error: string | null;
  driver_version: string | null;
  timestamp: number;
  simulated: boolean;
  idle_threshold_s: number;
  attribution: Attribution;
  attribution_note: string | null;
  gpus: IGpu[];
  /**
   * Things the user should know that are not errors of one GPU, e.g. "simulated scenario rejected:
   * …" (shown as text above the cards). Older servers do not send it: treat it as empty.
   */
  warnings?: string[];
  /** The server's sampling interval in seconds. */
  interval_s?: number;
  /** GPU-aware culling: idle seconds after which a kernel holding GPU memory is shut down (null: off). */
  cull_idle_after_s?: number | null;
  cull_warn_s?: number | null;
  /**
   * This server's kernels. The culler decides from these, so the countdown comes from here: in a
   * container no GPU process matches a kernel, yet a kernel known by its own report is culled.
   */
  kernels?: IKernelSummary[];
}

/** The answer of `GET {baseUrl}jupyter-gpu/history`: per GPU, the server's samples as columns. */
export interface IHistoryAnswer {
  window_s: number;
  interval_s: number;
  gpus: {
    index: number;
    uuid: string;
    /** Epoch seconds, oldest first. */
    t: number[];
    utilization: (number | null)[];
    /** Percent of memory_total. */
    memory: (number | null)[];
  }[];
}

/** One point of a GPU's history chart. */
export interface IHistorySample {
  /** Seconds since the epoch (the server's timestamp). */
  t: number;
  /** 0..100, or null when unsupported or unreadable. */
  utilization: number | null;
  /** 0..100 of memory_total. */
  memory: number | null;
}

/**
 * What the panel shows as a whole.
 * - `loading`: no answer yet;
 * - `ok`: a snapshot with NVML available;
 * - `no-nvml`: the server answered but cannot read NVML (the reason is in `snapshot.error`);
 * - `missing-extension`: the endpoint does not exist (404): the server extension is not installed or enabled;
 * - `error`: the request failed (network, 5xx, 403); the last good snapshot, if any, is kept.
 */
export type MonitorState = 'loading' | 'ok' | 'no-nvml' | 'missing-extension' | 'error';

/** The polling model shared by the sidebar and the status-bar item. */
export interface IGpuMonitorModel {
  readonly snapshot: ISnapshot | null;
  readonly state: MonitorState;
  /** A human-readable reason for the `missing-extension` and `error` states. */
  readonly message: string | null;
  readonly changed: ISignal<IGpuMonitorModel, void>;
  history(uuid: string): readonly IHistorySample[];
  /** The server's sampling interval (seconds), to tell a gap in the history from a sample. */
  readonly sampleIntervalS: number;
  /** Samples further apart than this many seconds are drawn with a gap between them. */
  readonly gapS: number;
  /** Apply one snapshot (what every poll does); exposed for tests and benchmarks. */
  ingest(snapshot: ISnapshot): void;
  /** Poll now (e.g. after shutting down a kernel). */
  refresh(): Promise<void>;
}

export const IGpuMonitorModel = new Token<IGpuMonitorModel>(
  'jupyter-gpu:IGpuMonitorModel',
  'The GPU snapshot poll behind the GPU sidebar and status-bar item.'
);

export const PLUGIN_ID = 'jupyter-gpu:plugin';
export const SIDEBAR_ID = 'jupyter-gpu-sidebar';

export namespace CommandIDs {
  export const open = 'jupyter-gpu:open-sidebar';
  export const refresh = 'jupyter-gpu:refresh';
}
