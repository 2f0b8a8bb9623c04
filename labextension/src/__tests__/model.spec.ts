import { afterEach, describe, expect, it, vi } from 'vitest';

import { GpuMonitorModel } from '../model';
import { ServerExtensionMissingError } from '../server';
import type { IHistoryAnswer, ISnapshot } from '../tokens';
import { GIB, gpu, hostile, snapshot } from './fixtures';

const T0 = 1_700_000_000;
const models: GpuMonitorModel[] = [];

function model(options: GpuMonitorModel.IOptions = {}): GpuMonitorModel {
  const created = new GpuMonitorModel({ autoStart: false, ...options });
  models.push(created);
  return created;
}

function countChanges(m: GpuMonitorModel): () => number {
  let n = 0;
  m.changed.connect(() => {
    n++;
  });
  return () => n;
}

afterEach(() => {
  models.splice(0).forEach(m => m.dispose());
});

describe('GpuMonitorModel.ingest', () => {
  it('starts empty and loading', () => {
    const m = model();
    expect(m.state).toBe('loading');
    expect(m.snapshot).toBeNull();
    expect(m.message).toBeNull();
    expect(m.history('GPU-0')).toEqual([]);
  });

  it('turns a snapshot into state, one history sample per GPU, and one change signal', () => {
    const m = model();
    const changes = countChanges(m);
    const snap = snapshot({
      gpus: [
        gpu({ uuid: 'GPU-a', utilization: 50, memory_used: 10 * GIB, memory_total: 40 * GIB }),
        gpu({ uuid: 'GPU-b', utilization: 0, memory_used: 0, memory_total: 80 * GIB })
      ]
    });
    m.ingest(snap);
    expect(m.state).toBe('ok');
    expect(m.snapshot).toBe(snap);
    expect(changes()).toBe(1);
    expect(m.history('GPU-a')).toEqual([{ t: T0, utilization: 50, memory: 25 }]);
    expect(m.history('GPU-b')).toEqual([{ t: T0, utilization: 0, memory: 0 }]);
  });

  it('reports no-nvml when the server cannot read NVML (or does not say it can)', () => {
    const m = model();
    m.ingest(snapshot({ nvml_available: false, error: 'NVML Shared Library Not Found', gpus: [] }));
    expect(m.state).toBe('no-nvml');
    const withoutFlag: Partial<ISnapshot> = snapshot();
    delete withoutFlag.nvml_available;
    m.ingest(hostile<ISnapshot>(withoutFlag));
    expect(m.state).toBe('no-nvml');
  });

  it('records no numbers for a GPU that could not be read or has no memory total', () => {
    const m = model();
    m.ingest(
      snapshot({
        gpus: [
          gpu({ uuid: 'lost', error: 'GPU is lost', utilization: 99, memory_used: GIB }),
          gpu({ uuid: 'zero', memory_total: 0, memory_used: GIB, utilization: null }),
          gpu({ uuid: 'missing', memory_total: hostile<number>(undefined) }),
          gpu({ uuid: 'text', memory_total: hostile<number>('NaN') })
        ]
      })
    );
    expect(m.history('lost')).toEqual([{ t: T0, utilization: null, memory: null }]);
    expect(m.history('zero')).toEqual([{ t: T0, utilization: null, memory: null }]);
    expect(m.history('missing')[0].memory).toBeNull();
    expect(m.history('text')[0].memory).toBeNull();
  });

  it('handles huge numbers without overflowing to NaN', () => {
    const m = model();
    // JSON has no Infinity, but 1e999 parses to it.
    const snap = JSON.parse(
      `{"nvml_available": true, "timestamp": ${T0}, "gpus": [{"uuid": "big", "error": null,
        "utilization": 100, "memory_total": 1e999, "memory_used": 123456789012345678901234567890}]}`
    ) as ISnapshot;
    m.ingest(snap);
    // Infinity is not a memory total: no chart value from it (it used to plot 0 %).
    expect(m.history('big')).toEqual([{ t: T0, utilization: 100, memory: null }]);
  });

  it('refuses a snapshot without a list of GPUs before changing anything', () => {
    const m = model();
    const changes = countChanges(m);
    for (const bad of [
      { nvml_available: true, timestamp: T0 },
      { nvml_available: true, timestamp: T0, gpus: 'GPU-0' },
      { nvml_available: true, timestamp: T0, gpus: [null] },
      null
    ]) {
      expect(() => m.ingest(hostile<ISnapshot>(bad))).toThrow();
    }
    expect([m.state, m.snapshot, changes()]).toEqual(['loading', null, 0]);
    const good = snapshot();
    m.ingest(good);
    expect(() => m.ingest(hostile<ISnapshot>({ nvml_available: false, timestamp: T0 + 2 }))).toThrow(
      'the server sent a snapshot without a list of GPUs'
    );
    expect([m.state, m.snapshot, changes()]).toEqual(['ok', good, 1]);
  });

  it('refuses a snapshot without a finite timestamp (the history would never be trimmed)', () => {
    const m = model({ historyMinutes: 1 });
    m.ingest(snapshot({ timestamp: T0 }));
    for (const bad of [undefined, null, 'x', NaN, Infinity]) {
      const snap: Partial<ISnapshot> = snapshot({ timestamp: hostile<number>(bad) });
      expect(() => m.ingest(hostile<ISnapshot>(snap))).toThrow('without a timestamp');
    }
    expect(m.history('GPU-0')).toEqual([{ t: T0, utilization: 50, memory: 25 }]);
  });

  it('plots only finite numbers within 0..100 % and adopts only a sane interval', () => {
    const m = model();
    m.ingest(
      snapshot({
        interval_s: hostile<number>(JSON.parse('1e999')),
        gpus: [
          gpu({ uuid: 'a', utilization: hostile<number>('50'), memory_used: hostile<number>('NaN') }),
          gpu({ uuid: 'b', utilization: hostile<number>(NaN), memory_used: Infinity, memory_total: GIB }),
          gpu({ uuid: 'c', utilization: -5, memory_used: -GIB, memory_total: GIB }),
          gpu({ uuid: 'd', utilization: 150, memory_used: 2 * GIB, memory_total: GIB }),
          gpu({ uuid: 'e', utilization: 100, memory_used: GIB, memory_total: GIB })
        ]
      })
    );
    expect(m.sampleIntervalS).toBe(1);
    for (const uuid of ['a', 'b', 'c', 'd']) {
      expect(m.history(uuid)).toEqual([{ t: T0, utilization: null, memory: null }]);
    }
    expect(m.history('e')).toEqual([{ t: T0, utilization: 100, memory: 100 }]);
    m.ingest(snapshot({ timestamp: T0 + 1, interval_s: 100_000 }));
    expect(m.sampleIntervalS).toBe(1);
  });

  it.each(['false', 'true', 1, {}])('takes only the boolean true as NVML available, not %j', flag => {
    const m = model();
    m.ingest(snapshot({ nvml_available: hostile<boolean>(flag) }));
    expect(m.state).toBe('no-nvml');
  });

  it('takes a poll interval longer than the backoff maximum (an hour) and back', () => {
    const m = model();
    m.refreshIntervalMs = 3_600_000;
    expect(m.gapS).toBe(3 * 3600);
    m.refreshIntervalMs = 2000;
    expect(m.gapS).toBe(6);
  });

  it('adopts the server sampling interval only when it is a positive number', () => {
    const m = model({ refreshIntervalMs: 2000 });
    expect(m.sampleIntervalS).toBe(1);
    expect(m.gapS).toBe(6); // 3 × the 2 s poll, slower than the 1 s default sampling
    m.ingest(snapshot({ interval_s: 5 }));
    expect(m.sampleIntervalS).toBe(5);
    expect(m.gapS).toBe(15);
    for (const bad of [0, -1, NaN, '10', 'NaN', null, undefined]) {
      m.ingest(snapshot({ interval_s: hostile<number>(bad) }));
      expect(m.sampleIntervalS).toBe(5);
    }
  });

  it('keeps the history window, skips repeated samples and forgets GPUs that are gone', () => {
    const m = model({ historyMinutes: 1 });
    m.ingest(snapshot({ timestamp: T0 }));
    m.ingest(snapshot({ timestamp: T0 })); // the server's cache answered again
    m.ingest(snapshot({ timestamp: T0 - 5 })); // out of order: not appended
    expect(m.history('GPU-0').map(s => s.t)).toEqual([T0]);
    m.ingest(snapshot({ timestamp: T0 + 30 }));
    m.ingest(snapshot({ timestamp: T0 + 61 }));
    expect(m.history('GPU-0').map(s => s.t)).toEqual([T0 + 30, T0 + 61]);
    m.historyMinutes = 0.25;
    m.ingest(snapshot({ timestamp: T0 + 62 }));
    expect(m.history('GPU-0').map(s => s.t)).toEqual([T0 + 61, T0 + 62]);
    m.ingest(snapshot({ timestamp: T0 + 63, gpus: [gpu({ uuid: 'GPU-1' })] }));
    expect(m.history('GPU-0')).toEqual([]);
    expect(m.history('GPU-1').map(s => s.t)).toEqual([T0 + 63]);
  });

  it('keeps server text as it is: neutralising bidi controls is the views’ job', () => {
    const m = model();
    const uuid = 'GPU-\u202eevil';
    const snap = snapshot({ gpus: [gpu({ uuid, name: 'A100\u202e\u2066', error: null })] });
    m.ingest(snap);
    expect(m.snapshot?.gpus[0].name).toBe('A100\u202e\u2066');
    expect(m.history(uuid)).toHaveLength(1);
    expect(m.history('GPU-evil')).toEqual([]);
  });
});

