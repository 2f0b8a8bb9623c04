/**
 * "Your GPU use this week": one line in the sidebar under JupyterHub, from the server extension's
 * `GET jupyter-gpu/usage?window=week`, which asks the jupyter-gpu hub service with the user server's
 * own token (the service answers each user with their own figures only).
 *
 * Hidden when there is nothing to show: no hub service, or no accounting there (the route answers
 * 404). The server extension says in the page config whether this server has a hub service
 * (`jupyterGpuUsage`, `jupyter_gpu.server.handlers.usage_available`): without one the route is never
 * asked, so a page load logs no 404. Else asked once when created and then every 10 minutes (the
 * service accounts once a minute, in hours rounded to two decimals); text only, through `textContent`.
 */
import { PageConfig } from '@jupyterlab/coreutils';

import { el, setHidden, setText } from '../dom';
import { displayText } from '../format';
import { trans } from '../i18n';
import { requestAPI, ServerExtensionMissingError } from '../server';

/** The figures of one notebook, or of the user (hours; `idle_hours` is part of `gpu_hours`). */
export interface IUsageFigures {
  gpu_hours: number;
  gib_hours: number;
  busy_hours: number;
  idle_hours: number;
}

/** The answer of `GET jupyter-gpu/usage` (`jupyter_gpu.sources.remote.own_usage`). */
export interface IUsageAnswer extends IUsageFigures {
  window: string;
  user: string;
  notebooks: (IUsageFigures & { notebook: string })[];
}

/** The window of an answer in words (`this week`), in the user's language. */
function windowText(window: string): string {
  switch (window) {
    case 'day':
      return trans._p('GPU use over a time window', 'today');
    case 'week':
      return trans._p('GPU use over a time window', 'this week');
    case '30d':
      return trans._p('GPU use over a time window', 'in 30 days');
    default:
      return trans._p('GPU use over a time window', 'over %1', displayText(window, '?', 16));
  }
}
const REFRESH_MS = 10 * 60 * 1000;

function hours(value: number): string {
  return Number.isFinite(value) ? value.toFixed(2).replace(/\.?0+$/, '') || '0' : '—';
}

/**
 * The line, e.g. `Your GPU use this week: 12.5 GPU-hours, 40 GiB-hours, 30 % idle`, and the title
 * (the notebooks, most GPU-hours first, at most five).
 */
export function usageText(answer: IUsageAnswer): { line: string; title: string } {
  const when = windowText(answer.window);
  if (!(answer.gpu_hours > 0)) {
    return { line: trans.__('Your GPU use %1: none', when), title: '' };
  }
  const idle = Math.round((100 * answer.idle_hours) / answer.gpu_hours);
  const line = trans.__(
    'Your GPU use %1: %2 GPU-hours, %3 GiB-hours, %4 % idle',
    when,
    hours(answer.gpu_hours),
    hours(answer.gib_hours),
    Math.min(100, Math.max(0, idle))
  );
  const outside = trans.__('(outside notebooks)');
  const notebooks = [...answer.notebooks]
    .sort((a, b) => b.gpu_hours - a.gpu_hours)
    .slice(0, 5)
    .map(n => trans.__('%1: %2 GPU-hours', displayText(n.notebook || outside, '?', 80), hours(n.gpu_hours)));
  const more = answer.notebooks.length > 5 ? [trans.__('and %1 more', answer.notebooks.length - 5)] : [];
  return { line, title: [...notebooks, ...more].join('\n') };
}

/** Whether this server has a jupyter-gpu hub service to ask (the page config's `jupyterGpuUsage`). */
export function usageAvailable(): boolean {
  return String(PageConfig.getOption('jupyterGpuUsage')) === 'true';
}

export class UsageSummary {
  readonly node: HTMLElement = el('div', 'jp-GpuSidebar-usage', { role: 'status' });

  /** `available`: false when there is no hub service: then nothing is ever asked and it stays hidden. */
  constructor(
    private _fetch: () => Promise<IUsageAnswer> = () => requestAPI<IUsageAnswer>('usage?window=week'),
    refreshMs: number = REFRESH_MS,
    private readonly _available: boolean = usageAvailable()
  ) {
    this.node.hidden = true;
    this._timer = _available && refreshMs > 0 ? setInterval(() => void this.refresh(), refreshMs) : null;
  }

  /** Ask again and show the answer; hide on 404 (no accounting); nothing without a hub service. */
  async refresh(): Promise<void> {
    if (!this._available) {
      return;
    }
    try {
      const { line, title } = usageText(await this._fetch());
      setText(this.node, line);
      this.node.title = title;
      setHidden(this.node, false);
    } catch (error) {
      if (error instanceof ServerExtensionMissingError) {
        setHidden(this.node, true);
        return;
      }
      setText(
        this.node,
        trans.__('Your GPU use: not available (%1)', displayText((error as Error).message, '?', 200))
      );
      this.node.title = '';
      setHidden(this.node, false);
    }
  }

  dispose(): void {
    if (this._timer !== null) {
      clearInterval(this._timer);
      this._timer = null;
    }
  }

  private _timer: ReturnType<typeof setInterval> | null;
}
