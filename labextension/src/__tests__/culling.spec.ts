import { describe, expect, it } from 'vitest';

import { cullsDue } from '../culling';
import { GIB, gpu, hostile, kernel, processEntry, snapshot } from './fixtures';
import type { IKernelSummary, ISnapshot } from '../tokens';

const K1 = 'abcdef01-2345-6789-abcd-ef0123456789';
const K2 = '99999999-0000-0000-0000-000000000000';

describe('cullsDue from the server kernel summaries', () => {
  it('is empty without a snapshot', () => {
    expect(cullsDue(null).size).toBe(0);
  });

  it('lists only kernels in their warning window, labelled by notebook file name', () => {
    const due = cullsDue(
      snapshot({
        kernels: [
          kernel({ kernel_id: K1, cull_warning: true, cull_in_s: 90, gpu_memory: 3 * GIB }),
          kernel({
            kernel_id: K2,
            notebook: 'b.ipynb',
            cull_warning: false,
            cull_in_s: 4000,
            gpu_memory: GIB
          })
        ]
      })
    );
    expect([...due.keys()]).toEqual([K1]);
    expect(due.get(K1)).toEqual({ kernelId: K1, label: 'train.ipynb', memory: 3 * GIB, cullInS: 90 });
  });

  it('counts what the kernel reports when NVML attributes nothing to it (containers)', () => {
    const due = cullsDue(
      snapshot({
        gpus: [gpu({ processes: [] })],
        kernels: [
          kernel({
            cull_warning: true,
            cull_in_s: 30,
            gpu_memory: 0,
            reported_gpu_memory: { '0': 2 * GIB, '1': GIB }
          })
        ]
      })
    );
    expect(due.get(K1)?.memory).toBe(3 * GIB);
  });

  it('prefers NVML memory over the report when it has any', () => {
    const due = cullsDue(
      snapshot({
        kernels: [
          kernel({
            cull_warning: true,
            cull_in_s: 30,
            gpu_memory: 5 * GIB,
            reported_gpu_memory: { '0': GIB }
          })
        ]
      })
    );
    expect(due.get(K1)?.memory).toBe(5 * GIB);
  });

  it('labels a kernel without a notebook by the first 8 characters of its id', () => {
    const due = cullsDue(
      snapshot({ kernels: [kernel({ notebook: null, cull_warning: true, cull_in_s: 1 })] })
    );
    expect(due.get(K1)?.label).toBe('kernel abcdef01');
  });

  it('neutralises bidi controls in names and ids', () => {
    const due = cullsDue(
      snapshot({
        kernels: [
          kernel({ notebook: 'dir/evil\u202egnp.ipynb', cull_warning: true, cull_in_s: 5 }),
          kernel({ kernel_id: '\u202eabc', notebook: null, cull_warning: true, cull_in_s: 5 })
        ]
      })
    );
    expect(due.get(K1)?.label).toBe('evil\ufffdgnp.ipynb');
    expect(due.get('\u202eabc')?.label).toBe('kernel \ufffdabc');
  });

  it('skips entries with the wrong types instead of trusting them', () => {
    const kernels = hostile<IKernelSummary[]>([
      { kernel_id: K1, notebook: 'a.ipynb', cull_warning: 'true', cull_in_s: 5 },
      { kernel_id: K1, notebook: 'a.ipynb', cull_warning: true, cull_in_s: '5' },
      { kernel_id: K1, notebook: 'a.ipynb', cull_warning: true, cull_in_s: null },
      { kernel_id: 42, notebook: 'a.ipynb', cull_warning: true, cull_in_s: 5 },
      { kernel_id: K2, notebook: null, cull_warning: true, cull_in_s: 5, gpu_memory: 'NaN' },
      {
        kernel_id: 'k3',
        notebook: null,
        cull_warning: true,
        cull_in_s: 5,
        gpu_memory: -1,
        reported_gpu_memory: { '0': 'NaN', '1': null, '2': GIB, '3': 'abc' }
      }
    ]);
    const due = cullsDue(snapshot({ kernels }));
    expect([...due.keys()]).toEqual([K2, 'k3']);
    expect(due.get(K2)?.memory).toBe(0);
    expect(due.get('k3')?.memory).toBe(GIB);
  });

  it('ignores GPU processes once the server sends summaries, even an empty list', () => {
    const proc = processEntry({ cull_warning: true, cull_in_s: 10 });
    expect(cullsDue(snapshot({ kernels: [], gpus: [gpu({ processes: [proc] })] })).size).toBe(0);
  });
});

