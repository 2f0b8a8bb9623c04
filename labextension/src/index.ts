/**
 * jupyter-gpu: the JupyterLab face of jupyter_gpu.
 *
 * One plugin owns one `GpuMonitorModel` (one poll per page) and hangs two views on it: the sidebar
 * panel and the status-bar item. Kernels are shut down through Jupyter's own kernel API (the app's
 * `serviceManager.kernels`), so the rest of JupyterLab (running panel, notebook toolbars) learns of
 * it the usual way; no endpoint of ours can kill anything.
 */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator } from '@jupyterlab/translation';

import type { IProcessActions } from './components/processRow';
import { kernelLabel } from './components/processRow';
import { GpuSidebar } from './components/sidebar';
import { restartConfirmation } from './confirm';
import { CullNotifier } from './cullNotifier';
import { GpuStatusItem } from './components/statusItem';
import { formatBytes } from './format';
import { trans, useTranslator } from './i18n';
import { gpuIcon } from './icons';
import { LatestSave } from './latestSave';
import { GpuMonitorModel } from './model';
import type { CompactMode } from './overview';
import { restoreWithoutRestorer } from './restoreSidebar';
import { translateSettings } from './settingsSchema';
import { CommandIDs, IGpuMonitorModel, PLUGIN_ID, SIDEBAR_ID } from './tokens';

/** The left sidebar's order: after the file browser, running kernels, commands and TOC. */
const SIDEBAR_RANK = 700;

function makeActions(app: JupyterFrontEnd, model: GpuMonitorModel): IProcessActions {
  return {
    openNotebook(path: string): void {
      void app.commands.execute('docmanager:open', { path });
    },
    shutdownKernel(process, gpuLabel): void {
      const kernelId = process.kernel_id;
      if (!kernelId) {
        return;
      }
      const label = kernelLabel(process);
      void showDialog({
        title: trans.__('Shut down kernel?'),
        body: trans.__(
          'The kernel of %1 holds %2 on %3. Shutting it down frees that memory and loses the variables of the notebook.',
          label,
          formatBytes(process.memory),
          gpuLabel
        ),
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: trans.__('Shut Down') })]
      }).then(async result => {
        if (!result.button.accept) {
          return;
        }
        try {
          await app.serviceManager.kernels.shutdown(kernelId);
        } catch (error) {
          await showErrorMessage(trans.__('Could not shut down the kernel'), error as Error);
        }
        await model.refresh().catch(() => undefined);
      });
    }
  };
}

const plugin: JupyterFrontEndPlugin<IGpuMonitorModel> = {
  id: PLUGIN_ID,
  description: 'A sidebar and status-bar GPU monitor built on the jupyter_gpu server extension.',
  autoStart: true,
  provides: IGpuMonitorModel,
  optional: [ILayoutRestorer, IStatusBar, ISettingRegistry, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    settingRegistry: ISettingRegistry | null,
    translator: ITranslator | null
  ): IGpuMonitorModel => {
    useTranslator(translator); // before any view is made: they read their words from `trans`
    let historyMinutes = 15;
    const model = new GpuMonitorModel({ historyMinutes });
    let settings: ISettingRegistry.ISettings | null = null;
    // The header's toggle is kept as the user's setting (when settings can be saved), one save at a
    // time so that of quick clicks the last one wins on a slow server.
    const compactSave = new LatestSave<CompactMode>(
      async mode => settings?.set('compactView', mode),
      reason => console.warn('jupyter-gpu:', reason)
    );
    const sidebar = new GpuSidebar(
      model,
      makeActions(app, model),
      () => historyMinutes * 60,
      mode => compactSave.set(mode)
    );

    app.commands.addCommand(CommandIDs.open, {
      label: trans.__('GPU Monitor'),
      caption: trans.__('Show which GPUs are in use and by which kernels'),
      icon: gpuIcon,
      execute: () => app.shell.activateById(SIDEBAR_ID)
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: trans.__('Refresh GPU Status'),
      execute: () => model.refresh()
    });

    app.shell.add(sidebar, 'left', { rank: SIDEBAR_RANK, type: 'GPU Monitor' });
    if (restorer) {
      restorer.add(sidebar, SIDEBAR_ID);
    } else {
      void restoreWithoutRestorer(app, sidebar); // Notebook 7 has no layout restorer
    }

    const item = new GpuStatusItem(model, () => void app.commands.execute(CommandIDs.open), !statusBar);
    if (statusBar) {
      statusBar.registerStatusItem('jupyter-gpu:status', {
        item,
        align: 'left',
        rank: 5
      });
    } else {
      // Notebook 7 (and other shells built on JupyterLab components) has no status bar: the item
      // goes to the right of the menu bar (after Notebook's spacer at rank 900, before its kernel
      // and trust indicators), where it has room; in the top bar it squeezed the notebook's title
      // until the bar wrapped and clipped the logo.
      item.addClass('jp-mod-menubar');
      app.shell.add(item, 'menu', { rank: 1000 });
    }

    // countdowns with "Keep running", what each cull freed, and the culls made while the page was closed
    new CullNotifier(model, undefined, undefined, app.started);

    if (settingRegistry) {
      translateSettings(settingRegistry, PLUGIN_ID, () => trans); // before the first load
      const apply = (settings: ISettingRegistry.ISettings): void => {
        model.refreshIntervalMs = settings.get('refreshIntervalMs').composite as number;
        historyMinutes = settings.get('historyMinutes').composite as number;
        model.historyMinutes = historyMinutes;
        restartConfirmation.ask = settings.get('confirmRestart').composite !== false;
        if (!compactSave.busy) {
          // (while the header's clicks are being saved, a save's echo may carry an earlier click)
          sidebar.compactMode = settings.get('compactView').composite as CompactMode;
        }
      };
      settingRegistry
        .load(PLUGIN_ID)
        .then(loaded => {
          settings = loaded;
          restartConfirmation.remember = ask => loaded.set('confirmRestart', ask);
          apply(loaded);
          loaded.changed.connect(apply);
        })
        .catch(reason => console.warn('jupyter-gpu: could not load settings', reason));
    }
    return model;
  }
};

export default plugin;
export * from './tokens';
