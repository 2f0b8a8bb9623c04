/**
 * What a glance at many GPUs needs, as pure functions of a snapshot: which GPUs and MIG slices are
 * free, the sidebar's summary line ("free: GPU 2, 7"), one compact line per GPU (bar, util, free,
 * who) and the status-bar text. The views only put these strings into the DOM (as text).
 */
import { cullsDue } from './culling';
import { displayText, formatBytes, formatDuration, percent, tooltipText } from './format';
import { trans } from './i18n';
import type { IGpu, IGpuProcess, IMigSlice, IReservation, IRunInfo, ISnapshot, MonitorState } from './tokens';

/**
 * Memory a GPU or MIG slice may show as used and still count as free: what the driver and a display
 * server hold on an otherwise empty card (a few hundred MiB at most), not a job.
 */
export const FREE_MEMORY_BYTES = 512 * 1024 ** 2;

/** A compute process: a graphics-only one (the display server, Xorg) is not a job (as `%gpu_select auto` counts). */
function isJob(process: IGpuProcess): boolean {
  return process.type !== 'graphics';
}

function processesOf(unit: { processes?: unknown }): IGpuProcess[] {
  return Array.isArray(unit.processes)
    ? (unit.processes.filter(p => typeof p === 'object' && p !== null) as IGpuProcess[])
    : [];
}

function reservationsOf(unit: { reservations?: unknown }): IReservation[] {
  return Array.isArray(unit.reservations)
    ? (unit.reservations.filter(r => typeof r === 'object' && r !== null) as IReservation[])
    : [];
}

/** What a GPU or MIG slice is to the user looking at it: the words every face shows. */
export type Availability =
  | 'free'
  | 'in use by you'
  | 'in use by others'
  | 'in use'
  | 'reserved by you'
  | 'reserved by another user'
  | 'cannot be read';

/** An `Availability` in the user's language (the value itself stays English: code compares it). */
export function availabilityText(state: Availability): string {
  switch (state) {
    case 'free':
      return trans.__('free');
    case 'in use by you':
      return trans.__('in use by you');
    case 'in use by others':
      return trans.__('in use by others');
    case 'in use':
      return trans.__('in use');
    case 'reserved by you':
      return trans.__('reserved by you');
    case 'reserved by another user':
      return trans.__('reserved by another user');
    case 'cannot be read':
      return trans.__('cannot be read');
  }
}

/** Clauses of one tooltip or title, joined as the language joins them (`; ` in English). */
export function clauses(parts: readonly string[]): string {
  return parts.join(trans._p('between the clauses of a tooltip', '; '));
}

/** The plain facts of one GPU or MIG slice the rule reads (`tests/golden/availability.json`). */
export interface IAvailabilityFacts {
  error: boolean;
  memory_used: number;
  jobs_yours: number;
  jobs_others: number;
  reserved_yours: boolean;
  reserved_others: boolean;
}

/**
 * The one rule of "free", the twin of `jupyter_gpu/core/availability.py` (both checked against
 * `tests/golden/availability.json`): unreadable, then another user's job, then yours, then another
 * user's reservation (a kernel or run that chose it and holds nothing yet), then yours, then memory
 * nobody's visible job accounts for, else free.
 */
export function availability(facts: IAvailabilityFacts): Availability {
  if (facts.error) {
    return 'cannot be read';
  }
  if (facts.jobs_others > 0) {
    return 'in use by others';
  }
  if (facts.jobs_yours > 0) {
    return 'in use by you';
  }
  if (facts.reserved_others) {
    return 'reserved by another user';
  }
  if (facts.reserved_yours) {
    return 'reserved by you';
  }
  if (!(facts.memory_used < FREE_MEMORY_BYTES)) {
    return 'in use';
  }
  return 'free';
}

/** A process that is this user's: a kernel's (`own`), a run's, or any other of the server's user. */
function isYours(process: IGpuProcess): boolean {
  return process.own === true || process.mine === true;
}

/** The rule's facts gathered from one GPU or MIG slice of the server's answer. */
export function unitAvailability(unit: {
  error: string | null;
  memory_used: number;
  processes?: unknown;
  reservations?: unknown;
}): Availability {
  const jobs = processesOf(unit).filter(isJob);
  const yours = jobs.filter(isYours).length;
  const reservations = reservationsOf(unit);
  return availability({
    error: unit.error !== null,
    memory_used: typeof unit.memory_used === 'number' ? unit.memory_used : NaN,
    jobs_yours: yours,
    jobs_others: jobs.length - yours,
    reserved_yours: reservations.some(r => r.own === true),
    reserved_others: reservations.some(r => r.own !== true)
  });
}

