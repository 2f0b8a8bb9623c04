/**
 * The out-of-memory report with its next steps as buttons: the MIME renderer for
 * `application/vnd.jupyter-gpu.oom+json` (jupyter_gpu/kernel/oom_offer.py).
 *
 * The report's text is shown as text, code (what the kernel writes between backticks) in `<code>`
 * elements, all through `textContent`. Its next steps become buttons, each confirmed first:
 * - "Shut down <notebook> (idle, holds X on GPU n)": Jupyter's kernel API of this server (the
 *   page's own authentication), so only this server's, this user's, kernels can be shut down;
 * - "Restart with %gpu_limit 16GiB": when this kernel's own cap ran out, the same restart flow
 *   with the raised limit (the action `raise_limit`; its lines are the new plan's);
 * - "Restart on GPU k with growth": the restart offer's flow (`restartAndRun`), with its question
 *   (`confirmRestart`: what is lost, the new plan) and its allowed lines only (`parseOffer`);
 * - "Free memory": `%gpu_free`, run in the notebook's kernel, its report in a notification.
 * The trust rules are the restart offer's: no buttons for untrusted output (a notebook from
 * elsewhere), nothing from the data is ever run but allowed magic lines, and malformed actions
 * are left out. Other frontends show the bundle's text/plain.
 */
import { Notification } from '@jupyterlab/apputils';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { KernelAPI } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { confirmAction, confirmRestart } from './confirm';
import { el, markDone, markGone } from './dom';
import { displayText, formatBytes, formatDuration } from './format';
import { trans, useTranslator } from './i18n';
import { findSessionContext, parseOffer, refusal, restartAndRun, shownPlan } from './restart';

export const OOM_MIME = 'application/vnd.jupyter-gpu.oom+json';

/** A size as `%gpu_limit` takes it (`16GiB`, `2048`, `1.5G`, `30%`): nothing else goes into a label. */
const LIMIT = /^[0-9]{1,12}(?:\.[0-9]{1,6})?(?:[KMGT]?i?B|[KMGT]|%)?$/i;

/** A kernel id as Jupyter makes them (a UUID): nothing else goes into a kernel API URL. */
const KERNEL_ID = /^[A-Za-z0-9-]{1,64}$/;

export type OomAction =
  | { kind: 'shutdown'; kernelId: string; label: string; memory: number; gpu: number; idleS: number | null }
  | { kind: 'restart'; gpu: number; lines: string[] }
  | { kind: 'raise_limit'; gpu: number | null; limit: string; lines: string[] }
  | { kind: 'free'; memory: number };

export interface IOomOffer {
  report: string;
  actions: OomAction[];
  kernelId: string | null;
}

function gpuIndex(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value < 4096;
}

function bytes(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}

function parseAction(raw: unknown, ownKernel: string | null): OomAction | null {
  if (typeof raw !== 'object' || raw === null) {
    return null;
  }
  const a = raw as Record<string, unknown>;
  if (a.kind === 'shutdown') {
    if (typeof a.kernel_id !== 'string' || !KERNEL_ID.test(a.kernel_id) || a.kernel_id === ownKernel) {
      return null;
    }
    if (typeof a.label !== 'string' || !bytes(a.memory) || !gpuIndex(a.gpu)) {
      return null;
    }
    const idleS =
      typeof a.idle_s === 'number' && Number.isFinite(a.idle_s) && a.idle_s >= 0 ? a.idle_s : null;
    return {
      kind: 'shutdown',
      kernelId: a.kernel_id,
      label: displayText(a.label, '', 60),
      memory: a.memory,
      gpu: a.gpu,
      idleS
    };
  }
  if (a.kind === 'restart') {
    const offer = parseOffer({ version: 1, lines: a.lines });
    if (!gpuIndex(a.gpu) || offer === null || refusal(offer) !== null) {
      return null;
    }
    return { kind: 'restart', gpu: a.gpu, lines: offer.lines };
  }
  if (a.kind === 'raise_limit') {
    const offer = parseOffer({ version: 1, lines: a.lines });
    const gpu = a.gpu === null || a.gpu === undefined ? null : a.gpu;
    if (gpu !== null && !gpuIndex(gpu)) {
      return null;
    }
    if (typeof a.limit !== 'string' || !LIMIT.test(a.limit) || offer === null || refusal(offer) !== null) {
      return null;
    }
    // The label names the limit the lines set: a `%gpu_limit` line with it must be among them.
    const limit = a.limit;
    if (!offer.lines.some(line => /^%gpu_limit\s/.test(line) && line.split(/\s+/).includes(limit))) {
      return null;
    }
    return { kind: 'raise_limit', gpu, limit, lines: offer.lines };
  }
  if (a.kind === 'free' && bytes(a.memory)) {
    return { kind: 'free', memory: a.memory };
  }
  return null;
}

