/**
 * "Restart kernel and apply": the MIME renderer for jupyter_gpu's restart offer.
 *
 * When a GPU magic comes too late (`GPUAlreadyInitializedWarning`) or `%gpu_restart` runs, the
 * kernel displays `application/vnd.jupyter-gpu.restart+json`: the magic lines of the plan. This
 * renderer shows them with a button that, after asking (`confirmRestart`: the kernel's variables are
 * lost; the user may opt out in the settings), restarts the kernel through the frontend's own session
 * API (the `sessionContext` of the notebook or console holding the output), runs the lines
 * silently in the new kernel before anything else, and confirms with a notification. For
 * `%gpu_restart` (`automatic`) it asks at once, only for output fresh from the running kernel.
 * The lines are the kernel's jupyter_gpu settings: its plan, and `%gpu_watch on` when it was on.
 *
 * Output is data, never code: only lines of jupyter_gpu's own magics with plain arguments are
 * ever run, only from trusted output (produced in this session, or a trusted notebook), and all
 * text is set with `textContent`. What is shown is what runs: every line (only an exact
 * `%load_ext jupyter_gpu` first line is left unsaid), no line that can block (`--wait`), and a
 * "Restarting…" that never answers gives up after `RESTART_TIMEOUT_MS`. Text from the kernel
 * (its plan, its errors) goes through `displayText`. Other frontends show the bundle's text/plain.
 */
import { Notification } from '@jupyterlab/apputils';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { confirmRestart } from './confirm';
import { el, markDone } from './dom';
import { displayText } from './format';
import { trans, useTranslator } from './i18n';

export const RESTART_MIME = 'application/vnd.jupyter-gpu.restart+json';

/** The only lines the renderer will run: jupyter_gpu's magics with plain arguments. */
export const ALLOWED_LINE =
  /^%(load_ext jupyter_gpu|gpu_select( [A-Za-z0-9_:.,%-]{1,64}){1,6}|gpu_limit( [A-Za-z0-9.%]{1,32}){1,16}|gpu_threads( [a-z0-9-]{1,20}){1,8}|gpu_watch on( --interval [0-9.]{1,8})?)$/;

/** The first line of every offer the kernel makes; the only line the renderer may leave unshown. */
export const LOAD_LINE = '%load_ext jupyter_gpu';

/**
 * `%gpu_select`'s options that return at once. Exact names only: argparse also takes a unique
 * prefix (`--w 168h` is `--wait 168h`), so a denylist of `--wait` would not do.
 */
const QUICK_SELECT_OPTIONS = new Set(['--growth', '--no-growth', '--min-free']);

/** How long "Restarting…" may last before the renderer gives up waiting for the new kernel. */
export const RESTART_TIMEOUT_MS = 120_000;

/** What the kernel asks for, validated. */
interface IRestartOffer {
  lines: string[];
  reason: string;
  automatic: boolean;
  kernelId: string | null;
  id: string;
}

/** The fields of an `execute_reply` (Jupyter messaging) that this renderer reads. */
export interface IExecuteReplyContent {
  status: string;
  ename?: string;
  evalue?: string;
  /** Each user expression's result: a display bundle when `status` is `ok`. */
  user_expressions?: Record<string, { status: string; data?: Record<string, unknown> }>;
}

interface IKernelLike {
  id: string;
  requestExecute(content: {
    code: string;
    silent: boolean;
    store_history: boolean;
    user_expressions: Record<string, string>;
  }): {
    done: Promise<{ content: IExecuteReplyContent }>;
    /** Called with each output message of the request (Jupyter's `IFuture.onIOPub`). */
    onIOPub?: (message: { header: { msg_type: string }; content: { text?: unknown } }) => void;
  };
}

export interface ISessionContextLike {
  session: { kernel: IKernelLike | null } | null;
  restartKernel(): Promise<void>;
}

/** Offers already acted on automatically in this page (a re-render must not restart again). */
const handled = new Set<string>();

/** Evaluated in the new kernel: the plan now in force, in one line (jupyter_gpu/kernel/restart_offer.py). */
export const SUMMARY =
  "__import__('jupyter_gpu.kernel.restart_offer', fromlist=['x']).applied_plan_summary()";