describe('GpuMonitorModel polling', () => {
  it('marks failures without dropping the last good snapshot, and recovers', async () => {
    const answers: (ISnapshot | Error | string)[] = [
      snapshot(),
      hostile<ISnapshot>({ nvml_available: true, timestamp: T0 + 1 }),
      new ServerExtensionMissingError('http://x/jupyter-gpu/snapshot'),
      new Error('502 Bad Gateway'),
      'plain string',
      snapshot({ timestamp: T0 + 2 })
    ];
    const m = model({
      fetchSnapshot: async () => {
        const next = answers.shift();
        if (next instanceof Error || typeof next === 'string') {
          throw next;
        }
        return next as ISnapshot;
      }
    });
    await m.refresh();
    expect(m.state).toBe('ok');
    const good = m.snapshot;
    await m.refresh(); // a malformed answer (a proxy's {}): an error, the last good snapshot kept
    expect([m.state, m.message, m.snapshot]).toEqual([
      'error',
      'the server sent a snapshot without a list of GPUs',
      good
    ]);
    await m.refresh();
    expect(m.state).toBe('missing-extension');
    expect(m.message).toContain('jupyter_gpu server extension did not answer');
    expect(m.snapshot).toBe(good);
    await m.refresh();
    expect([m.state, m.message]).toEqual(['error', '502 Bad Gateway']);
    await m.refresh();
    expect([m.state, m.message]).toEqual(['error', 'plain string']);
    await m.refresh();
    expect([m.state, m.message]).toEqual(['ok', null]);
    expect(m.history('GPU-0').map(s => s.t)).toEqual([T0, T0 + 2]);
  });
});

