// @vitest-environment jsdom
import { beforeEach, describe, expect, it, vi } from 'vitest';

// jsdom has no DragEvent, which @lumino/dragdrop (imported through @lumino/widgets) subclasses at
// load time; JupyterLab's own test setup polyfills it the same way.
vi.hoisted(() => {
  if (!('DragEvent' in globalThis)) {
    Object.assign(globalThis, { DragEvent: class DragEvent extends MouseEvent {} });
  }
});
// The renderer only calls Notification.error/success and showDialog (the confirmation): spies
// instead of all of @jupyterlab/apputils. The dialog answers "Restart" unless a test says otherwise.
vi.mock('@jupyterlab/apputils', () => ({
  Notification: { error: vi.fn(), success: vi.fn() },
  Dialog: { cancelButton: () => ({ accept: false }), warnButton: (o: object) => ({ ...o, accept: true }) },
  showDialog: vi.fn(() => Promise.resolve({ button: { accept: true }, isChecked: false }))
}));

import { Notification, showDialog } from '@jupyterlab/apputils';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Panel } from '@lumino/widgets';

import {
  appliedPlanText,
  type IExecuteReplyContent,
  parseOffer,
  refusal,
  RESTART_MIME,
  RestartRenderer,
  shownPlan
} from '../restart';
import { restartConfirmation, restartQuestion } from '../confirm';

const LOAD = '%load_ext jupyter_gpu';

describe('parseOffer', () => {
  it('accepts what the kernel sends and fills the optional fields', () => {
    expect(parseOffer({ version: 1, lines: [LOAD, '%gpu_select 1 --growth'] })).toEqual({
      lines: [LOAD, '%gpu_select 1 --growth'],
      reason: '',
      automatic: false,
      kernelId: null,
      id: ''
    });
    expect(
      parseOffer({
        version: 1,
        lines: [LOAD, '%gpu_select auto:2 --min-free 8GiB', '%gpu_limit 2GiB 30%', '%gpu_threads 4 2'],
        reason: 'GPU already initialised',
        automatic: true,
        kernel_id: 'k-1',
        id: 'offer-1'
      })
    ).toEqual({
      lines: [LOAD, '%gpu_select auto:2 --min-free 8GiB', '%gpu_limit 2GiB 30%', '%gpu_threads 4 2'],
      reason: 'GPU already initialised',
      automatic: true,
      kernelId: 'k-1',
      id: 'offer-1'
    });
  });

  it.each([null, undefined, 'offer', 42, true, [], [LOAD]])('rejects %j', data => {
    expect(parseOffer(data)).toBeNull();
  });

  it.each([
    ['no version', { lines: [LOAD] }],
    ['version as text', { version: '1', lines: [LOAD] }],
    ['a newer version', { version: 2, lines: [LOAD] }],
    ['lines not a list', { version: 1, lines: LOAD }],
    ['no lines', { version: 1, lines: [] }],
    ['nine lines', { version: 1, lines: Array(9).fill(LOAD) }],
    ['a non-string line', { version: 1, lines: [LOAD, 7] }]
  ])('rejects an offer with %s', (_, data) => {
    expect(parseOffer(data)).toBeNull();
  });

  it('accepts up to eight lines', () => {
    expect(parseOffer({ version: 1, lines: Array(8).fill(LOAD) })?.lines).toHaveLength(8);
  });

  // Output is data: a line the renderer would run must be one of jupyter_gpu's own magics.
  it.each([
    'import os',
    '!rm -rf ~',
    '%%bash',
    '%run evil.py',
    '%gpu_select',
    '%gpu_select 0; import os',
    '%gpu_select 0\nimport os',
    '%gpu_select 0\n',
    '%gpu_select 0 $(reboot)',
    "%gpu_select 0 {__import__('os')}",
    '%gpu_select 0 a b c d e f',
    '%gpu_select ' + '1'.repeat(65),
    '%gpu_select ０',
    '%gpu_select 0\u202e',
    ' %gpu_select 0',
    '%load_ext jupyter_gpu_evil',
    '%load_ext jupyter_gpu ',
    '%load_ext os',
    '%gpu_limit 4GiB --x',
    '%gpu_threads Intra'
  ])('rejects the line %j', line => {
    expect(parseOffer({ version: 1, lines: [LOAD, line] })).toBeNull();
  });

  it('bounds and type-checks the text fields', () => {
    const offer = parseOffer({
      version: 1,
      lines: [LOAD],
      reason: 'r'.repeat(1000),
      automatic: 'true',
      kernel_id: 12,
      id: 'i'.repeat(100)
    });
    expect(offer?.reason).toHaveLength(300);
    expect(offer?.automatic).toBe(false);
    expect(offer?.kernelId).toBeNull();
    expect(offer?.id).toHaveLength(64);
    expect(parseOffer({ version: 1, lines: [LOAD], reason: { text: 'x' } })?.reason).toBe('');
  });
});