export function parseOffer(data: unknown): IRestartOffer | null {
  if (typeof data !== 'object' || data === null) {
    return null;
  }
  const raw = data as Record<string, unknown>;
  const lines = raw.lines;
  if (
    raw.version !== 1 ||
    !Array.isArray(lines) ||
    lines.length === 0 ||
    lines.length > 8 ||
    !lines.every(line => typeof line === 'string' && ALLOWED_LINE.test(line))
  ) {
    return null;
  }
  return {
    lines: lines as string[],
    reason: typeof raw.reason === 'string' ? raw.reason.slice(0, 300) : '',
    automatic: raw.automatic === true,
    kernelId: typeof raw.kernel_id === 'string' ? raw.kernel_id : null,
    id: typeof raw.id === 'string' ? raw.id.slice(0, 64) : ''
  };
}

/**
 * Why an offer (valid by `parseOffer`) is refused, in one line, or null. An offer runs before
 * anything else in the new kernel, behind a "Restarting…" button: a line that can block there
 * (`%gpu_select … --wait 168h`) would hold the kernel with nothing on screen saying why. The kernel
 * never offers one (`jupyter_gpu/kernel/restart_offer.py`); only forged or stale output can.
 */
export function refusal(offer: IRestartOffer): string | null {
  for (const line of offer.lines) {
    if (!line.startsWith('%gpu_select ')) {
      continue;
    }
    const blocking = line
      .split(' ')
      .slice(1)
      .find(word => word.startsWith('-') && !QUICK_SELECT_OPTIONS.has(word));
    if (blocking !== undefined) {
      return trans.__(
        'jupyter_gpu: this restart offer is refused: %1 in “%2” could keep the new kernel waiting; restart the kernel and run the line yourself.',
        blocking,
        line
      );
    }
  }
  return null;
}

/**
 * Every line that will run, as shown: the first may be left out only when it is exactly
 * `%load_ext jupyter_gpu` (loading the extension changes no plan); nothing else is ever hidden.
 */
export function shownPlan(lines: readonly string[]): string {
  const shown = lines[0] === LOAD_LINE ? lines.slice(1) : lines;
  return shown.length ? shown.join('; ') : trans.__('the kernel’s default plan');
}

/**
 * The plan the fresh kernel reports in the `plan` user expression of the silent execute's reply,
 * as text to show, or '' when it sent none (or nothing readable); throws when the lines failed.
 * The kernel's `applied_plan_summary()` answers a JSON string literal (its repr), so this is a
 * `JSON.parse`, not a guess at Python's quoting.
 */
export function appliedPlanText(content: IExecuteReplyContent): string {
  if (content.status !== 'ok') {
    const name = displayText(
      typeof content.ename === 'string' ? content.ename : null,
      trans.__('Error'),
      100
    );
    const value = displayText(typeof content.evalue === 'string' ? content.evalue : null, '', 300);
    throw new Error(value ? `${name}: ${value}` : name);
  }
  const summary = content.user_expressions?.plan;
  const plain = summary?.status === 'ok' ? summary.data?.['text/plain'] : undefined;
  if (typeof plain !== 'string') {
    return '';
  }
  let text: unknown;
  try {
    text = JSON.parse(plain);
  } catch {
    return ''; // an older kernel's Python repr: the plan was applied, its words are unknown
  }
  return typeof text === 'string' ? displayText(text, '', 300) : '';
}

/** `promise`, or a rejection with `message` after `ms` milliseconds. */
function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: number | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = window.setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => window.clearTimeout(timer));
}

/** The session context of the notebook (or console) that holds ``widget``. */
export function findSessionContext(widget: Widget): ISessionContextLike | null {
  let node: Widget | null = widget;
  while (node) {
    const context = (node as unknown as { sessionContext?: ISessionContextLike }).sessionContext;
    if (context && typeof context.restartKernel === 'function') {
      return context;
    }
    node = node.parent;
  }
  return null;
}

export class RestartRenderer extends Widget implements IRenderMime.IRenderer {
  /** `options.translator`: Lab's language (the renderer may be the first of the extension to run). */
  constructor(options?: Partial<IRenderMime.IRendererOptions>) {
    super();
    useTranslator(options?.translator);
    this.addClass('jp-GpuRestart');
  }