/** The offer, validated: null when it is not one; malformed actions are left out (at most 8). */
export function parseOomOffer(data: unknown): IOomOffer | null {
  if (typeof data !== 'object' || data === null) {
    return null;
  }
  const raw = data as Record<string, unknown>;
  if (raw.version !== 1 || typeof raw.report !== 'string') {
    return null;
  }
  const kernelId = typeof raw.kernel_id === 'string' ? raw.kernel_id : null;
  const actions = Array.isArray(raw.actions) ? raw.actions.slice(0, 8) : [];
  return {
    report: raw.report.slice(0, 20_000),
    actions: actions.map(a => parseAction(a, kernelId)).filter((a): a is OomAction => a !== null),
    kernelId
  };
}

/** A line of the report as text and code parts: what stands between backticks is code. */
export function codeParts(line: string): { text: string; code: boolean }[] {
  const parts = line.split('`');
  if (parts.length % 2 === 0) {
    return [{ text: line, code: false }]; // an odd backtick: no code, the line as it is
  }
  return parts.map((text, i) => ({ text, code: i % 2 === 1 })).filter(part => part.text !== '');
}

/** A button's words for an action. */
export function actionLabel(action: OomAction): string {
  switch (action.kind) {
    case 'shutdown': {
      return action.idleS !== null && action.idleS > 0
        ? trans.__(
            'Shut down %1 (idle %2, holds %3 on GPU %4)',
            action.label,
            formatDuration(action.idleS),
            formatBytes(action.memory),
            action.gpu
          )
        : trans.__('Shut down %1 (holds %2 on GPU %3)', action.label, formatBytes(action.memory), action.gpu);
    }
    case 'restart':
      return trans.__('Restart on GPU %1 with growth', action.gpu);
    case 'raise_limit':
      return trans.__('Restart with %gpu_limit %1', action.limit);
    case 'free':
      return trans.__('Free memory (%1 of cache)', formatBytes(action.memory));
  }
}

/** A finished button's words (after its ✓): what was done, so that it no longer reads as a step to take. */
export function doneLabel(action: OomAction): string {
  switch (action.kind) {
    case 'shutdown':
      return trans.__('Shut down %1', action.label);
    case 'restart':
      return trans.__('Restarted on GPU %1 with growth', action.gpu);
    case 'raise_limit':
      return trans.__('Restarted with %gpu_limit %1', action.limit);
    case 'free':
      return trans.__('Freed');
  }
}

/** A line of `%gpu_free`'s report with the figure: `GPU 0 (A100): this kernel 6 GiB → 1 GiB (NVML)`. */
const FIGURE = /^GPU (\d+)(?: \([^)]*\))?: (this kernel .+?)(?: \(NVML\))?$/;

/**
 * The text of the notification after `%gpu_free`: the figure first (`GPU 0: this kernel 6 GiB →
 * 1 GiB`, a notification is cut after about a hundred characters), then the report's first lines,
 * neutralized and bounded.
 */
export function freedText(output: string): string {
  const lines = output
    .trim()
    .split('\n')
    .map(line => line.trim())
    .filter(line => line !== '');
  const figures: string[] = [];
  const rest: string[] = [];
  for (const line of lines) {
    const match = FIGURE.exec(line);
    if (match) {
      figures.push(`GPU ${match[1]}: ${match[2]}`);
    } else {
      rest.push(line);
    }
  }
  const text = displayText([...figures, ...rest.slice(0, 3)].join(' · '), '', 300);
  return text || trans.__('jupyter_gpu: %gpu_free ran.');
}

export class OomRenderer extends Widget implements IRenderMime.IRenderer {
  /** `options.translator`: Lab's language (the renderer may be the first of the extension to run). */
  constructor(options?: Partial<IRenderMime.IRendererOptions>) {
    super();
    useTranslator(options?.translator);
    this.addClass('jp-GpuOom');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.node.textContent = '';
    const offer = parseOomOffer(model.data[OOM_MIME]);
    const report = el('div', 'jp-GpuOom-report');
    this.node.appendChild(report);
    if (offer === null) {
      const plain = model.data['text/plain'];
      report.textContent =
        typeof plain === 'string' ? plain : trans.__('jupyter_gpu: this out-of-memory report is malformed.');
      return;
    }
    for (const line of offer.report.split('\n')) {
      const row = el('div', 'jp-GpuOom-line');
      for (const part of codeParts(line)) {
        if (part.code) {
          const code = el('code');
          code.textContent = part.text;
          row.appendChild(code);
        } else {
          row.appendChild(document.createTextNode(part.text));
        }
      }
      report.appendChild(row);
    }
    if (!offer.actions.length) {
      return;
    }
    if (!model.trusted) {
      const note = el('div', 'jp-GpuOom-note');
      note.textContent = trans.__('Untrusted output: the next steps are shown as text only.');
      this.node.appendChild(note);
      return;
    }
    const bar = el('div', 'jp-GpuOom-actions');
    const shutdowns: [string, HTMLButtonElement][] = [];
    for (const action of offer.actions) {
      const button = el('button', 'jp-Button jp-mod-styled jp-GpuOom-button', { type: 'button' });
      button.textContent = actionLabel(action);
      button.addEventListener('click', () => void this.act(action, button));
      bar.appendChild(button);
      if (action.kind === 'shutdown') {
        shutdowns.push([action.kernelId, button]);
      }
    }
    this.node.appendChild(bar);
    // A report read later (the notebook reopened): the kernels it offers to shut down may be gone.
    if (shutdowns.length) {
      await markGoneKernels(shutdowns);
    }
  }