/** Free by the one rule. A GPU in MIG mode is never free as a whole: its slices are counted instead. */
export function isFreeGpu(gpu: IGpu): boolean {
  return gpu.mig_mode !== true && unitAvailability(gpu) === 'free';
}

/** The same rule for one MIG slice. */
export function isFreeSlice(slice: IMigSlice): boolean {
  return unitAvailability(slice) === 'free';
}

/** `train.py (jupyter-gpu run), 2 h`: one of this user's runs, as the golden table spells it. */
export function runDescription(run: IRunInfo, now: number): string {
  const name = displayText(run.label || null, trans.__('a command'), 80);
  return trans.__('%1 (jupyter-gpu run), %2', name, formatDuration(Math.max(0, now - run.since)));
}

/** This user's runs on `gpus`, described once each (`yours: train.py (jupyter-gpu run), 2 h`). */
export function runsOn(gpus: readonly (IGpu | IMigSlice)[], now: number): string[] {
  const seen = new Set<string>();
  for (const unit of gpus) {
    for (const p of processesOf(unit)) {
      if (p.run && typeof p.run === 'object') {
        seen.add(trans.__('yours: %1', runDescription(p.run, now)));
      }
    }
    for (const r of reservationsOf(unit)) {
      if (r.own === true && r.kind === 'run' && typeof r.since === 'number') {
        seen.add(trans.__('yours: %1', runDescription({ label: r.label ?? '', since: r.since }, now)));
      }
    }
  }
  return [...seen].sort();
}

/** The MIG slices of `gpu` (none unless it is in MIG mode). */
export function slicesOf(gpu: IGpu): IMigSlice[] {
  return gpu.mig_mode === true && Array.isArray(gpu.slices)
    ? gpu.slices.filter(s => typeof s === 'object' && s !== null)
    : [];
}

/** What is free: whole GPUs by NVML index, MIG slices by their `%gpu_select` name (`0:1`). */
export interface IFreeUnits {
  gpus: number[];
  slices: string[];
  /** All MIG slices of all GPUs, free or not. */
  sliceCount: number;
}

export function freeUnits(gpus: readonly IGpu[]): IFreeUnits {
  const free: IFreeUnits = { gpus: [], slices: [], sliceCount: 0 };
  for (const gpu of gpus) {
    if (isFreeGpu(gpu)) {
      free.gpus.push(gpu.index);
    }
    for (const slice of slicesOf(gpu)) {
      free.sliceCount++;
      if (isFreeSlice(slice)) {
        free.slices.push(`${gpu.index}:${slice.index}`);
      }
    }
  }
  return free;
}

/** The sidebar's summary line: `free: GPU 2, 7`, `free: GPU 1 · MIG 0:1`, or `free: none`. */
export function freeSummary(gpus: readonly IGpu[]): string {
  const free = freeUnits(gpus);
  const parts: string[] = [];
  if (free.gpus.length) {
    parts.push(`GPU ${free.gpus.join(', ')}`);
  }
  if (free.slices.length) {
    parts.push(`MIG ${free.slices.join(', ')}`);
  }
  return parts.length ? trans.__('free: %1', parts.join(' · ')) : trans.__('free: none');
}

/** The pieces of one compact line; `title` spells the line out for the tooltip. */
export interface ICompactLine {
  label: string;
  /** Percent of memory used, for the bar (0..100). */
  memoryPercent: number;
  utilization: string;
  free: string;
  who: string;
  title: string;
  /** Free by `isFreeGpu` (or, in MIG mode, at least one slice free). */
  isFree: boolean;
  /** One of this user's kernels on it is idle while holding memory. */
  idle: boolean;
  error: boolean;
}

/**
 * Who is on a GPU, in a few characters: `you` first (`you (idle)` when one of your kernels there
 * is idle while holding memory), then other users by name, once each; `free` when nobody.
 */
export function whoIsOn(processes: readonly IGpuProcess[]): { who: string; whole: string; idle: boolean } {
  let own = false;
  let idle = false;
  const users = new Map<string, string>();
  for (const p of processes) {
    if (p.own) {
      own = true;
      idle = idle || p.idle === true;
    } else {
      // The line wraps a long name onto a second line; only absurd ones are cut (the tooltip: whole).
      users.set(tooltipText(p.user, `pid ${p.pid}`), displayText(p.user, `pid ${p.pid}`, 32));
    }
  }
  const keys = [...users.keys()].sort();
  const names = keys.map(k => users.get(k) as string);
  const whole = [...keys];
  if (own) {
    const you = idle ? trans.__('you (idle)') : trans.__('you');
    names.unshift(you);
    whole.unshift(you);
  }
  return { who: names.join(', '), whole: whole.join(', '), idle };
}

