/**
 * Keep the GPU sidebar open across page loads where the shell has no layout restorer.
 *
 * JupyterLab restores its side panels itself (`ILayoutRestorer`, the workspace). Notebook 7 (7.6
 * here) provides no `ILayoutRestorer` (jupyter/notebook#6990; its layout restorer, PR #7747, is not
 * released), so every page (tree, each notebook) would open with the GPU panel closed. Here the
 * panel remembers in the browser's `localStorage`, per server (base URL), whether it was the panel
 * shown in its side area when last shown or hidden, and asks the shell to show it again once the
 * page is restored. Nothing but "open"/"closed" is stored.
 *
 * Only the user closes it: collapsing the side area or choosing another panel hides the widget
 * itself (its own `isHidden`). Notebook 7.6 also hides the whole side area while its page settles
 * (each side widget added or removed at load, e.g. the extension manager's, re-applies a stale
 * "hidden" flag of the area), which hides the widget through its parent or before it is shown:
 * during `SETTLE_MS` after the restore that is neither remembered nor accepted, and the panel is
 * shown again (at once, and at `SETTLE_CHECKS_MS`), until the user hides it.
 */
import { PageConfig } from '@jupyterlab/coreutils';
import { IMessageHandler, Message, MessageLoop } from '@lumino/messaging';

/** How long after restoring a hide by the page itself (not by the user) is undone. */
export const SETTLE_MS = 5000;

/** When (ms after the restore) the panel is checked and shown again if the page hid it. */
export const SETTLE_CHECKS_MS = [250, 1000, 2500, 4500];

/** The sidebar as this needs it: a Lumino widget (messages, id, its own hidden flag). */
export interface IRestorableSidebar extends IMessageHandler {
  readonly id: string;
  /** True when the widget itself was hidden (not merely a parent). */
  readonly isHidden: boolean;
  /** True when it and all its parents are shown. */
  readonly isVisible: boolean;
}

/** The part of the application this needs (a `JupyterFrontEnd`). */
export interface IRestoringApp {
  readonly restored: Promise<void>;
  /** Notebook 7's shell has its own `restored`: resolved once its main widget is loaded. */
  readonly shell: { activateById(id: string): void; readonly restored?: Promise<void> };
}

/** The storage key for this server's pages. */
export function openKey(baseUrl: string = PageConfig.getBaseUrl()): string {
  return `jupyter-gpu:sidebar-open:${baseUrl}`;
}

function browserStorage(): Storage | null {
  try {
    return window.localStorage; // may throw where storage is disabled
  } catch {
    return null;
  }
}

/**
 * Show `sidebar` (a Lumino widget) when the page is restored if it was open when the last page left,
 * and from then on remember each time it is shown or hidden (its `after-show` and `after-hide`
 * messages). Resolves once the state is restored (never rejects).
 */
export async function restoreWithoutRestorer(
  app: IRestoringApp,
  sidebar: IRestorableSidebar,
  storage: Storage | null = browserStorage(),
  key: string = openKey()
): Promise<void> {
  if (!storage) {
    return;
  }
  try {
    await app.restored;
    // Notebook 7 lays its side panels out when the page's main widget arrives, after `app.restored`.
    await app.shell.restored;
  } catch {
    // the page restored badly: still remember from now on
  }
  let settleUntil = 0;
  const reopen = (): void => {
    if (Date.now() < settleUntil && !sidebar.isVisible) {
      app.shell.activateById(sidebar.id);
    }
  };
  try {
    if (storage.getItem(key) === 'open') {
      settleUntil = Date.now() + SETTLE_MS;
      app.shell.activateById(sidebar.id);
      for (const ms of SETTLE_CHECKS_MS) {
        setTimeout(reopen, ms);
      }
    }
  } catch (error) {
    console.warn('jupyter-gpu: could not reopen the GPU sidebar', error);
  }
  const remember = (state: 'open' | 'closed'): void => {
    try {
      storage.setItem(key, state);
    } catch {
      // a full or disabled storage only costs the restoring
    }
  };
  MessageLoop.installMessageHook(sidebar, (_handler: IMessageHandler, msg: Message): boolean => {
    if (msg.type === 'after-show') {
      remember('open');
    } else if (msg.type === 'after-hide') {
      if (sidebar.isHidden) {
        settleUntil = 0; // the user's choice from now on
        remember('closed');
      } else {
        setTimeout(reopen, 0);
      }
    }
    return true;
  });
}
