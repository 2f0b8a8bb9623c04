/**
 * The notifications of GPU-aware culling: a countdown per kernel the server's culler is about to
 * shut down (`cull_warning`), with "Keep running" (`POST jupyter-gpu/keep-running`: the server
 * postpones that kernel's cull by one `cull_idle_after_s` and logs it), and, once the culler shut a
 * warned kernel down, a notification that stays in the notification center (`GET jupyter-gpu/culls`)
 * saying which notebook went, after how long idle, and what it freed where. Text only.
 *
 * Culls made while no page was open are not lost: the page remembers (per server, in the browser's
 * local storage) the server time of the last snapshot it saw, and on the next visit shows the culls
 * the server made after it once, in the notification center, as for live ones.
 */
import { Notification } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';

import { countdownText, cullNotice, cullsDue, type ICullRecord, parseCulls } from './culling';
import { displayText, formatDuration } from './format';
import { trans } from './i18n';
import { requestAPI } from './server';
import type { IGpuMonitorModel, ISnapshot } from './tokens';

/** The server calls the notifier makes (tests pass their own). */
export interface ICullApi {
  /** Postpone the cull of `kernelId`; the seconds now postponed. */
  keepRunning(kernelId: string): Promise<number>;
  /** The culls the server made lately. */
  culls(): Promise<ICullRecord[]>;
}

export const serverCullApi: ICullApi = {
  async keepRunning(kernelId: string): Promise<number> {
    const answer = await requestAPI<{ postponed_s?: unknown }>('keep-running', {
      method: 'POST',
      body: JSON.stringify({ kernel_id: kernelId })
    });
    return typeof answer.postponed_s === 'number' ? answer.postponed_s : 0;
  },
  async culls(): Promise<ICullRecord[]> {
    return parseCulls(await requestAPI<unknown>('culls'));
  }
};

/** Where a page keeps the server time of the last snapshot it saw (tests pass their own). */
export interface IVisitStore {
  /** The last visit's last snapshot time (server epoch seconds), or null for a first visit. */
  lastSeen(): number | null;
  seen(timestamp: number): void;
}

/** The browser's local storage, one entry per server (its base URL); nothing where there is none. */
export function browserVisits(key = `jupyter-gpu:last-seen:${PageConfig.getBaseUrl()}`): IVisitStore {
  const storage = (): Storage | null => {
    try {
      return typeof localStorage === 'undefined' ? null : localStorage;
    } catch {
      return null; // storage disabled: live culls only
    }
  };
  return {
    lastSeen(): number | null {
      const value = Number(storage()?.getItem(key) ?? Number.NaN);
      return Number.isFinite(value) && value > 0 ? value : null;
    },
    seen(timestamp: number): void {
      try {
        storage()?.setItem(key, String(timestamp));
      } catch {
        // full or disabled: the next visit shows no catch-up, nothing worse
      }
    }
  };
}

/** At most this many culls since the last visit get a notification each; the rest are counted in one. */
export const AWAY_NOTICES = 5;

/** The kernel ids of a snapshot's kernel summaries, or null when the server sends none (older servers). */
function listedKernels(snapshot: ISnapshot | null): Set<string> | null {
  if (!snapshot || !Array.isArray(snapshot.kernels)) {
    return null;
  }
  return new Set(snapshot.kernels.map(k => (typeof k === 'object' && k !== null ? k.kernel_id : '')));
}

/** Shows the countdown and cull notifications for `model`'s snapshots (one per page). */
export class CullNotifier {
  constructor(
    private readonly model: IGpuMonitorModel,
    private readonly api: ICullApi = serverCullApi,
    private readonly visits: IVisitStore = browserVisits(),
    /**
     * Settles once every plugin of the page is activated (`app.started`): the culls made while the
     * page was closed are notified after it, when the page's notification display listens (in
     * Notebook 7 the first snapshot could come before it did, and the notice was never shown).
     */
    private readonly ready: Promise<unknown> = Promise.resolve()
  ) {
    this.lastVisit = visits.lastSeen();
    model.changed.connect(() => this.update());
  }

  /** The server time of the last snapshot the previous visit saw (null: first visit, or done). */
  private lastVisit: number | null;