describe('cullsDue from GPU processes (servers without kernel summaries)', () => {
  it('sums a kernel over its processes and GPUs', () => {
    const snap: ISnapshot = snapshot({
      gpus: [
        gpu({ uuid: 'GPU-0', processes: [processEntry({ memory: GIB, cull_warning: true, cull_in_s: 60 })] }),
        gpu({
          uuid: 'GPU-1',
          processes: [
            processEntry({ pid: 1, memory: 2 * GIB, cull_warning: true, cull_in_s: 60 }),
            processEntry({ pid: 2, memory: null, cull_warning: true, cull_in_s: 60 })
          ]
        })
      ]
    });
    expect(cullsDue(snap).get(K1)).toEqual({
      kernelId: K1,
      label: 'train.ipynb',
      memory: 3 * GIB,
      cullInS: 60
    });
  });

  it('leaves out other users, processes without a kernel, and kernels not warned', () => {
    const snap = snapshot({
      gpus: [
        gpu({
          processes: [
            processEntry({ own: false, cull_warning: true, cull_in_s: 5 }),
            processEntry({ kernel_id: null, cull_warning: true, cull_in_s: 5 }),
            processEntry({ kernel_id: K2, cull_warning: false, cull_in_s: 5 }),
            processEntry({ kernel_id: K2, cull_warning: true, cull_in_s: null }),
            processEntry({ kernel_id: K2, cull_warning: true })
          ]
        })
      ]
    });
    expect(cullsDue(snap).size).toBe(0);
  });
});

describe('cullsDue with malformed entries', () => {
  it('skips a kernel entry that is not an object', () => {
    const due = cullsDue(
      snapshot({
        kernels: hostile<IKernelSummary[]>([
          null,
          7,
          'k',
          kernel({ kernel_id: K1, cull_warning: true, cull_in_s: 5 })
        ])
      })
    );
    expect([...due.keys()]).toEqual([K1]);
  });

  it('labels by kernel id when the notebook is not a string', () => {
    for (const notebook of [42, ['a.ipynb'], { path: 'a' }]) {
      const due = cullsDue(
        snapshot({
          kernels: [
            kernel({ kernel_id: K1, notebook: hostile<string>(notebook), cull_warning: true, cull_in_s: 5 })
          ]
        })
      );
      expect(due.get(K1)?.label).toBe('kernel abcdef01');
    }
    const fromProcess = cullsDue(
      snapshot({
        gpus: [
          gpu({
            processes: [
              processEntry({
                own: true,
                kernel_id: K1,
                notebook: hostile<string>(7),
                cull_warning: true,
                cull_in_s: 5
              })
            ]
          })
        ]
      })
    );
    expect(fromProcess.get(K1)?.label).toBe('kernel abcdef01');
  });

  it('is empty for a snapshot with neither kernels nor gpus, or with gpus that are not lists', () => {
    expect(cullsDue(hostile<ISnapshot>({ nvml_available: true, timestamp: 1 })).size).toBe(0);
    expect(cullsDue(hostile<ISnapshot>({ gpus: 'x' })).size).toBe(0);
    expect(
      cullsDue(hostile<ISnapshot>({ gpus: [null, { processes: 'x' }, { processes: [null] }] })).size
    ).toBe(0);
  });

  it('adds only numbers as process memory', () => {
    const entry = (memory: unknown) =>
      processEntry({
        own: true,
        kernel_id: K1,
        cull_warning: true,
        cull_in_s: 5,
        memory: hostile<number>(memory)
      });
    const due = cullsDue(
      snapshot({ gpus: [gpu({ processes: [entry('1024'), entry(GIB), entry('NaN'), entry(Infinity)] })] })
    );
    expect(due.get(K1)?.memory).toBe(GIB);
  });
});
