import { describe, expect, it } from 'vitest';

import { LatestSave } from '../latestSave';

/** A settings server that answers each save when the test says so, storing the value then (a
 * loaded server: a request's answer can come after a later request's). */
function slowServer() {
  const pending: { value: string; finish: (ok: boolean) => void }[] = [];
  const server = {
    stored: 'auto',
    started: [] as string[],
    pending,
    save(value: string): Promise<void> {
      server.started.push(value);
      return new Promise<void>((resolve, reject) => {
        pending.push({
          value,
          finish: ok => {
            if (ok) {
              server.stored = value;
              resolve();
            } else {
              reject(new Error(`could not save ${value}`));
            }
          }
        });
      });
    }
  };
  return server;
}

const tick = () => new Promise(resolve => setTimeout(resolve, 0));

describe('LatestSave (the Compact button clicked quickly on a loaded server)', () => {
  it('keeps the last click when the first save would land after the second', async () => {
    const server = slowServer();
    const saver = new LatestSave<string>(value => server.save(value));
    saver.set('compact'); // click 1
    saver.set('cards'); // click 2, before click 1's save was answered
    expect(server.started).toEqual(['compact']); // one save in flight: the second waits
    expect(saver.busy).toBe(true);
    server.pending[0].finish(true);
    await tick();
    expect(server.started).toEqual(['compact', 'cards']);
    server.pending[1].finish(true);
    await saver.settled();
    expect(server.stored).toBe('cards');
    expect(saver.busy).toBe(false);
  });

  it('saves only the latest of the values that waited', async () => {
    const server = slowServer();
    const saver = new LatestSave<string>(value => server.save(value));
    for (const value of ['compact', 'cards', 'compact', 'cards', 'compact']) {
      saver.set(value);
    }
    server.pending[0].finish(true);
    await tick();
    server.pending[1].finish(true);
    await saver.settled();
    expect(server.started).toEqual(['compact', 'compact']);
    expect(server.stored).toBe('compact');
  });

  it('goes on after a failed save, and reports it', async () => {
    const server = slowServer();
    const errors: unknown[] = [];
    const saver = new LatestSave<string>(
      value => server.save(value),
      reason => errors.push(reason)
    );
    saver.set('compact');
    saver.set('cards');
    server.pending[0].finish(false);
    await tick();
    expect(String(errors[0])).toContain('could not save compact');
    server.pending[1].finish(true);
    await saver.settled();
    expect(server.stored).toBe('cards');
  });

  it('reports a save that throws instead of returning a promise', async () => {
    const errors: unknown[] = [];
    const saver = new LatestSave<string>(
      () => {
        throw new Error('no settings');
      },
      reason => errors.push(reason)
    );
    saver.set('compact');
    await saver.settled();
    expect(errors).toHaveLength(1);
    expect(saver.busy).toBe(false);
  });
});
