// @vitest-environment jsdom
import { beforeEach, describe, expect, it, vi } from 'vitest';

vi.hoisted(() => {
  if (!('DragEvent' in globalThis)) {
    Object.assign(globalThis, { DragEvent: class DragEvent extends MouseEvent {} });
  }
});
// Spies for what the renderer calls: the dialogs answer "go ahead" unless a test says otherwise.
vi.mock('@jupyterlab/apputils', () => ({
  Notification: { error: vi.fn(), success: vi.fn() },
  Dialog: { cancelButton: () => ({ accept: false }), warnButton: (o: object) => ({ ...o, accept: true }) },
  showDialog: vi.fn(() => Promise.resolve({ button: { accept: true }, isChecked: false }))
}));
vi.mock('@jupyterlab/services', () => ({
  KernelAPI: {
    shutdownKernel: vi.fn(() => Promise.resolve()),
    // The kernel the report offers to shut down still runs (tests say otherwise where they need to).
    listRunning: vi.fn(() => Promise.resolve([{ id: 'aaaaaaaa-1111-2222-3333-444444444444' }]))
  }
}));

import { Notification, showDialog } from '@jupyterlab/apputils';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { KernelAPI } from '@jupyterlab/services';
import { Panel } from '@lumino/widgets';

import { restartConfirmation } from '../confirm';
import { actionLabel, codeParts, freedText, OOM_MIME, OomRenderer, parseOomOffer } from '../oom';

const GIB = 1024 ** 3;
const OTHER = 'aaaaaaaa-1111-2222-3333-444444444444';
const OWN = 'bbbbbbbb-1111-2222-3333-444444444444';
const REPORT =
  'jupyter_gpu: PyTorch cuda:0 ran out of GPU memory; it tried to allocate 2 GiB.\n' +
  'Next steps:\n' +
  '  - `%gpu_free` may return 5 GiB held by this kernel’s cache\n' +
  '  - your idle kernel `train_old.ipynb` holds 22 GiB on GPU 1';
const ACTIONS = [
  { kind: 'shutdown', kernel_id: OTHER, label: 'train_old.ipynb', memory: 22 * GIB, gpu: 1, idle_s: 3600 },
  { kind: 'restart', gpu: 2, lines: ['%load_ext jupyter_gpu', '%gpu_select 2 --growth', '%gpu_watch on'] },
  { kind: 'free', memory: 5 * GIB }
];
const OFFER = { version: 1, report: REPORT, actions: ACTIONS, kernel_id: OWN };

function mimeModel(data: unknown, trusted = true): IRenderMime.IMimeModel {
  return {
    trusted,
    data: { [OOM_MIME]: data, 'text/plain': 'plain' },
    metadata: {},
    setData: () => undefined
  } as never;
}

function holder() {
  const execute = vi.fn((content: { code: string }) => {
    const future: { done: Promise<unknown>; onIOPub?: (m: unknown) => void } = {
      done: Promise.resolve().then(() => {
        if (content.code === '%gpu_free') {
          future.onIOPub?.({
            header: { msg_type: 'stream' },
            content: { text: 'jupyter_gpu: returned 5 GiB\n' }
          });
        }
        return { content: { status: 'ok', user_expressions: {} } };
      })
    };
    return future;
  });
  const kernel = { id: OWN, requestExecute: execute };
  const context = { session: { kernel }, restartKernel: vi.fn(() => Promise.resolve()) };
  const panel = new Panel();
  Object.assign(panel, { sessionContext: context });
  return { panel, context, kernel };
}

async function rendered(data: unknown = OFFER, trusted = true) {
  const { panel, context, kernel } = holder();
  const renderer = new OomRenderer();
  panel.addWidget(renderer);
  await renderer.renderModel(mimeModel(data, trusted));
  const buttons = Array.from(renderer.node.querySelectorAll('button'));
  return { renderer, context, kernel, buttons };
}