describe('appliedPlanText', () => {
  const reply = (plain: unknown): IExecuteReplyContent => ({
    status: 'ok',
    user_expressions: { plan: { status: 'ok', data: { 'text/plain': plain } } }
  });

  it('reads the plan the kernel answers as a JSON string', () => {
    expect(appliedPlanText(reply('"GPU 1 · growth"'))).toBe('GPU 1 · growth');
    // A Python repr was cut at its outer quotes: "it's" kept its double quotes, \n showed literally.
    expect(appliedPlanText(reply(JSON.stringify("GPU 1 'a'")))).toBe("GPU 1 'a'");
    expect(appliedPlanText(reply(JSON.stringify('GPU 1\nlimit 2 GiB')))).toBe('GPU 1\ufffdlimit 2 GiB');
  });

  it('neutralizes and bounds the kernel’s text', () => {
    expect(appliedPlanText(reply(JSON.stringify('GPU 1\u202e evil')))).toBe('GPU 1\ufffd evil');
    expect(appliedPlanText(reply(JSON.stringify('x'.repeat(5000)))).length).toBe(300);
    expect(() =>
      appliedPlanText({ status: 'error', ename: 'Usage\u202eError', evalue: 'no GPU 7\u2066' })
    ).toThrow('Usage\ufffdError: no GPU 7\ufffd');
    expect(() => appliedPlanText({ status: 'error', evalue: 'x'.repeat(5000) })).toThrow(/^Error: x{299}…$/);
  });

  it('is empty for what is not a JSON string (an older kernel’s repr, a number)', () => {
    expect(appliedPlanText(reply("'GPU 1'"))).toBe('');
    expect(appliedPlanText(reply('42'))).toBe('');
    expect(appliedPlanText(reply(42))).toBe('');
  });

  it('is empty, not an error, when the plan expression has no data', () => {
    expect(appliedPlanText({ status: 'ok', user_expressions: { plan: { status: 'ok' } } })).toBe('');
  });

  it('is empty when the kernel sent no plan', () => {
    expect(appliedPlanText({ status: 'ok' })).toBe('');
    expect(appliedPlanText({ status: 'ok', user_expressions: {} })).toBe('');
    expect(
      appliedPlanText({
        status: 'ok',
        user_expressions: { plan: { status: 'error', data: { 'text/plain': 'x' } } }
      })
    ).toBe('');
  });

  it('fails with the kernel’s error when the lines did not run', () => {
    expect(() => appliedPlanText({ status: 'error', ename: 'UsageError', evalue: 'no GPU 7' })).toThrow(
      'UsageError: no GPU 7'
    );
    expect(() => appliedPlanText({ status: 'aborted' })).toThrow();
  });
});

