/**
 * The questions jupyter_gpu asks before it restarts or shuts down a kernel, or runs something in it.
 *
 * A restart loses the kernel's variables, so "Restart kernel and apply", `%gpu_restart` and the
 * out-of-memory report's "Restart on GPU k" ask first, as JupyterLab's own "Restart Kernel…" does
 * (`showDialog`), saying what is lost and which plan the new kernel gets. The user may opt out
 * with "Do not ask again", kept in the extension's settings (`confirmRestart`,
 * labextension/schema/plugin.json); the plugin (index.ts) loads that setting into
 * `restartConfirmation` and saves the choice. Shutting a kernel down and freeing memory always ask.
 * Dialog bodies are strings: JupyterLab renders them as text.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';

import { trans } from './i18n';

/** Whether to ask before a restart, and how to remember "Do not ask again" (set by index.ts). */
export const restartConfirmation: {
  ask: boolean;
  /** Saves the choice in the extension's settings; null where settings cannot be saved. */
  remember: ((ask: boolean) => Promise<void>) | null;
} = { ask: true, remember: null };

/** The restart dialog's text: what is lost, and the plan (as text) the new kernel runs first. */
export function restartQuestion(plan: string): string {
  return trans.__(
    'The kernel restarts: its variables and everything else defined in it are lost, as with any restart. The new kernel then runs, before anything else: %1.',
    plan
  );
}

/**
 * Asks before a restart that applies `plan` (unless the user opted out); true to go ahead.
 * "Do not ask again" with Restart turns the question off and saves that in the settings.
 */
export async function confirmRestart(plan: string, title?: string): Promise<boolean> {
  if (!restartConfirmation.ask) {
    return true;
  }
  const result = await showDialog({
    title: title ?? trans.__('Restart kernel and apply the GPU plan?'),
    body: restartQuestion(plan),
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: trans.__('Restart') })],
    checkbox: {
      label: trans.__('Do not ask again'),
      caption: trans.__('Restart at once from now on (Settings › GPU monitor › Ask before restarting)'),
      checked: false
    }
  });
  if (!result.button.accept) {
    return false;
  }
  if (result.isChecked === true) {
    restartConfirmation.ask = false;
    await restartConfirmation
      .remember?.(false)
      .catch(reason => console.warn('jupyter-gpu: could not save "Do not ask again"', reason));
  }
  return true;
}

/** Asks before an action that cannot be undone (`label` on the button); true to go ahead. */
export async function confirmAction(title: string, body: string, label: string): Promise<boolean> {
  const result = await showDialog({
    title,
    body,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label })]
  });
  return result.button.accept;
}