  /** Toast ids of the countdowns shown, by kernel id. */
  readonly countdowns = new Map<string, string>();
  /**
   * Kernels counted down while this page watched, until they go: when one goes, the server's
   * list of culls says whether the culler shut it down (its last snapshots may show it busy or
   * not due any more, while it shuts down).
   */
  private readonly warned = new Set<string>();
  /** Kernels whose cull was notified already (one lasting notification each). */
  private readonly notified = new Set<string>();

  update(): void {
    const snapshot = this.model.snapshot;
    if (snapshot && typeof snapshot.timestamp === 'number' && Number.isFinite(snapshot.timestamp)) {
      if (this.lastVisit !== null) {
        const since = this.lastVisit;
        this.lastVisit = null;
        void this.notifyAway(since);
      }
      this.visits.seen(snapshot.timestamp);
    }
    const due = cullsDue(snapshot);
    const listed = listedKernels(snapshot);
    for (const [kernelId, id] of this.countdowns) {
      if (!due.has(kernelId)) {
        Notification.dismiss(id);
        this.countdowns.delete(kernelId);
      }
    }
    if (listed !== null) {
      for (const kernelId of this.warned) {
        if (!listed.has(kernelId)) {
          this.warned.delete(kernelId);
          void this.notifyCull(kernelId);
        }
      }
    }
    for (const [kernelId, cull] of due) {
      this.warned.add(kernelId);
      if (!this.countdowns.has(kernelId)) {
        const postpone = snapshot?.cull_idle_after_s;
        this.countdowns.set(
          kernelId,
          Notification.warning(countdownText(cull), {
            autoClose: false,
            actions: [
              {
                label: trans.__('Keep running'),
                caption:
                  typeof postpone === 'number'
                    ? trans.__("Postpone this kernel's shutdown by %1", formatDuration(postpone))
                    : trans.__("Postpone this kernel's shutdown"),
                displayType: 'accent',
                callback: () => void this.keep(kernelId, cull.label)
              }
            ]
          })
        );
      }
    }
  }

  private async keep(kernelId: string, label: string): Promise<void> {
    try {
      const postponed = await this.api.keepRunning(kernelId);
      Notification.success(
        trans.__(
          '%1 keeps running: its shutdown is postponed by %2.',
          label.slice(0, 40),
          formatDuration(postponed)
        ),
        {
          autoClose: 5000
        }
      );
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      Notification.error(
        trans.__(
          'jupyter_gpu: could not keep %1 running: %2',
          label.slice(0, 40),
          displayText(message, '', 300)
        )
      );
      const id = this.countdowns.get(kernelId);
      if (id !== undefined) {
        Notification.dismiss(id);
        this.countdowns.delete(kernelId); // shown again while the countdown lasts
      }
    }
    await this.model.refresh().catch(() => undefined);
  }

  /** The culls the server made after `since` (the last visit's last snapshot), once each. */
  private async notifyAway(since: number): Promise<void> {
    let culls: ICullRecord[];
    try {
      culls = await this.api.culls();
      await this.ready;
    } catch {
      return;
    }
    const away = culls.filter(
      c => c.culledAt !== null && c.culledAt > since && !this.notified.has(c.kernelId)
    );
    for (const cull of away) {
      this.notified.add(cull.kernelId);
    }
    for (const cull of away.slice(-AWAY_NOTICES)) {
      Notification.info(trans.__('While you were away: %1', cullNotice(cull)), { autoClose: false });
    }
    if (away.length > AWAY_NOTICES) {
      const more = away.length - AWAY_NOTICES;
      Notification.info(
        trans._n(
          'While you were away: %1 more idle GPU kernel was shut down.',
          'While you were away: %1 more idle GPU kernels were shut down.',
          more
        ),
        { autoClose: false }
      );
    }
  }

  private async notifyCull(kernelId: string): Promise<void> {
    let culls: ICullRecord[];
    try {
      culls = await this.api.culls();
    } catch {
      return; // an older server: the countdown's end says it all
    }
    const cull = culls.find(c => c.kernelId === kernelId);
    if (cull && !this.notified.has(kernelId)) {
      this.notified.add(kernelId);
      Notification.info(cullNotice(cull), { autoClose: false });
    }
  }
}
