/**
 * "Restart kernel and apply": the MIME renderer for jupyter_gpu's restart offer.
 *
 * When a GPU magic comes too late (`GPUAlreadyInitializedWarning`) or `%gpu_restart` runs, the
 * kernel displays `application/vnd.jupyter-gpu.restart+json`: the magic lines of the plan. This
 * renderer shows them with a button that restarts the kernel through the frontend's own session
 * API (the `sessionContext` of the notebook or console holding the output), runs the lines
 * silently in the new kernel before anything else, and confirms with a notification. For
 * `%gpu_restart` (`automatic`) it does so at once, only for output fresh from the running kernel.
 *
 * Output is data, never code: only lines of jupyter_gpu's own magics with plain arguments are
 * ever run, only from trusted output (produced in this session, or a trusted notebook), and all
 * text is set with `textContent`. Other frontends show the bundle's text/plain instead.
 */
import { Notification } from '@jupyterlab/apputils';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { el } from './dom';

export const RESTART_MIME = 'application/vnd.jupyter-gpu.restart+json';

/** The only lines the renderer will run: jupyter_gpu's magics with plain arguments. */
const ALLOWED_LINE =
  /^%(load_ext jupyter_gpu|gpu_select( [A-Za-z0-9_:.,%-]{1,64}){1,6}|gpu_limit( [A-Za-z0-9.%]{1,32}){1,16}|gpu_threads( [a-z0-9-]{1,20}){1,8})$/;

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
  user_expressions?: Record<string, { status: string; data: Record<string, unknown> }>;
}

interface IKernelLike {
  id: string;
  requestExecute(content: {
    code: string;
    silent: boolean;
    store_history: boolean;
    user_expressions: Record<string, string>;
  }): { done: Promise<{ content: IExecuteReplyContent }> };
}

interface ISessionContextLike {
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
 * The plan the fresh kernel reports in the `plan` user expression of the silent execute's reply
 * (its repr, outer quotes removed), or '' when it sent none; throws when the lines failed.
 */
export function appliedPlanText(content: IExecuteReplyContent): string {
  if (content.status !== 'ok') {
    throw new Error(`${content.ename}: ${content.evalue}`);
  }
  const summary = content.user_expressions?.plan;
  return summary?.status === 'ok' ? String(summary.data['text/plain']).replace(/^'|'$/g, '') : '';
}

/** The session context of the notebook (or console) that holds ``widget``. */
function findSessionContext(widget: Widget): ISessionContextLike | null {
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
  constructor() {
    super();
    this.addClass('jp-GpuRestart');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.node.textContent = '';
    const offer = parseOffer(model.data[RESTART_MIME]);
    const text = el('div', 'jp-GpuRestart-text');
    this.node.appendChild(text);
    if (offer === null) {
      text.textContent = 'jupyter_gpu: this restart offer is malformed and is ignored.';
      return;
    }
    const plan = offer.lines.slice(1).join('; ') || 'the kernel’s default plan';
    text.textContent = `GPU plan for a fresh kernel: ${plan}`;
    if (!model.trusted) {
      const note = el('div', 'jp-GpuRestart-note');
      note.textContent = 'Untrusted output: restart the kernel and run these lines yourself.';
      this.node.appendChild(note);
      return;
    }
    const button = el('button', 'jp-Button jp-mod-styled jp-mod-accept jp-GpuRestart-button', {
      type: 'button',
      title: 'Restart the kernel, then apply this GPU plan before anything else runs'
    });
    button.textContent = 'Restart kernel and apply';
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
      Notification.error('jupyter_gpu: no kernel session holds this output; restart the kernel yourself.');
      return;
    }
    button.disabled = true;
    button.textContent = 'Restarting…';
    try {
      await context.restartKernel();
      const kernel = context.session?.kernel;
      if (!kernel) {
        throw new Error('the kernel did not come back after the restart');
      }
      const reply = await kernel.requestExecute({
        code: offer.lines.join('\n'),
        silent: true,
        store_history: false,
        user_expressions: { plan: SUMMARY }
      }).done;
      const words = appliedPlanText(reply.content);
      Notification.success(`Kernel restarted; GPU plan applied: ${words}`, { autoClose: 10000 });
      button.textContent = 'Restarted, plan applied';
    } catch (error) {
      Notification.error(`jupyter_gpu: restart and apply failed: ${(error as Error).message}`);
      button.disabled = false;
      button.textContent = 'Restart kernel and apply';
    }
  }
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true, // it renders text only; running the plan needs trusted output and allowed lines
  mimeTypes: [RESTART_MIME],
  defaultRank: 50,
  createRenderer: () => new RestartRenderer()
};

const extension: IRenderMime.IExtension = {
  id: 'jupyter-gpu:restart-renderer',
  description: 'Renders jupyter_gpu\'s "Restart kernel and apply" offer.',
  rendererFactory,
  rank: 50,
  dataType: 'json'
};

export default extension;