/**
 * One GPU as one line of the compact view, under the column heads `GPU memory util free who`:
 * `GPU 2 ▮▮▯ 87 % 60 GiB you, alice`. In MIG mode util is `n/a` and free counts slices (`2/3 MIG`).
 * A GPU nobody works on says what the one rule says (`free`, `reserved by you`, ...); the title names
 * this user's runs on it (`yours: train.py (jupyter-gpu run), 2 h`, durations to `now`, epoch s).
 */
export function compactLine(gpu: IGpu, now: number = Date.now() / 1000): ICompactLine {
  const label = `GPU ${gpu.index}`;
  const slices = slicesOf(gpu);
  const processes = [...processesOf(gpu)];
  for (const slice of slices) {
    for (const p of processesOf(slice)) {
      if (!processes.some(q => q.pid === p.pid)) {
        processes.push(p);
      }
    }
  }
  const { who, whole, idle } = whoIsOn(processes);
  if (gpu.error !== null) {
    const reason = displayText(gpu.error, '', 200);
    return {
      label,
      memoryPercent: 0,
      utilization: '—',
      free: '—',
      who: availabilityText('cannot be read'),
      title: trans.__('%1: cannot be read: %2', label, reason),
      isFree: false,
      idle: false,
      error: true
    };
  }
  const memoryPercent = percent(gpu.memory_used, gpu.memory_total);
  const memory = trans.__('%1 of %2 used', formatBytes(gpu.memory_used), formatBytes(gpu.memory_total));
  if (slices.length) {
    const freeSlices = slices.filter(isFreeSlice).length;
    return {
      label,
      memoryPercent,
      utilization: trans.__('n/a'),
      free: `${freeSlices}/${slices.length} MIG`,
      who: who || trans.__('nobody'),
      title: clauses([
        trans.__('%1: MIG mode, %2 of %3 slices free', label, freeSlices, slices.length),
        memory,
        ...(whole ? [trans.__('on it: %1', whole)] : [])
      ]),
      isFree: freeSlices > 0,
      idle,
      error: false
    };
  }
  const state = unitAvailability(gpu);
  const isFree = state === 'free';
  const reserved = state === 'reserved by you' || state === 'reserved by another user';
  const utilization = gpu.utilization === null ? '—' : `${gpu.utilization} %`;
  const free = formatBytes(gpu.memory_free);
  const runs = runsOn([gpu], now);
  return {
    label,
    memoryPercent,
    utilization,
    free,
    who: isFree || reserved ? availabilityText(state) : who || availabilityText(state),
    title: clauses([
      trans.__('%1: util %2, %3 free, %4', label, utilization, free, memory),
      isFree || reserved || !whole ? availabilityText(state) : trans.__('on it: %1', whole),
      ...runs
    ]),
    isFree,
    idle,
    error: false
  };
}

/** What the status-bar item shows. */
export interface IStatusSummary {
  text: string;
  /**
   * The same for a narrow place (Notebook 7's menu bar): the GPU count, and the idle state or the
   * countdown, or failed GPUs (`2/3 GPUs in use`, `2/3 GPUs · idle`, `shut down in 9 min`: "in use",
   * then the count, give way to the news); `title` has it all.
   */
  short: string;
  title: string;
  /** One of this user's kernels is idle while holding GPU memory, or about to be culled. */
  warning: boolean;
}

/**
 * The status-bar text: `2/3 GPUs in use · yours 4 GiB · idle 5 min`. GPUs with a process / all
 * GPUs, said as what it counts (a bare `GPU 2/3` read as "GPU number 2 of 3"); MIG
 * slices counted apart (`MIG 2/3 free`); your kernels' memory when there is some; the idle state
 * said in words (the longest idle time of your kernels idle while holding memory), or the culler's
 * countdown when one of them is about to be shut down; GPUs that cannot be read.
 */
