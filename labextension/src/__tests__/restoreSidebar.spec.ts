import { IMessageHandler, Message, MessageLoop } from '@lumino/messaging';
import { describe, expect, it, vi } from 'vitest';

import { restoreWithoutRestorer, SETTLE_CHECKS_MS, SETTLE_MS } from '../restoreSidebar';

/** A `Storage` in memory (jsdom's localStorage is shared between tests). */
function memoryStorage(initial: Record<string, string> = {}): Storage {
  const items = new Map(Object.entries(initial));
  return {
    get length() {
      return items.size;
    },
    clear: () => items.clear(),
    getItem: key => items.get(key) ?? null,
    key: index => [...items.keys()][index] ?? null,
    removeItem: key => void items.delete(key),
    setItem: (key, value) => void items.set(key, String(value))
  };
}

function send(handler: IMessageHandler, type: string): void {
  MessageLoop.sendMessage(handler, new Message(type));
}

function setUp(stored: Record<string, string>) {
  const activated: string[] = [];
  const app = {
    restored: Promise.resolve(),
    shell: { activateById: (id: string) => void activated.push(id) }
  };
  // What the shell's Lumino widget receives when it is shown or hidden (no DOM needed here).
  const sidebar = {
    id: 'jupyter-gpu-sidebar',
    isHidden: false,
    isVisible: false,
    processMessage: () => undefined
  };
  const storage = memoryStorage(stored);
  return { app, sidebar, storage, activated };
}

describe('restoreWithoutRestorer (Notebook 7)', () => {
  it('shows the sidebar again when it was open when the last page left', async () => {
    const { app, sidebar, storage, activated } = setUp({ k: 'open' });
    await restoreWithoutRestorer(app, sidebar, storage, 'k');
    expect(activated).toEqual(['jupyter-gpu-sidebar']);
  });

  it('leaves it closed when it was closed or never opened', async () => {
    for (const stored of [{ k: 'closed' }, {}] as Record<string, string>[]) {
      const { app, sidebar, storage, activated } = setUp(stored);
      await restoreWithoutRestorer(app, sidebar, storage, 'k');
      expect(activated).toEqual([]);
    }
  });

  it('remembers each time the panel is shown or hidden', async () => {
    const { app, sidebar, storage } = setUp({});
    send(sidebar, 'after-hide'); // before restoring: the shell hiding it at start is not a choice
    await restoreWithoutRestorer(app, sidebar, storage, 'k');
    expect(storage.getItem('k')).toBeNull();
    send(sidebar, 'after-show');
    expect(storage.getItem('k')).toBe('open');
    sidebar.isHidden = true; // collapsed by the user, or another panel chosen
    send(sidebar, 'after-hide');
    expect(storage.getItem('k')).toBe('closed');
    send(sidebar, 'resize');
    expect(storage.getItem('k')).toBe('closed');
  });

  it('shows it again when the page (not the user) hides it while settling, and remembers nothing of that', async () => {
    vi.useFakeTimers();
    try {
      const { app, sidebar, storage, activated } = setUp({ k: 'open' });
      app.shell.activateById = () => {
        activated.push('shown');
        sidebar.isVisible = true;
      };
      await restoreWithoutRestorer(app, sidebar, storage, 'k');
      expect(activated).toEqual(['shown']);
      sidebar.isVisible = false;
      send(sidebar, 'after-hide'); // through its parent: its own flag is not set
      vi.advanceTimersByTime(0);
      expect(activated).toEqual(['shown', 'shown']);
      expect(storage.getItem('k')).toBe('open');
      sidebar.isVisible = false; // hidden before it was ever shown again: no message at all
      vi.advanceTimersByTime(SETTLE_CHECKS_MS[1]);
      expect(activated.length).toBe(3);
      vi.advanceTimersByTime(SETTLE_MS);
      sidebar.isVisible = false;
      send(sidebar, 'after-hide');
      vi.runAllTimers();
      expect(activated.length).toBe(3); // settled: a later hide is left alone
    } finally {
      vi.useRealTimers();
    }
  });

  it('stops showing it again once the user hid it', async () => {
    vi.useFakeTimers();
    try {
      const { app, sidebar, storage, activated } = setUp({ k: 'open' });
      await restoreWithoutRestorer(app, sidebar, storage, 'k');
      sidebar.isHidden = true;
      send(sidebar, 'after-hide');
      vi.runAllTimers();
      expect(activated).toEqual(['jupyter-gpu-sidebar']);
      expect(storage.getItem('k')).toBe('closed');
    } finally {
      vi.useRealTimers();
    }
  });

  it('does nothing without storage, and survives a storage that throws', async () => {
    const { app, sidebar, activated } = setUp({});
    await restoreWithoutRestorer(app, sidebar, null, 'k');
    const broken = memoryStorage();
    broken.getItem = () => {
      throw new Error('SecurityError');
    };
    broken.setItem = broken.getItem;
    await restoreWithoutRestorer(app, sidebar, broken, 'k');
    send(sidebar, 'after-show');
    expect(activated).toEqual([]);
  });
});