describe('parseOomOffer', () => {
  it('reads the kernel’s offer', () => {
    const offer = parseOomOffer(OFFER);
    expect(offer?.actions.map(a => a.kind)).toEqual(['shutdown', 'restart', 'free']);
    expect(offer?.actions[0]).toEqual({
      kind: 'shutdown',
      kernelId: OTHER,
      label: 'train_old.ipynb',
      memory: 22 * GIB,
      gpu: 1,
      idleS: 3600
    });
  });

  it('is null for what is not an offer, and leaves malformed or forged actions out', () => {
    expect(parseOomOffer(null)).toBeNull();
    expect(parseOomOffer({ version: 2, report: 'x' })).toBeNull();
    expect(parseOomOffer({ version: 1, report: 7 })).toBeNull();
    const forged = [
      { ...ACTIONS[0], kernel_id: '../../api/sessions' },
      { ...ACTIONS[0], kernel_id: OWN }, // this kernel itself: never offered
      { ...ACTIONS[0], gpu: -1 },
      { ...ACTIONS[0], memory: 'lots' },
      { kind: 'restart', gpu: 2, lines: ['%load_ext jupyter_gpu', "import os; os.system('x')"] },
      { kind: 'restart', gpu: 2, lines: ['%gpu_select 2 --wait 168h'] },
      { kind: 'free', memory: Number.NaN },
      {
        kind: 'raise_limit',
        gpu: 2,
        limit: '16GiB',
        lines: ['%gpu_select 2', '%gpu_limit 16GiB', 'print(1)']
      },
      { kind: 'raise_limit', gpu: 2, limit: '16GiB', lines: ['%gpu_select 2 --wait 1h', '%gpu_limit 16GiB'] },
      { kind: 'raise_limit', gpu: 2, limit: '<b>16</b>', lines: ['%gpu_limit 16GiB'] },
      { kind: 'raise_limit', gpu: 2, limit: '64GiB', lines: ['%gpu_limit 16GiB'] }, // label ≠ the line
      { kind: 'raise_limit', gpu: -1, limit: '16GiB', lines: ['%gpu_limit 16GiB'] },
      { kind: 'eval', code: 'x' },
      null
    ];
    expect(parseOomOffer({ ...OFFER, actions: forged })?.actions).toEqual([]);
    expect(parseOomOffer({ ...OFFER, actions: Array(20).fill(ACTIONS[2]) })?.actions).toHaveLength(8);
  });
});

const RAISE = {
  kind: 'raise_limit',
  gpu: 2,
  limit: '16GiB',
  lines: ['%load_ext jupyter_gpu', '%gpu_select 2', '%gpu_limit 16GiB']
};
const CAPPED = {
  version: 1,
  report: 'jupyter_gpu: the limit ran out, not the GPU',
  actions: [RAISE],
  kernel_id: OWN
};

describe('the "raise the limit" button', () => {
  beforeEach(() => {
    vi.mocked(showDialog).mockClear();
    restartConfirmation.ask = true;
  });

  it('reads the action and names the new limit', () => {
    const offer = parseOomOffer(CAPPED);
    expect(offer?.actions).toEqual([{ kind: 'raise_limit', gpu: 2, limit: '16GiB', lines: RAISE.lines }]);
    expect(actionLabel(offer!.actions[0])).toBe('Restart with %gpu_limit 16GiB');
    // No GPU could be told (the limit applies to every GPU): still offered.
    expect(parseOomOffer({ ...CAPPED, actions: [{ ...RAISE, gpu: null }] })?.actions[0]).toMatchObject({
      gpu: null
    });
  });

  it('restarts with the raised limit, after the restart question', async () => {
    const { buttons, context, kernel } = await rendered(CAPPED);
    expect(buttons.map(b => b.textContent)).toEqual(['Restart with %gpu_limit 16GiB']);
    vi.mocked(showDialog).mockResolvedValueOnce({ button: { accept: false }, isChecked: null } as never);
    buttons[0].click();
    await vi.waitFor(() => expect(buttons[0].disabled).toBe(false));
    expect(context.restartKernel).not.toHaveBeenCalled(); // Cancel
    buttons[0].click();
    await vi.waitFor(() => expect(context.restartKernel).toHaveBeenCalledTimes(1));
    const asked = vi.mocked(showDialog).mock.calls[1][0] ?? {};
    expect(asked.title).toBe('Restart the kernel with a limit of 16GiB on GPU 2?');
    expect(asked.body).toContain('%gpu_select 2; %gpu_limit 16GiB');
    await vi.waitFor(() => expect(kernel.requestExecute).toHaveBeenCalled());
    expect(kernel.requestExecute.mock.calls[0][0]).toMatchObject({
      code: '%load_ext jupyter_gpu\n%gpu_select 2\n%gpu_limit 16GiB',
      silent: true
    });
    // Done: it says what was done and no longer looks like a step to take.
    await vi.waitFor(() => expect(buttons[0].textContent).toBe('✓ Restarted with %gpu_limit 16GiB'));
    expect(buttons[0].disabled).toBe(true);
    expect(buttons[0].classList.contains('jp-mod-done')).toBe(true);
  });

  it('offers no button for untrusted output', async () => {
    const { buttons } = await rendered(CAPPED, false);
    expect(buttons).toHaveLength(0);
  });
});

