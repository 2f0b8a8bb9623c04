/** Builders for the server's JSON (tokens.ts), complete and valid unless a test says otherwise. */
import type { IGpu, IGpuProcess, IKernelSummary, ISnapshot } from '../tokens';

export const GIB = 1024 ** 3;

export function processEntry(fields: Partial<IGpuProcess> = {}): IGpuProcess {
  return {
    pid: 4242,
    memory: 2 * GIB,
    user: 'alice',
    name: 'python',
    type: 'compute',
    kernel_id: 'abcdef01-2345-6789-abcd-ef0123456789',
    notebook: 'work/train.ipynb',
    own: true,
    idle_s: 120,
    idle: false,
    ...fields
  };
}

export function gpu(fields: Partial<IGpu> = {}): IGpu {
  return {
    index: 0,
    uuid: 'GPU-0',
    name: 'NVIDIA A100-SXM4-40GB',
    memory_total: 40 * GIB,
    memory_used: 10 * GIB,
    memory_free: 30 * GIB,
    memory_reserved: null,
    utilization: 50,
    temperature: 40,
    power: 100,
    power_limit: 400,
    error: null,
    processes: [],
    ...fields
  };
}

export function kernel(fields: Partial<IKernelSummary> = {}): IKernelSummary {
  return {
    kernel_id: 'abcdef01-2345-6789-abcd-ef0123456789',
    notebook: 'work/train.ipynb',
    gpu_memory: 0,
    reported_gpu_memory: null,
    cull_in_s: null,
    cull_warning: false,
    ...fields
  };
}

export function snapshot(fields: Partial<ISnapshot> = {}): ISnapshot {
  return {
    nvml_available: true,
    error: null,
    driver_version: '550.54.15',
    timestamp: 1_700_000_000,
    simulated: false,
    idle_threshold_s: 600,
    attribution: 'pid',
    attribution_note: null,
    gpus: [gpu()],
    ...fields
  };
}

/** Cast hostile JSON (wrong types, missing fields) to the declared type, as `requestAPI<T>` does. */
export function hostile<T>(value: unknown): T {
  return value as T;
}