describe('RestartRenderer', () => {
  interface IFakeKernel {
    id: string;
    requestExecute: ReturnType<typeof vi.fn>;
  }

  function mimeModel(data: unknown, trusted = true): IRenderMime.IMimeModel {
    return { trusted, data: { [RESTART_MIME]: data }, metadata: {}, setData: () => undefined } as never;
  }

  /** A notebook-like parent whose `sessionContext` restarts into `kernel` and answers `content`. */
  function holder(content: IExecuteReplyContent, kernelId = 'k-1') {
    const kernel: IFakeKernel = {
      id: kernelId,
      requestExecute: vi.fn(() => ({ done: Promise.resolve({ content }) }))
    };
    const context = { session: { kernel }, restartKernel: vi.fn(() => Promise.resolve()) };
    const panel = new Panel();
    Object.assign(panel, { sessionContext: context });
    return { panel, context, kernel };
  }

  const okReply: IExecuteReplyContent = {
    status: 'ok',
    user_expressions: { plan: { status: 'ok', data: { 'text/plain': '"GPU 1 · growth"' } } }
  };

  beforeEach(() => {
    vi.mocked(Notification.error).mockClear();
    vi.mocked(Notification.success).mockClear();
    vi.mocked(showDialog).mockClear();
    restartConfirmation.ask = true;
    restartConfirmation.remember = null;
  });

  it('asks before restarting, saying what is lost and which plan comes; Cancel changes nothing', async () => {
    const { panel, context } = holder(okReply);
    const renderer = new RestartRenderer();
    panel.addWidget(renderer);
    await renderer.renderModel(
      mimeModel({ version: 1, lines: [LOAD, '%gpu_select 1 --growth', '%gpu_watch on'] })
    );
    vi.mocked(showDialog).mockResolvedValueOnce({ button: { accept: false }, isChecked: false } as never);
    const button = renderer.node.querySelector('button') as HTMLButtonElement;
    button.click();
    await vi.waitFor(() => expect(showDialog).toHaveBeenCalledTimes(1));
    const asked = vi.mocked(showDialog).mock.calls[0][0] ?? {};
    expect(asked.body).toBe(restartQuestion('%gpu_select 1 --growth; %gpu_watch on'));
    expect(asked.body).toContain('variables');
    expect(asked.checkbox?.label).toBe('Do not ask again');
    await vi.waitFor(() => expect(button.disabled).toBe(false));
    expect(context.restartKernel).not.toHaveBeenCalled();
    expect(button.textContent).toBe('Restart kernel and apply');
  });

  it('"Do not ask again" is saved, and the next restart does not ask', async () => {
    const remember = vi.fn(() => Promise.resolve());
    restartConfirmation.remember = remember;
    const { panel, context } = holder(okReply);
    const renderer = new RestartRenderer();
    panel.addWidget(renderer);
    await renderer.renderModel(mimeModel({ version: 1, lines: [LOAD, '%gpu_select 0'] }));
    vi.mocked(showDialog).mockResolvedValueOnce({ button: { accept: true }, isChecked: true } as never);
    (renderer.node.querySelector('button') as HTMLButtonElement).click();
    await vi.waitFor(() => expect(context.restartKernel).toHaveBeenCalledTimes(1));
    expect(remember).toHaveBeenCalledWith(false);
    expect(restartConfirmation.ask).toBe(false);
    await vi.waitFor(() => expect(Notification.success).toHaveBeenCalled());
    const next = new RestartRenderer();
    panel.addWidget(next);
    await next.renderModel(mimeModel({ version: 1, lines: [LOAD, '%gpu_select 1'] }));
    (next.node.querySelector('button') as HTMLButtonElement).click();
    await vi.waitFor(() => expect(context.restartKernel).toHaveBeenCalledTimes(2));
    expect(showDialog).toHaveBeenCalledTimes(1);
  });

  it('carries %gpu_watch over: the line is allowed and run with the plan', async () => {
    expect(
      parseOffer({ version: 1, lines: [LOAD, '%gpu_watch on', '%gpu_watch on --interval 0.5'] })
    ).not.toBeNull();
    for (const bad of ['%gpu_watch off', '%gpu_watch on --interval 1; x', '%gpu_watch on --interval=1']) {
      expect(parseOffer({ version: 1, lines: [LOAD, bad] })).toBeNull();
    }
  });

  it('says a malformed offer is ignored and offers no button', async () => {
    const renderer = new RestartRenderer();
    await renderer.renderModel(mimeModel({ version: 1, lines: ['import os'] }));
    expect(renderer.node.textContent).toBe('jupyter_gpu: this restart offer is malformed and is ignored.');
    expect(renderer.node.querySelector('button')).toBeNull();
  });

  it('shows untrusted output as text with a note, and no button', async () => {
    const renderer = new RestartRenderer();
    await renderer.renderModel(mimeModel({ version: 1, lines: [LOAD, '%gpu_select 1 --growth'] }, false));
    expect(renderer.node.querySelector('.jp-GpuRestart-text')?.textContent).toBe(
      'GPU plan for a fresh kernel: %gpu_select 1 --growth'
    );
    expect(renderer.node.querySelector('.jp-GpuRestart-note')).not.toBeNull();
    expect(renderer.node.querySelector('button')).toBeNull();
  });

  it('names the default plan when there is nothing but the extension to load', async () => {
    const renderer = new RestartRenderer();
    await renderer.renderModel(mimeModel({ version: 1, lines: [LOAD] }));
    expect(renderer.node.querySelector('.jp-GpuRestart-text')?.textContent).toBe(
      'GPU plan for a fresh kernel: the kernel’s default plan'
    );
  });

  it('shows every line that will run: the first is left out only when it is %load_ext jupyter_gpu', async () => {
    expect(shownPlan(['%gpu_select 0'])).toBe('%gpu_select 0');
    expect(shownPlan(['%gpu_select auto:2 --min-free 999GiB', '%gpu_limit 1'])).toBe(
      '%gpu_select auto:2 --min-free 999GiB; %gpu_limit 1'
    );
    expect(shownPlan([LOAD, LOAD, '%gpu_limit 1'])).toBe(`${LOAD}; %gpu_limit 1`);
    const renderer = new RestartRenderer();
    await renderer.renderModel(mimeModel({ version: 1, lines: ['%gpu_select 0'] }));
    expect(renderer.node.querySelector('.jp-GpuRestart-text')?.textContent).toBe(
      'GPU plan for a fresh kernel: %gpu_select 0'
    );
  });

  it.each([
    '%gpu_select auto:2 --min-free 999GiB --wait 168h',
    '%gpu_select auto:1 --w 168h',
    '%gpu_select auto:1 --wai 1h --growth',
    '%gpu_select -- --wait'
  ])('refuses an offer with a line that can block (%j), with a one-line reason and no button', async line => {
    const lines = [line, '%gpu_limit 1'];
    expect(parseOffer({ version: 1, lines })).not.toBeNull(); // well formed, yet refused
    const { panel, context } = holder(okReply, 'k-wait');
    const renderer = new RestartRenderer();
    panel.addWidget(renderer);
    await renderer.renderModel(
      mimeModel({ version: 1, lines, automatic: true, kernel_id: 'k-wait', id: `wait-${line}` })
    );
    expect(renderer.node.querySelector('.jp-GpuRestart-text')?.textContent).toBe(
      `GPU plan for a fresh kernel: ${line}; %gpu_limit 1`
    );
    const note = renderer.node.querySelector('.jp-GpuRestart-note')?.textContent ?? '';
    expect(note).toContain('refused');
    expect(note).not.toContain('\n');
    expect(renderer.node.querySelector('button')).toBeNull();
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(context.restartKernel).not.toHaveBeenCalled();
  });

  it('lets the options that return at once through', () => {
    const offer = parseOffer({
      version: 1,
      lines: [LOAD, '%gpu_select auto:2 --min-free 8GiB --growth', '%gpu_select --no-growth']
    });
    expect(offer && refusal(offer)).toBeNull();
  });

  it('gives up on "Restarting…" when the new kernel never answers, and says so', async () => {
    const { panel, kernel } = holder(okReply);
    kernel.requestExecute.mockReturnValue({ done: new Promise(() => undefined) });
    const renderer = new RestartRenderer();
    renderer.timeoutMs = 300;
    panel.addWidget(renderer);
    await renderer.renderModel(mimeModel({ version: 1, lines: [LOAD, '%gpu_select 0'] }));
    const button = renderer.node.querySelector('button') as HTMLButtonElement;
    button.click();
    await vi.waitFor(() => expect(button.textContent).toBe('Restarting…'), { interval: 5 });
    await vi.waitFor(() => expect(Notification.error).toHaveBeenCalled());
    expect(vi.mocked(Notification.error).mock.calls[0][0]).toMatch(
      /^jupyter_gpu: restart and apply failed: no answer from the new kernel within 0 s; .*%gpu_status\)$/
    );
    expect(button.disabled).toBe(false);
    expect(button.textContent).toBe('Restart kernel and apply');
  });

  it('confirms the restart when the kernel applied the lines but sent no plan data', async () => {
    const { panel } = holder({ status: 'ok', user_expressions: { plan: { status: 'ok' } } });
    const renderer = new RestartRenderer();
    panel.addWidget(renderer);
    await renderer.renderModel(mimeModel({ version: 1, lines: [LOAD, '%gpu_select 0'] }));
    (renderer.node.querySelector('button') as HTMLButtonElement).click();
    await vi.waitFor(() => expect(Notification.success).toHaveBeenCalled());
    expect(vi.mocked(Notification.success).mock.calls[0][0]).toBe('Kernel restarted; GPU plan applied.');
    expect(Notification.error).not.toHaveBeenCalled();
  });

  it('restarts the kernel and runs exactly the offered lines, silently, on a click', async () => {
    const { panel, context, kernel } = holder(okReply);
    const renderer = new RestartRenderer();
    panel.addWidget(renderer);
    await renderer.renderModel(
      mimeModel({ version: 1, lines: [LOAD, '%gpu_select 1 --growth', '%gpu_limit 4GiB'] })
    );
    const button = renderer.node.querySelector('button') as HTMLButtonElement;
    expect(button.textContent).toBe('Restart kernel and apply');
    button.click();
    await vi.waitFor(() => expect(Notification.success).toHaveBeenCalled());
    expect(context.restartKernel).toHaveBeenCalledTimes(1);
    expect(kernel.requestExecute).toHaveBeenCalledWith(
      expect.objectContaining({
        code: `${LOAD}\n%gpu_select 1 --growth\n%gpu_limit 4GiB`,
        silent: true,
        store_history: false
      })
    );
    expect(vi.mocked(Notification.success).mock.calls[0][0]).toBe(
      'Kernel restarted; GPU plan applied: GPU 1 · growth'
    );
    expect(button.textContent).toBe('✓ Restarted, plan applied');
    expect(button.disabled).toBe(true);
    // Finished: no longer the live (accent) button it was.
    expect(button.classList.contains('jp-mod-done')).toBe(true);
    expect(button.classList.contains('jp-mod-accept')).toBe(false);
  });

  it('reports a failed apply and lets the user try again', async () => {
    const { panel } = holder({ status: 'error', ename: 'UsageError', evalue: 'no GPU 7' });
    const renderer = new RestartRenderer();
    panel.addWidget(renderer);
    await renderer.renderModel(mimeModel({ version: 1, lines: [LOAD, '%gpu_select 7'] }));
    const button = renderer.node.querySelector('button') as HTMLButtonElement;
    button.click();
    await vi.waitFor(() => expect(Notification.error).toHaveBeenCalled());
    expect(vi.mocked(Notification.error).mock.calls[0][0]).toBe(
      'jupyter_gpu: restart and apply failed: UsageError: no GPU 7'
    );
    expect(button.disabled).toBe(false);
    expect(button.textContent).toBe('Restart kernel and apply');
  });

  it('says so when no kernel session holds the output', async () => {
    const renderer = new RestartRenderer();
    await renderer.renderModel(mimeModel({ version: 1, lines: [LOAD] }));
    (renderer.node.querySelector('button') as HTMLButtonElement).click();
    await vi.waitFor(() => expect(Notification.error).toHaveBeenCalled());
    expect(vi.mocked(Notification.error).mock.calls[0][0]).toContain('no kernel session holds this output');
  });

  it('acts on an automatic offer once, and only in the kernel that made it', async () => {
    const same = holder(okReply, 'k-auto');
    const first = new RestartRenderer();
    same.panel.addWidget(first);
    const offer = {
      version: 1,
      lines: [LOAD, '%gpu_select 0'],
      automatic: true,
      kernel_id: 'k-auto',
      id: 'auto-1'
    };
    await first.renderModel(mimeModel(offer));
    await vi.waitFor(() => expect(same.context.restartKernel).toHaveBeenCalledTimes(1));
    // A re-render of the same output (scrolling, reopening) must not restart again.
    const again = new RestartRenderer();
    same.panel.addWidget(again);
    await again.renderModel(mimeModel(offer));
    // Another kernel (the notebook was reopened with a new kernel): no automatic restart.
    const other = holder(okReply, 'k-other');
    const elsewhere = new RestartRenderer();
    other.panel.addWidget(elsewhere);
    await elsewhere.renderModel(mimeModel({ ...offer, id: 'auto-2' }));
    // Untrusted automatic offers never run.
    const untrusted = holder(okReply, 'k-auto');
    const shown = new RestartRenderer();
    untrusted.panel.addWidget(shown);
    await shown.renderModel(mimeModel({ ...offer, id: 'auto-3' }, false));
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(same.context.restartKernel).toHaveBeenCalledTimes(1);
    expect(other.context.restartKernel).not.toHaveBeenCalled();
    expect(untrusted.context.restartKernel).not.toHaveBeenCalled();
  });
});