export function statusSummary(
  snapshot: ISnapshot | null,
  state: MonitorState,
  message: string | null
): IStatusSummary {
  if (!snapshot || state === 'missing-extension' || state === 'no-nvml') {
    return {
      text: trans.__('GPU: n/a'),
      short: trans.__('GPU: n/a'),
      title:
        state === 'loading'
          ? trans.__('Waiting for the GPU status')
          : (message ?? snapshot?.error ?? trans.__('No GPU information')),
      warning: false
    };
  }
  const gpus = snapshot.gpus;
  const states = gpus.map(unitAvailability);
  const inUse = states.filter(state => state.startsWith('in use')).length;
  const reserved = gpus
    .map((gpu, n) => ({ gpu, state: states[n] }))
    .filter(({ state }) => state === 'reserved by you' || state === 'reserved by another user');
  const runs = runsOn(gpus, snapshot.timestamp);
  let own = 0;
  const idleKernels = new Map<string, number>();
  for (const gpu of gpus) {
    for (const p of processesOf(gpu)) {
      if (p.own) {
        own += p.memory ?? 0;
        if (p.idle === true) {
          const key = p.kernel_id ?? `pid ${p.pid}`;
          idleKernels.set(key, Math.max(idleKernels.get(key) ?? 0, p.idle_s ?? 0));
        }
      }
    }
  }
  let cullInS: number | null = null;
  for (const cull of cullsDue(snapshot).values()) {
    cullInS = Math.min(cullInS ?? Infinity, cull.cullInS);
  }
  const free = freeUnits(gpus);
  const failed = gpus.filter(g => g.error !== null).length;
  // "2/4 GPUs in use" is what a glance needs; the user's own share only when there is one. The
  // short text (Notebook 7's menu bar) says "in use" only when nothing else needs the room.
  const inUseText = trans.__('%1/%2 GPUs in use', inUse, gpus.length);
  const text = [inUseText];
  let short = [trans.__('%1/%2 GPUs', inUse, gpus.length)];
  if (free.sliceCount > 0) {
    text.push(trans.__('MIG %1/%2 free', free.slices.length, free.sliceCount));
  }
  if (reserved.length > 0) {
    text.push(trans.__('%1 reserved', reserved.length));
  }
  if (own > 0) {
    text.push(trans.__('yours %1', formatBytes(own)));
  }
  const failedText = trans.__('%1 failed', failed);
  if (failed > 0) {
    text.push(failedText);
    short.push(failedText);
  }
  if (cullInS !== null) {
    text.push(trans.__('idle kernel shut down in %1', formatDuration(cullInS)));
    // The countdown is the news: it takes the count's place (Notebook 7's menu bar at 800 px has
    // room for one of them only; the tooltip says both).
    short = [...(failed > 0 ? [failedText] : []), trans.__('shut down in %1', formatDuration(cullInS))];
  } else if (idleKernels.size > 0) {
    text.push(trans.__('idle %1', formatDuration(Math.max(...idleKernels.values()))));
    short.push(trans.__('idle'));
  }
  if (short.length === 1 && cullInS === null) {
    short = [inUseText];
  }
  const idle = idleKernels.size;
  const staleReason = message ?? trans.__('update failed');
  const title =
    clauses([
      trans.__('%1 of %2 GPUs in use', inUse, gpus.length),
      ...(free.sliceCount > 0
        ? [trans.__('%1 of %2 MIG slices free', free.slices.length, free.sliceCount)]
        : []),
      ...reserved.map(({ gpu, state }) => trans.__('GPU %1 %2', gpu.index, availabilityText(state))),
      trans.__('your kernels hold %1', formatBytes(own)),
      ...runs,
      ...(idle > 0
        ? [
            trans._n(
              '%1 of your kernels is idle while holding GPU memory',
              '%1 of your kernels are idle while holding GPU memory',
              idle
            )
          ]
        : []),
      ...(cullInS !== null ? [trans.__('an idle kernel is shut down in %1', formatDuration(cullInS))] : [])
    ]) + (state === 'error' ? trans.__(' (stale: %1)', staleReason) : '');
  return { text: text.join(' · '), short: short.join(' · '), title, warning: idle > 0 || cullInS !== null };
}

/** The sidebar's view setting: one line per GPU (`compact`), a card per GPU (`cards`), or `auto`. */
export type CompactMode = 'auto' | 'compact' | 'cards';

/** In `auto`, machines with more GPUs than this get one line per GPU (cards fit about three per screen). */
export const COMPACT_ABOVE_GPUS = 4;

/** Whether the sidebar shows one line per GPU for `mode` and `gpuCount` GPUs. */
export function isCompact(mode: CompactMode, gpuCount: number): boolean {
  return mode === 'compact' || (mode !== 'cards' && gpuCount > COMPACT_ABOVE_GPUS);
}

/**
 * The sidebar header's line (`driver 550.54.15 · simulated · idle after 1 h · updated 10:42:07`):
 * at 250 px it wraps between its parts, never inside one ("idle after 1 h" stays together).
 */
export function headerLine(parts: readonly string[]): string {
  return parts.map(part => part.replace(/ /g, '\u00a0')).join(' · ');
}
