import { describe, expect, it } from 'vitest';

import {
  COMPACT_ABOVE_GPUS,
  FREE_MEMORY_BYTES,
  compactLine,
  freeSummary,
  freeUnits,
  headerLine,
  isCompact,
  isFreeGpu,
  isFreeSlice,
  statusSummary,
  unitAvailability
} from '../overview';
import type { IMigSlice } from '../tokens';
import { GIB, gpu, hostile, kernel, processEntry, snapshot } from './fixtures';

const MIB = 1024 ** 2;

function slice(fields: Partial<IMigSlice> = {}): IMigSlice {
  return {
    index: 0,
    uuid: 'MIG-0',
    name: 'MIG 1g.10gb',
    profile: '1g.10gb',
    gpu_instance_id: 9,
    compute_instance_id: 0,
    memory_total: 10 * GIB,
    memory_used: 0,
    memory_free: 10 * GIB,
    error: null,
    processes: [],
    ...fields
  };
}

const other = (fields = {}) => processEntry({ own: false, kernel_id: null, notebook: null, ...fields });
const empty = (fields = {}) => gpu({ memory_used: 3 * MIB, memory_free: 40 * GIB, processes: [], ...fields });

describe('the free rule', () => {
  it('is a readable GPU without compute processes and almost no memory used', () => {
    expect(isFreeGpu(empty())).toBe(true);
    expect(isFreeGpu(empty({ memory_used: FREE_MEMORY_BYTES - 1 }))).toBe(true);
    expect(isFreeGpu(empty({ memory_used: FREE_MEMORY_BYTES }))).toBe(false);
    expect(isFreeGpu(empty({ processes: [other()] }))).toBe(false);
    expect(isFreeGpu(empty({ processes: [processEntry()] }))).toBe(false); // yours count too
    expect(isFreeGpu(empty({ error: 'GPU is lost' }))).toBe(false);
  });

  it('does not count a graphics-only process (the display server), as %gpu_select auto does', () => {
    expect(isFreeGpu(empty({ processes: [other({ type: 'graphics', memory: 50 * MIB })] }))).toBe(true);
    expect(isFreeGpu(empty({ processes: [other({ type: 'compute+graphics' })] }))).toBe(false);
  });

  it('never calls a GPU in MIG mode free as a whole; its slices are counted', () => {
    const mig = empty({
      mig_mode: true,
      slices: [slice(), slice({ index: 1, uuid: 'MIG-1', memory_used: GIB })]
    });
    expect(isFreeGpu(mig)).toBe(false);
    expect(isFreeSlice(slice())).toBe(true);
    expect(isFreeSlice(slice({ processes: [other()] }))).toBe(false);
    expect(isFreeSlice(slice({ error: 'cannot read' }))).toBe(false);
    expect(freeUnits([mig])).toEqual({ gpus: [], slices: ['0:0'], sliceCount: 2 });
  });

  it('takes what is not a process list as no processes, and no memory number as not free', () => {
    expect(isFreeGpu(empty({ processes: hostile([null, 3]) }))).toBe(true);
    expect(isFreeGpu(empty({ memory_used: hostile('0') }))).toBe(false);
  });
});

describe('freeSummary, the summary line', () => {
  it('names the free GPUs and MIG slices, or says none', () => {
    const busy = (index: number) => gpu({ index, uuid: `GPU-${index}`, processes: [other()] });
    const free = (index: number) => empty({ index, uuid: `GPU-${index}` });
    expect(freeSummary([busy(0), busy(1), free(2), busy(3), free(7)])).toBe('free: GPU 2, 7');
    expect(freeSummary([busy(0)])).toBe('free: none');
    const mig = empty({
      index: 0,
      mig_mode: true,
      slices: [slice({ processes: [other()] }), slice({ index: 1 })]
    });
    expect(freeSummary([mig, free(1)])).toBe('free: GPU 1 · MIG 0:1');
  });
});