  private async act(action: OomAction, button: HTMLButtonElement): Promise<void> {
    button.disabled = true;
    try {
      const done = await this.run(action);
      if (done && action.kind !== 'free') {
        markDone(button, doneLabel(action));
      } else {
        button.disabled = done;
      }
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (action.kind === 'shutdown' && (await kernelGone(action.kernelId))) {
        markGone(button, trans.__('that kernel no longer runs'));
        return;
      }
      if (action.kind !== 'shutdown' && !findSessionContext(this)?.session?.kernel) {
        markGone(button, trans.__('this notebook has no kernel now'));
        return;
      }
      Notification.error(
        trans.__('jupyter_gpu: %1 failed: %2', actionLabel(action), displayText(message, '', 300))
      );
      button.disabled = false;
    }
  }

  /** Asks, then does `action`; true when it was done. */
  private async run(action: OomAction): Promise<boolean> {
    if (action.kind === 'shutdown') {
      const ok = await confirmAction(
        trans.__('Shut down kernel?'),
        trans.__(
          'The kernel of %1 holds %2 on GPU %3. Shutting it down frees that memory and loses the variables of that notebook.',
          action.label,
          formatBytes(action.memory),
          action.gpu
        ),
        trans.__('Shut Down')
      );
      if (!ok) {
        return false;
      }
      await KernelAPI.shutdownKernel(action.kernelId);
      Notification.success(trans.__('Kernel of %1 shut down.', action.label), { autoClose: 5000 });
      return true;
    }
    const context = findSessionContext(this);
    if (!context?.session?.kernel) {
      throw new Error(trans.__('no kernel session holds this output'));
    }
    if (action.kind === 'restart') {
      if (
        !(await confirmRestart(
          shownPlan(action.lines),
          trans.__('Restart the kernel on GPU %1?', action.gpu)
        ))
      ) {
        return false;
      }
      return restartAndRun(context, action.lines);
    }
    if (action.kind === 'raise_limit') {
      const question =
        action.gpu === null
          ? trans.__('Restart the kernel with a limit of %1?', action.limit)
          : trans.__('Restart the kernel with a limit of %1 on GPU %2?', action.limit, action.gpu);
      if (!(await confirmRestart(shownPlan(action.lines), question))) {
        return false;
      }
      return restartAndRun(context, action.lines);
    }
    const ok = await confirmAction(
      trans.__('Free GPU memory?'),
      trans.__(
        'Runs %gpu_free in this notebook’s kernel: the framework returns its unused cache to the GPU, and only the output entries IPython itself made are dropped. Your variables stay.'
      ),
      trans._p('button: free GPU memory', 'Free')
    );
    if (!ok) {
      return false;
    }
    const future = context.session.kernel.requestExecute({
      code: '%gpu_free',
      silent: false,
      store_history: false,
      user_expressions: {}
    });
    let output = '';
    future.onIOPub = (message: { header: { msg_type: string }; content: { text?: unknown } }) => {
      if (message.header.msg_type === 'stream' && typeof message.content.text === 'string') {
        output += message.content.text;
      }
    };
    const reply = await future.done;
    if (reply.content.status !== 'ok') {
      throw new Error(displayText(reply.content.evalue ?? reply.content.ename ?? 'error', '', 300));
    }
    Notification.success(freedText(output), { autoClose: 10000 });
    return false; // it may be worth running again later
  }
}

/** The ids of this server's running kernels, or null when they cannot be listed. */
async function runningKernels(): Promise<Set<string> | null> {
  try {
    return new Set((await KernelAPI.listRunning()).map(k => k.id));
  } catch {
    return null;
  }
}

/** Whether the kernel `kernelId` no longer runs on this server (false when that cannot be told). */
async function kernelGone(kernelId: string): Promise<boolean> {
  const running = await runningKernels();
  return running !== null && !running.has(kernelId);
}

/** Disables the shutdown buttons of kernels that no longer run, saying so. */
async function markGoneKernels(buttons: readonly [string, HTMLButtonElement][]): Promise<void> {
  const running = await runningKernels();
  if (running === null) {
    return;
  }
  for (const [kernelId, button] of buttons) {
    if (!running.has(kernelId)) {
      markGone(button, trans.__('that kernel no longer runs'));
    }
  }
}

export const oomRendererFactory: IRenderMime.IRendererFactory = {
  safe: true, // text only; the buttons need trusted output, and each asks first
  mimeTypes: [OOM_MIME],
  defaultRank: 50,
  createRenderer: options => new OomRenderer(options)
};

export const oomExtension: IRenderMime.IExtension = {
  id: 'jupyter-gpu:oom-renderer',
  description: 'Renders jupyter_gpu’s out-of-memory report with its next steps as buttons.',
  rendererFactory: oomRendererFactory,
  rank: 50,
  dataType: 'json'
};