describe('the report as text', () => {
  it('turns backticked parts into code', () => {
    expect(codeParts('run `%gpu_free` now')).toEqual([
      { text: 'run ', code: false },
      { text: '%gpu_free', code: true },
      { text: ' now', code: false }
    ]);
    expect(codeParts('an odd ` backtick')).toEqual([{ text: 'an odd ` backtick', code: false }]);
  });

  it('shows no literal backticks, and HTML from the data as text', async () => {
    const { renderer } = await rendered({ ...OFFER, report: 'x `<img src=x onerror=alert(1)>` y' });
    expect(renderer.node.querySelector('img')).toBeNull();
    expect(renderer.node.querySelector('code')?.textContent).toBe('<img src=x onerror=alert(1)>');
    const { renderer: full } = await rendered();
    expect(full.node.querySelector('.jp-GpuOom-report')?.textContent).not.toContain('`');
    expect(Array.from(full.node.querySelectorAll('code')).map(c => c.textContent)).toEqual([
      '%gpu_free',
      'train_old.ipynb'
    ]);
  });

  it('labels each button with what it does', () => {
    const actions = parseOomOffer(OFFER)?.actions ?? [];
    expect(actions.map(actionLabel)).toEqual([
      'Shut down train_old.ipynb (idle 1 h, holds 22 GiB on GPU 1)',
      'Restart on GPU 2 with growth',
      'Free memory (5 GiB of cache)'
    ]);
    expect(freedText('')).toBe('jupyter_gpu: %gpu_free ran.');
  });

  it('puts the freed figure first in the notification (it is cut after about 100 characters)', () => {
    const report =
      'Dropped: the output cache (12 entries: Out, _1 … _12, _, __); the last error’s traceback ' +
      '(OutOfMemoryError, 14 frames and their locals).\n' +
      'gc.collect(): 5210 objects.\n' +
      'PyTorch: torch.cuda.empty_cache(): returned the cache to the GPU.\n' +
      'GPU 0 (A100-SXM4-80GB): this kernel 6 GiB → 1 GiB (NVML)\n';
    const text = freedText(report);
    expect(text.startsWith('GPU 0: this kernel 6 GiB → 1 GiB · Dropped: the output cache')).toBe(true);
  });

  it('offers no buttons for untrusted output', async () => {
    const { renderer, buttons } = await rendered(OFFER, false);
    expect(buttons).toHaveLength(0);
    expect(renderer.node.querySelector('.jp-GpuOom-note')?.textContent).toContain('Untrusted output');
  });
});

