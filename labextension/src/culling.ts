/**
 * The kernels the server's GPU-aware culler is about to shut down, for the status bar and the
 * notification. The server's kernel summaries (`ISnapshot.kernels`) are the culler's own view and
 * cover kernels known only by their reports (containers, where no GPU process matches a kernel);
 * process entries are read only from servers that send no summaries.
 */
import { basename, displayText, formatBytes, formatDuration } from './format';
import { trans } from './i18n';
import type { IGpu, IGpuProcess, IKernelSummary, ISnapshot } from './tokens';

export interface ICullDue {
  kernelId: string;
  /** The notebook's file name (or "kernel <id>"), as text. */
  label: string;
  /** GPU memory the cull frees, in bytes (NVML's, else what the kernel reports). */
  memory: number;
  cullInS: number;
}

function label(kernelId: string, notebook: unknown): string {
  return typeof notebook === 'string' && notebook
    ? displayText(basename(notebook), '')
    : trans.__('kernel %1', displayText(kernelId.slice(0, 8), ''));
}

function finite(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/** The entries of `list` that are objects (a server's list may hold anything). */
function objects<T>(list: unknown): T[] {
  return Array.isArray(list) ? (list.filter(item => typeof item === 'object' && item !== null) as T[]) : [];
}

/**
 * Kernels within the server's `cull_warn_s` of being culled, by kernel id. Entries that are not
 * objects, a notebook that is not a string and a memory that is not a finite number are ignored.
 */
export function cullsDue(snapshot: ISnapshot | null): Map<string, ICullDue> {
  const due = new Map<string, ICullDue>();
  if (!snapshot) {
    return due;
  }
  if (Array.isArray(snapshot.kernels)) {
    for (const k of objects<IKernelSummary>(snapshot.kernels)) {
      if (k.cull_warning === true && finite(k.cull_in_s) && typeof k.kernel_id === 'string') {
        const reported =
          typeof k.reported_gpu_memory === 'object' && k.reported_gpu_memory !== null
            ? Object.values(k.reported_gpu_memory).filter(finite)
            : [];
        const memory =
          finite(k.gpu_memory) && k.gpu_memory > 0 ? k.gpu_memory : reported.reduce((a, b) => a + b, 0);
        due.set(k.kernel_id, {
          kernelId: k.kernel_id,
          label: label(k.kernel_id, k.notebook),
          memory,
          cullInS: k.cull_in_s
        });
      }
    }
    return due;
  }
  for (const gpu of objects<IGpu>(snapshot.gpus)) {
    for (const p of objects<IGpuProcess>(gpu.processes)) {
      if (p.own && typeof p.kernel_id === 'string' && p.kernel_id && p.cull_warning && finite(p.cull_in_s)) {
        const known = due.get(p.kernel_id);
        due.set(p.kernel_id, {
          kernelId: p.kernel_id,
          label: label(p.kernel_id, p.notebook),
          memory: (known?.memory ?? 0) + (finite(p.memory) ? p.memory : 0),
          cullInS: p.cull_in_s
        });
      }
    }
  }
  return due;
}

/** One kernel the culler shut down, from `GET jupyter-gpu/culls` (validated by `parseCulls`). */
export interface ICullRecord {
  kernelId: string;
  /** The notebook's file name (or "kernel <id>"), as text. */
  label: string;
  idleS: number;
  /** Bytes freed. */
  memory: number;
  /** NVML indices of the GPUs the memory was freed on (empty: known only from the kernel's report). */
  gpus: number[];
  /** When, in the server's epoch seconds (null: an older server that does not say). */
  culledAt: number | null;
}

/** The records of a `GET jupyter-gpu/culls` answer; anything malformed is left out. */
export function parseCulls(answer: unknown): ICullRecord[] {
  const list =
    typeof answer === 'object' && answer !== null ? (answer as { culls?: unknown }).culls : undefined;
  const records: ICullRecord[] = [];
  for (const raw of objects<Record<string, unknown>>(list).slice(-100)) {
    if (typeof raw.kernel_id !== 'string' || !raw.kernel_id || !finite(raw.idle_s) || !finite(raw.memory)) {
      continue;
    }
    const gpus = Array.isArray(raw.gpus)
      ? raw.gpus.filter((g): g is number => Number.isInteger(g) && g >= 0 && g < 4096).slice(0, 16)
      : [];
    records.push({
      kernelId: raw.kernel_id,
      label: label(raw.kernel_id, raw.notebook),
      idleS: raw.idle_s,
      memory: raw.memory,
      gpus,
      culledAt: finite(raw.culled_at) ? raw.culled_at : null
    });
  }
  return records;
}

/** The notification that stays after a cull: "cull_a.ipynb shut down after 2 h idle, 6 GiB freed on GPU 1". */
export function cullNotice(cull: ICullRecord): string {
  const label = cull.label.slice(0, 60);
  const idle = formatDuration(cull.idleS);
  if (!(cull.memory > 0)) {
    return trans.__('%1 shut down after %2 idle.', label, idle);
  }
  const freed = formatBytes(cull.memory);
  return cull.gpus.length
    ? trans.__('%1 shut down after %2 idle, %3 freed on GPU %4.', label, idle, freed, cull.gpus.join(', '))
    : trans.__('%1 shut down after %2 idle, %3 freed.', label, idle, freed);
}

/** The countdown notification's text (plain text, short: under 140 characters). */
export function countdownText(cull: ICullDue): string {
  return trans.__(
    'Idle GPU kernel %1 (%2) shuts down in %3. Run a cell to keep it.',
    cull.label.slice(0, 40),
    formatBytes(cull.memory),
    formatDuration(cull.cullInS)
  );
}
