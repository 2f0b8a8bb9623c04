import { beforeEach, describe, expect, it, vi } from 'vitest';

// The notifier only calls these of @jupyterlab/apputils: spies, each toast numbered.
vi.mock('@jupyterlab/apputils', () => {
  let next = 0;
  const toast = () => vi.fn(() => `toast-${++next}`);
  return {
    Notification: { warning: toast(), info: toast(), success: toast(), error: toast(), dismiss: vi.fn() }
  };
});

import { Notification } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';

import { cullNotice, type ICullRecord, parseCulls } from '../culling';
import { CullNotifier, type ICullApi } from '../cullNotifier';
import type { ISnapshot } from '../tokens';
import { GIB, hostile, kernel, snapshot } from './fixtures';

const K1 = 'abcdef01-2345-6789-abcd-ef0123456789';

/** The arguments of a spy's last call. */
function lastCall(spy: unknown): unknown[] | undefined {
  const calls = vi.mocked(spy as (...args: unknown[]) => unknown).mock.calls;
  return calls[calls.length - 1];
}

class FakeModel {
  snapshot: ISnapshot | null = null;
  readonly changed = new Signal<this, void>(this);
  refresh = vi.fn(() => Promise.resolve());
  show(value: ISnapshot): void {
    this.snapshot = value;
    this.changed.emit();
  }
}

/** A visit store in memory: `last` is what the previous visit left (null: a first visit). */
function visits(last: number | null = null) {
  const store = { value: last, lastSeen: () => store.value, seen: (t: number) => void (store.value = t) };
  return store;
}

function setUp(api: Partial<ICullApi> = {}, store = visits()) {
  const model = new FakeModel();
  const calls: ICullApi = {
    keepRunning: vi.fn(() => Promise.resolve(7200)),
    culls: vi.fn(() => Promise.resolve([] as ICullRecord[])),
    ...api
  };
  const notifier = new CullNotifier(model as never, calls, store);
  return { model, calls, notifier, store };
}

const counting = snapshot({
  cull_idle_after_s: 7200,
  kernels: [
    kernel({
      kernel_id: K1,
      notebook: 'dir/cull_a.ipynb',
      cull_warning: true,
      cull_in_s: 90,
      gpu_memory: 6 * GIB
    })
  ]
});

describe('cullNotice and parseCulls', () => {
  it('says which notebook went, after how long idle, what it freed and where', () => {
    const [record] = parseCulls({
      culls: [{ kernel_id: K1, notebook: 'dir/cull_a.ipynb', idle_s: 7200.5, memory: 6 * GIB, gpus: [1] }]
    });
    expect(cullNotice(record)).toBe('cull_a.ipynb shut down after 2 h idle, 6 GiB freed on GPU 1.');
    expect(cullNotice({ ...record, gpus: [] })).toBe('cull_a.ipynb shut down after 2 h idle, 6 GiB freed.');
    expect(cullNotice({ ...record, memory: 0 })).toBe('cull_a.ipynb shut down after 2 h idle.');
  });

  it('leaves out what is malformed and neutralizes names', () => {
    expect(parseCulls(null)).toEqual([]);
    expect(parseCulls({ culls: 'x' })).toEqual([]);
    const records = parseCulls(
      hostile({
        culls: [
          null,
          7,
          { kernel_id: 3, idle_s: 1, memory: 1 },
          { kernel_id: 'k', idle_s: 'NaN', memory: 1 },
          { kernel_id: 'k', idle_s: 1, memory: 1, notebook: 'a\u202eb.ipynb', gpus: [1, -1, 'x', 1.5, 99999] }
        ]
      })
    );
    expect(records).toHaveLength(1);
    expect(records[0].gpus).toEqual([1]);
    expect(records[0].label).not.toContain('\u202e');
  });
});