describe('GpuMonitorModel.ingestHistory', () => {
  function answer(t: number[], fields: Partial<IHistoryAnswer['gpus'][0]> = {}): IHistoryAnswer {
    return {
      window_s: 900,
      interval_s: 2,
      gpus: [{ index: 0, uuid: 'GPU-0', t, utilization: t.map(() => 10), memory: t.map(() => 20), ...fields }]
    };
  }

  it('puts older server samples in front of the polled ones, once', () => {
    const m = model();
    m.ingest(snapshot({ timestamp: T0 }));
    const changes = countChanges(m);
    expect(m.ingestHistory(answer([T0 - 4, T0 - 2, T0, T0 + 2]))).toBe(2);
    expect(m.history('GPU-0')).toEqual([
      { t: T0 - 4, utilization: 10, memory: 20 },
      { t: T0 - 2, utilization: 10, memory: 20 },
      { t: T0, utilization: 50, memory: 25 }
    ]);
    expect(m.sampleIntervalS).toBe(2);
    expect(changes()).toBe(1);
    expect(m.ingestHistory(answer([T0 - 4, T0 - 2]))).toBe(0);
    expect(changes()).toBe(1);
  });

  it('drops samples older than the window and fills missing columns with null', () => {
    const m = model({ historyMinutes: 1 });
    const added = m.ingestHistory(
      answer([T0 - 120, T0 - 61, T0 - 60, T0 - 1, T0], { utilization: [1, 2, 3], memory: [] })
    );
    expect(added).toBe(3);
    expect(m.history('GPU-0')).toEqual([
      { t: T0 - 60, utilization: 3, memory: null },
      { t: T0 - 1, utilization: null, memory: null },
      { t: T0, utilization: null, memory: null }
    ]);
  });

  it('ignores a non-positive interval', () => {
    const m = model();
    m.ingestHistory({ ...answer([T0]), interval_s: 0 });
    expect(m.sampleIntervalS).toBe(1);
  });

  it('loads nothing, without failing, from a server that has no history route', async () => {
    const m = model({
      fetchHistory: () => Promise.reject(new ServerExtensionMissingError('http://x/jupyter-gpu/history'))
    });
    const debug = vi.spyOn(console, 'debug').mockImplementation(() => undefined);
    expect(await m.loadHistory()).toBe(0);
    expect(m.state).toBe('loading');
    expect(debug).toHaveBeenCalledWith(
      'jupyter-gpu: no server history',
      expect.any(ServerExtensionMissingError)
    );
    debug.mockRestore();
  });

  it.each([{}, { gpus: null }, { gpus: 'x' }, null, 'text'])(
    'loads nothing, and does not reject, when the history answer is %j',
    async bad => {
      const m = model({ fetchHistory: async () => hostile<IHistoryAnswer>(bad) });
      const debug = vi.spyOn(console, 'debug').mockImplementation(() => undefined);
      await expect(m.loadHistory()).resolves.toBe(0);
      debug.mockRestore();
    }
  );

  it('skips GPUs and times that are not a history, and plots only 0..100 %', () => {
    const m = model();
    const added = m.ingestHistory(
      hostile<IHistoryAnswer>({
        window_s: 900,
        interval_s: JSON.parse('1e999'),
        gpus: [
          null,
          { uuid: 'no-t' },
          { uuid: 7, t: [T0] },
          {
            uuid: 'GPU-0',
            t: [T0 - 3, 'NaN', null, T0 - 1, T0],
            utilization: [10, 20, 30, 'NaN', 150],
            memory: [Infinity, 20, 30, -1, 100]
          }
        ]
      })
    );
    expect(added).toBe(3);
    expect(m.sampleIntervalS).toBe(1);
    expect(m.history('GPU-0')).toEqual([
      { t: T0 - 3, utilization: 10, memory: null },
      { t: T0 - 1, utilization: null, memory: null },
      { t: T0, utilization: null, memory: 100 }
    ]);
  });

  it('loads the server history when asked', async () => {
    const m = model({ fetchHistory: async () => answer([T0 - 2, T0]) });
    expect(await m.loadHistory()).toBe(2);
    expect(m.history('GPU-0').map(s => s.t)).toEqual([T0 - 2, T0]);
  });
});