describe('the buttons', () => {
  beforeEach(() => {
    vi.mocked(showDialog).mockClear();
    vi.mocked(KernelAPI.shutdownKernel).mockClear();
    vi.mocked(Notification.success).mockClear();
    vi.mocked(Notification.error).mockClear();
    restartConfirmation.ask = true;
  });

  it('shuts the other kernel down through Jupyter’s kernel API, after asking', async () => {
    const { buttons } = await rendered();
    vi.mocked(showDialog).mockResolvedValueOnce({ button: { accept: false }, isChecked: null } as never);
    buttons[0].click();
    await vi.waitFor(() => expect(buttons[0].disabled).toBe(false));
    expect(KernelAPI.shutdownKernel).not.toHaveBeenCalled(); // Cancel
    buttons[0].click();
    await vi.waitFor(() => expect(KernelAPI.shutdownKernel).toHaveBeenCalledWith(OTHER));
    expect(vi.mocked(showDialog).mock.calls[1][0]?.body).toContain('loses the variables');
    await vi.waitFor(() => expect(buttons[0].disabled).toBe(true));
    // Done: it says so and no longer looks like a button to press.
    expect(buttons[0].textContent).toBe('✓ Shut down train_old.ipynb');
    expect(buttons[0].classList.contains('jp-mod-done')).toBe(true);
  });

  it('disables a shutdown button whose kernel no longer runs, and says why', async () => {
    vi.mocked(KernelAPI.listRunning).mockResolvedValueOnce([]);
    const { buttons } = await rendered();
    expect(buttons[0].disabled).toBe(true);
    expect(buttons[0].textContent).toContain('— that kernel no longer runs');
    expect(buttons[1].disabled).toBe(false);
  });

  it('disables the button when the kernel went while the user was asked', async () => {
    const { buttons } = await rendered();
    vi.mocked(KernelAPI.shutdownKernel).mockRejectedValueOnce(new Error('Kernel does not exist'));
    vi.mocked(KernelAPI.listRunning).mockResolvedValueOnce([]);
    buttons[0].click();
    await vi.waitFor(() => expect(buttons[0].textContent).toContain('— that kernel no longer runs'));
    expect(buttons[0].disabled).toBe(true);
    expect(Notification.error).not.toHaveBeenCalled();
  });

  it('restarts on the other GPU with the offered lines, after the restart question', async () => {
    const { buttons, context, kernel } = await rendered();
    buttons[1].click();
    await vi.waitFor(() => expect(context.restartKernel).toHaveBeenCalledTimes(1));
    const asked = vi.mocked(showDialog).mock.calls[0][0] ?? {};
    expect(asked.title).toBe('Restart the kernel on GPU 2?');
    expect(asked.body).toContain('%gpu_select 2 --growth; %gpu_watch on');
    await vi.waitFor(() => expect(kernel.requestExecute).toHaveBeenCalled());
    expect(kernel.requestExecute.mock.calls[0][0]).toMatchObject({
      code: '%load_ext jupyter_gpu\n%gpu_select 2 --growth\n%gpu_watch on',
      silent: true
    });
    await vi.waitFor(() => expect(buttons[1].textContent).toBe('✓ Restarted on GPU 2 with growth'));
    expect(buttons[1].classList.contains('jp-mod-done')).toBe(true);
  });

  it('runs %gpu_free in the notebook’s kernel and says what it returned', async () => {
    const { buttons, kernel, context } = await rendered();
    buttons[2].click();
    await vi.waitFor(() =>
      expect(Notification.success).toHaveBeenCalledWith('jupyter_gpu: returned 5 GiB', { autoClose: 10000 })
    );
    expect(kernel.requestExecute.mock.calls[0][0]).toMatchObject({ code: '%gpu_free', store_history: false });
    expect(context.restartKernel).not.toHaveBeenCalled();
  });

  it('says so when a shutdown fails, and lets the user try again', async () => {
    const { buttons } = await rendered();
    vi.mocked(KernelAPI.shutdownKernel).mockRejectedValueOnce(new Error('Kernel does not exist'));
    buttons[0].click();
    await vi.waitFor(() => expect(Notification.error).toHaveBeenCalled());
    expect(vi.mocked(Notification.error).mock.calls[0][0]).toContain('Kernel does not exist');
    expect(buttons[0].disabled).toBe(false);
  });
});