describe('CullNotifier', () => {
  beforeEach(() => {
    vi.mocked(Notification.warning).mockClear();
    vi.mocked(Notification.dismiss).mockClear();
  });

  it('counts down with "Keep running", which asks the server and refreshes', async () => {
    const { model, calls } = setUp();
    model.show(counting);
    expect(Notification.warning).toHaveBeenCalledTimes(1);
    const [text, options] = vi.mocked(Notification.warning).mock.calls[0] as unknown as [
      string,
      { autoClose: boolean; actions: { label: string; caption: string; callback: () => void }[] }
    ];
    expect(text).toBe('Idle GPU kernel cull_a.ipynb (6 GiB) shuts down in 1 min. Run a cell to keep it.');
    expect(options.autoClose).toBe(false);
    const [keep] = options.actions;
    expect(keep.label).toBe('Keep running');
    expect(keep.caption).toBe('Postpone this kernel’s shutdown by 2 h'.replace('’', "'"));
    keep.callback();
    await vi.waitFor(() => expect(model.refresh).toHaveBeenCalled());
    expect(calls.keepRunning).toHaveBeenCalledWith(K1);
    expect(lastCall(Notification.success)?.[0]).toBe(
      'cull_a.ipynb keeps running: its shutdown is postponed by 2 h.'
    );
    // Shown once per countdown, however many snapshots come
    model.show(counting);
    expect(Notification.warning).toHaveBeenCalledTimes(1);
  });

  it('says so when the server refuses, and shows the countdown again', async () => {
    const { model } = setUp({
      keepRunning: vi.fn(() => Promise.reject(new Error('no kernel of this server has that id')))
    });
    model.show(counting);
    const options = vi.mocked(Notification.warning).mock.calls[0][1] as unknown as {
      actions: { callback: () => void }[];
    };
    options.actions[0].callback();
    await vi.waitFor(() => expect(model.refresh).toHaveBeenCalled());
    expect(lastCall(Notification.error)?.[0]).toBe(
      'jupyter_gpu: could not keep cull_a.ipynb running: no kernel of this server has that id'
    );
    model.show(counting);
    expect(Notification.warning).toHaveBeenCalledTimes(2);
  });

  it('leaves a notification that stays when a counted-down kernel was culled, once', async () => {
    const culls = vi.fn(() =>
      Promise.resolve(
        parseCulls({
          culls: [{ kernel_id: K1, notebook: 'cull_a.ipynb', idle_s: 7200, memory: 6 * GIB, gpus: [1] }]
        })
      )
    );
    const { model } = setUp({ culls });
    model.show(counting);
    const id = vi.mocked(Notification.warning).mock.results[0].value;
    model.show(snapshot({ kernels: [] }));
    expect(Notification.dismiss).toHaveBeenCalledWith(id);
    await vi.waitFor(() =>
      expect(lastCall(Notification.info)).toEqual([
        'cull_a.ipynb shut down after 2 h idle, 6 GiB freed on GPU 1.',
        { autoClose: false }
      ])
    );
    const infos = vi.mocked(Notification.info).mock.calls.length;
    model.show(snapshot({ kernels: [] }));
    await new Promise(resolve => setTimeout(resolve, 10));
    expect(vi.mocked(Notification.info).mock.calls.length).toBe(infos);
  });

  it('notifies a cull also when the kernel’s last snapshot showed it no longer due (shutting down)', async () => {
    const culls = vi.fn(() =>
      Promise.resolve(
        parseCulls({
          culls: [{ kernel_id: K1, notebook: 'cull_a.ipynb', idle_s: 60, memory: GIB, gpus: [0] }]
        })
      )
    );
    const { model } = setUp({ culls });
    model.show(counting);
    model.show(snapshot({ kernels: [kernel({ kernel_id: K1, cull_warning: false, cull_in_s: null })] }));
    expect(culls).not.toHaveBeenCalled();
    model.show(snapshot({ kernels: [] }));
    await vi.waitFor(() =>
      expect(lastCall(Notification.info)?.[0]).toBe(
        'cull_a.ipynb shut down after 1 min idle, 1 GiB freed on GPU 0.'
      )
    );
  });

  it('says nothing lasting when the kernel ran again, or went without a cull', async () => {
    const { model, calls } = setUp();
    model.show(counting);
    model.show(snapshot({ kernels: [kernel({ kernel_id: K1, cull_warning: false, cull_in_s: 7000 })] }));
    expect(calls.culls).not.toHaveBeenCalled(); // still listed: it ran, or was kept
    model.show(counting);
    const infos = vi.mocked(Notification.info).mock.calls.length;
    model.show(snapshot({ kernels: [] })); // shut down by hand: the server has no cull of it
    await vi.waitFor(() => expect(calls.culls).toHaveBeenCalledTimes(1));
    await new Promise(resolve => setTimeout(resolve, 10));
    expect(vi.mocked(Notification.info).mock.calls.length).toBe(infos);
  });

  it('shows once, on the next visit, the culls made while no page was open', async () => {
    const away = (kernelId: string, culledAt: number) => ({
      kernel_id: kernelId,
      notebook: `${kernelId}.ipynb`,
      idle_s: 7200,
      memory: 6 * GIB,
      gpus: [1],
      culled_at: culledAt
    });
    const culls = vi.fn(() =>
      Promise.resolve(parseCulls({ culls: [away('before', 900), away('gone', 1500)] }))
    );
    vi.mocked(Notification.info).mockClear();
    const store = visits(1000); // the last visit's last snapshot was at 1000 (server time)
    const { model } = setUp({ culls }, store);
    model.show(snapshot({ timestamp: 2000, kernels: [] }));
    await vi.waitFor(() =>
      expect(lastCall(Notification.info)).toEqual([
        'While you were away: gone.ipynb shut down after 2 h idle, 6 GiB freed on GPU 1.',
        { autoClose: false }
      ])
    );
    expect(Notification.info).toHaveBeenCalledTimes(1); // not the cull of before the last visit
    expect(store.value).toBe(2000);
    model.show(snapshot({ timestamp: 2002, kernels: [] }));
    await new Promise(resolve => setTimeout(resolve, 10));
    expect(culls).toHaveBeenCalledTimes(1);
    expect(Notification.info).toHaveBeenCalledTimes(1);
  });

  it('holds the notices of a closed page until every plugin is activated (Notebook 7)', async () => {
    const culls = vi.fn(() =>
      Promise.resolve(
        parseCulls({
          culls: [
            { kernel_id: 'late', notebook: 'late.ipynb', idle_s: 60, memory: GIB, gpus: [0], culled_at: 1500 }
          ]
        })
      )
    );
    vi.mocked(Notification.info).mockClear();
    let started = (): void => undefined;
    const ready = new Promise<void>(resolve => (started = resolve));
    const model = new FakeModel();
    new CullNotifier(model as never, { keepRunning: vi.fn(), culls }, visits(1000), ready);
    model.show(snapshot({ timestamp: 2000, kernels: [] })); // the first snapshot, before the app started
    await vi.waitFor(() => expect(culls).toHaveBeenCalledTimes(1));
    await new Promise(resolve => setTimeout(resolve, 10));
    expect(Notification.info).not.toHaveBeenCalled(); // nobody would show it yet
    started();
    await vi.waitFor(() =>
      expect(lastCall(Notification.info)?.[0]).toBe(
        'While you were away: late.ipynb shut down after 1 min idle, 1 GiB freed on GPU 0.'
      )
    );
  });

  it('asks for nothing on a first visit, and remembers what it saw for the next one', async () => {
    const store = visits(null);
    const { model, calls } = setUp({}, store);
    model.show(snapshot({ timestamp: 3000, kernels: [] }));
    await new Promise(resolve => setTimeout(resolve, 10));
    expect(calls.culls).not.toHaveBeenCalled();
    expect(store.value).toBe(3000);
  });
});