  /** How long "Restarting…" may last (`RESTART_TIMEOUT_MS`; tests shorten it). */
  timeoutMs = RESTART_TIMEOUT_MS;

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.node.textContent = '';
    const offer = parseOffer(model.data[RESTART_MIME]);
    const text = el('div', 'jp-GpuRestart-text');
    this.node.appendChild(text);
    if (offer === null) {
      text.textContent = trans.__('jupyter_gpu: this restart offer is malformed and is ignored.');
      return;
    }
    text.textContent = trans.__('GPU plan for a fresh kernel: %1', shownPlan(offer.lines));
    const refused = refusal(offer);
    if (refused !== null) {
      const note = el('div', 'jp-GpuRestart-note');
      note.textContent = refused;
      this.node.appendChild(note);
      return;
    }
    if (!model.trusted) {
      const note = el('div', 'jp-GpuRestart-note');
      note.textContent = trans.__('Untrusted output: restart the kernel and run these lines yourself.');
      this.node.appendChild(note);
      return;
    }
    const button = el('button', 'jp-Button jp-mod-styled jp-mod-accept jp-GpuRestart-button', {
      type: 'button',
      title: trans.__('Restart the kernel, then apply this GPU plan before anything else runs')
    });
    button.textContent = trans.__('Restart kernel and apply');
    button.addEventListener('click', () => void this.restartAndApply(offer, button));
    this.node.appendChild(button);
    if (offer.automatic && offer.id && !handled.has(offer.id)) {
      handled.add(offer.id);
      // After the output is attached, so the notebook holding it can be found.
      window.setTimeout(() => {
        const context = findSessionContext(this);
        if (context?.session?.kernel && context.session.kernel.id === offer.kernelId) {
          void this.restartAndApply(offer, button);
        }
      }, 0);
    }
  }

  private async restartAndApply(offer: IRestartOffer, button: HTMLButtonElement): Promise<void> {
    const context = findSessionContext(this);
    if (!context) {
      Notification.error(
        trans.__('jupyter_gpu: no kernel session holds this output; restart the kernel yourself.')
      );
      return;
    }
    button.disabled = true;
    if (!(await confirmRestart(shownPlan(offer.lines)))) {
      button.disabled = false;
      return;
    }
    button.textContent = trans.__('Restarting…');
    if (await restartAndRun(context, offer.lines, this.timeoutMs)) {
      markDone(button, trans.__('Restarted, plan applied'));
    } else {
      button.disabled = false;
      button.textContent = trans.__('Restart kernel and apply');
    }
  }
}

/**
 * Restarts the kernel of `context`, runs `lines` (validated by the caller: `parseOffer`) silently
 * before anything else, and says in a notification which plan the new kernel has; true when it
 * did. Gives up after `timeoutMs` with a message. Asks nothing: callers confirm first.
 */
export async function restartAndRun(
  context: ISessionContextLike,
  lines: readonly string[],
  timeoutMs: number = RESTART_TIMEOUT_MS
): Promise<boolean> {
  const seconds = Math.round(timeoutMs / 1000);
  try {
    const reply = await withTimeout(
      (async () => {
        await context.restartKernel();
        const kernel = context.session?.kernel;
        if (!kernel) {
          throw new Error(trans.__('the kernel did not come back after the restart'));
        }
        return kernel.requestExecute({
          code: lines.join('\n'),
          silent: true,
          store_history: false,
          user_expressions: { plan: SUMMARY }
        }).done;
      })(),
      timeoutMs,
      trans.__(
        'no answer from the new kernel within %1 s; it may still be busy with the plan’s lines (interrupt it, then check with %gpu_status)',
        seconds
      )
    );
    const words = appliedPlanText(reply.content);
    Notification.success(
      words
        ? trans.__('Kernel restarted; GPU plan applied: %1', words)
        : trans.__('Kernel restarted; GPU plan applied.'),
      { autoClose: 10000 }
    );
    return true;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    Notification.error(trans.__('jupyter_gpu: restart and apply failed: %1', displayText(message, '', 500)));
    return false;
  }
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true, // it renders text only; running the plan needs trusted output and allowed lines
  mimeTypes: [RESTART_MIME],
  defaultRank: 50,
  createRenderer: options => new RestartRenderer(options)
};

const extension: IRenderMime.IExtension = {
  id: 'jupyter-gpu:restart-renderer',
  description: 'Renders jupyter_gpu\'s "Restart kernel and apply" offer.',
  rendererFactory,
  rank: 50,
  dataType: 'json'
};

export default extension;