describe('compactLine, one GPU on one line', () => {
  it('has the bar, util, free memory and who is on it, you first', () => {
    const line = compactLine(
      gpu({
        index: 2,
        utilization: 87,
        memory_used: 20 * GIB,
        memory_total: 80 * GIB,
        memory_free: 60 * GIB,
        processes: [
          other({ user: 'bob', pid: 1 }),
          processEntry({ pid: 2 }),
          other({ user: 'alice', pid: 3 })
        ]
      })
    );
    expect(line).toMatchObject({
      label: 'GPU 2',
      memoryPercent: 25,
      utilization: '87 %',
      free: '60 GiB',
      who: 'you, alice, bob',
      isFree: false,
      idle: false,
      error: false
    });
    expect(line.title).toBe('GPU 2: util 87 %, 60 GiB free, 20 GiB of 80 GiB used; on it: you, alice, bob');
  });

  it('says free, your idle kernel in words, and other users once each', () => {
    expect(compactLine(empty()).who).toBe('free');
    expect(compactLine(empty()).isFree).toBe(true);
    const idle = compactLine(gpu({ processes: [processEntry({ idle: true }), other(), other({ pid: 9 })] }));
    expect(idle.who).toBe('you (idle), alice');
    expect(idle.idle).toBe(true);
  });

  it('shows a user name as text, neutralised, cut only when absurd, and whole in the tooltip', () => {
    const line = compactLine(gpu({ processes: [other({ user: 'a\u202eb' + 'x'.repeat(100) })] }));
    expect(line.who.startsWith('a\ufffdb')).toBe(true);
    expect(Array.from(line.who).length).toBeLessThanOrEqual(32);
    expect(line.title).toContain('a\ufffdb' + 'x'.repeat(100));
    // An ordinary long name is not cut at all: the line wraps it (tests/browser measure that).
    const long = compactLine(gpu({ processes: [other({ user: 'zhang_wei_research_group' })] }));
    expect(long.who).toBe('zhang_wei_research_group');
    expect(long.title).toContain('on it: zhang_wei_research_group');
  });

  it('counts the free slices of a GPU in MIG mode', () => {
    const line = compactLine(
      gpu({
        utilization: null,
        mig_mode: true,
        processes: [other({ user: 'bob' })],
        slices: [slice({ processes: [other({ user: 'bob' })] }), slice({ index: 1 }), slice({ index: 2 })]
      })
    );
    expect(line).toMatchObject({ utilization: 'n/a', free: '2/3 MIG', who: 'bob', isFree: true });
  });

  it('says a GPU that cannot be read cannot be read, and shows no numbers for it', () => {
    const line = compactLine(gpu({ error: 'GPU is lost', processes: [other()] }));
    expect(line).toMatchObject({ utilization: '—', free: '—', who: 'cannot be read', error: true });
    expect(line.title).toBe('GPU 0: cannot be read: GPU is lost');
  });
});

describe('isCompact', () => {
  it('is compact above COMPACT_ABOVE_GPUS GPUs in auto, always or never otherwise', () => {
    expect(isCompact('auto', COMPACT_ABOVE_GPUS)).toBe(false);
    expect(isCompact('auto', COMPACT_ABOVE_GPUS + 1)).toBe(true);
    expect(isCompact('compact', 1)).toBe(true);
    expect(isCompact('cards', 16)).toBe(false);
  });
});

describe('statusSummary, the status-bar text', () => {
  it('counts GPUs in use and your memory', () => {
    const s = snapshot({
      gpus: [gpu({ processes: [processEntry({ memory: 4 * GIB })] }), empty({ index: 1 })]
    });
    expect(statusSummary(s, 'ok', null)).toEqual({
      text: '1/2 GPUs in use · yours 4 GiB',
      short: '1/2 GPUs in use',
      title: '1 of 2 GPUs in use; your kernels hold 4 GiB',
      warning: false
    });
  });

  it('says idle in words, with the longest idle time, counting kernels once', () => {
    const s = snapshot({
      gpus: [
        gpu({ processes: [processEntry({ pid: 1, idle: true, idle_s: 300 })] }),
        gpu({ index: 1, processes: [processEntry({ pid: 2, idle: true, idle_s: 310 })] }) // same kernel
      ]
    });
    const summary = statusSummary(s, 'ok', null);
    expect(summary.text).toBe('2/2 GPUs in use · yours 4 GiB · idle 5 min');
    expect(summary.short).toBe('2/2 GPUs · idle');
    expect(summary.title).toContain('1 of your kernels is idle while holding GPU memory');
    expect(summary.warning).toBe(true);
  });

  it('counts free MIG slices apart from whole GPUs', () => {
    const mig = gpu({
      mig_mode: true,
      processes: [other()],
      slices: [
        slice({ processes: [other()] }),
        slice({ index: 1 }),
        slice({ index: 2, memory_used: 2 * GIB })
      ]
    });
    const summary = statusSummary(
      snapshot({ gpus: [mig, gpu({ index: 1, processes: [other()] })] }),
      'ok',
      null
    );
    expect(summary.text).toBe('2/2 GPUs in use · MIG 1/3 free');
    expect(summary.title).toContain('1 of 3 MIG slices free');
  });

  it('puts the culler countdown first among idle news, and failed GPUs', () => {
    const s = snapshot({
      gpus: [gpu({ error: 'GPU is lost' }), gpu({ index: 1, processes: [processEntry({ idle: true })] })],
      kernels: [kernel({ cull_warning: true, cull_in_s: 540, gpu_memory: 2 * GIB })]
    });
    const summary = statusSummary(s, 'ok', null);
    expect(summary.text).toBe('1/2 GPUs in use · yours 2 GiB · 1 failed · idle kernel shut down in 9 min');
    expect(summary.short).toBe('1 failed · shut down in 9 min');
    expect(summary.title).toContain('; an idle kernel is shut down in 9 min');
    expect(summary.warning).toBe(true);
  });

  it('says n/a without NVML or the extension, and marks a stale answer in the tooltip', () => {
    expect(statusSummary(null, 'loading', null)).toEqual({
      text: 'GPU: n/a',
      short: 'GPU: n/a',
      title: 'Waiting for the GPU status',
      warning: false
    });
    expect(statusSummary(snapshot({ error: 'no driver' }), 'no-nvml', null).title).toBe('no driver');
    expect(statusSummary(snapshot(), 'error', 'HTTP 500').title).toContain('(stale: HTTP 500)');
  });
});

describe('headerLine', () => {
  it('wraps between its parts only: "idle after 1 h" never breaks inside', () => {
    const line = headerLine(['driver 550.54.15', 'idle after 1 h', 'updated 10:42:07']);
    expect(line).toBe('driver\u00a0550.54.15 · idle\u00a0after\u00a01\u00a0h · updated\u00a010:42:07');
    expect(line.split(' ')).toHaveLength(5); // breakable spaces: around the two separators only
  });
});

describe('reservations and runs (issue 30): one rule of free, the same words', () => {
  const idle = { memory_used: 0, memory_free: 40 * GIB, utilization: 0, processes: [] };
  const gpus = [
    gpu({ ...idle, index: 0, uuid: 'GPU-0' }),
    gpu({
      ...idle,
      index: 1,
      uuid: 'GPU-1',
      reservations: [{ own: true, kind: 'kernel', label: '', since: 0 }]
    }),
    gpu({ ...idle, index: 2, uuid: 'GPU-2', reservations: [{ own: false }] })
  ];

  it('a GPU a kernel chose but has not filled yet is not free, for its user or the neighbour', () => {
    expect(freeSummary(gpus)).toBe('free: GPU 0');
    expect(gpus.map(g => compactLine(g).who)).toEqual([
      'free',
      'reserved by you',
      'reserved by another user'
    ]);
    expect(compactLine(gpus[2]).title).toContain('; reserved by another user');
    const status = statusSummary(snapshot({ gpus }), 'ok', null);
    expect(status.text).toBe('0/3 GPUs in use · 2 reserved');
    expect(status.title).toContain('; GPU 1 reserved by you; GPU 2 reserved by another user');
  });

  it("a run's process is yours, described from its claim", () => {
    const now = 1_700_000_000;
    const run = processEntry({
      kernel_id: null,
      notebook: null,
      idle_s: null,
      own: true,
      mine: true,
      run: { label: 'train.py', since: now - 2 * 3600 }
    });
    const busy = gpu({ index: 3, processes: [run] });
    expect(compactLine(busy, now).who).toBe('you');
    expect(compactLine(busy, now).title).toContain('; yours: train.py (jupyter-gpu run), 2 h');
    const status = statusSummary(snapshot({ gpus: [busy], timestamp: now }), 'ok', null);
    expect(status.text).toBe('1/1 GPUs in use · yours 2 GiB');
    expect(status.title).toContain('; yours: train.py (jupyter-gpu run), 2 h');
  });

  it("a run's row in the card is named from its claim, the card of an empty reserved GPU says so", async () => {
    const { kernelLabel } = await import('../components/processRow');
    const now = 1_700_000_000;
    const run = processEntry({
      kernel_id: null,
      notebook: null,
      run: { label: 'train.py', since: now - 2 * 3600 }
    });
    expect(kernelLabel(run, now)).toBe('yours: train.py (jupyter-gpu run), 2 h');
    expect(kernelLabel(processEntry({ notebook: 'work/a.ipynb' }), now)).toBe('a.ipynb');
    expect(unitAvailability(gpus[2])).toBe('reserved by another user');
  });

  it("a process of this user that is no kernel counts as yours, another user's as theirs", () => {
    const mine = processEntry({ own: false, mine: true, kernel_id: null });
    const theirs = processEntry({ own: false, mine: false, user: 'bob', kernel_id: null });
    expect(compactLine(gpu({ processes: [mine] })).title).not.toContain('in use by others');
    expect(statusSummary(snapshot({ gpus: [gpu({ processes: [theirs] })] }), 'ok', null).text).toBe(
      '1/1 GPUs in use'
    );
  });
});
