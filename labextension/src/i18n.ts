/**
 * The extension's words in the user's language: JupyterLab's `ITranslator`, domain `jupyter_gpu`.
 *
 * Every string a person reads goes through `trans` (`trans.__('GPU %1 is free', index)`,
 * `trans._n('%1 GPU', '%1 GPUs', n)`, `trans._p('context', 'word')`), as JupyterLab's
 * internationalization guide says. The catalog is `jupyter_gpu/locale/<lang>/LC_MESSAGES/
 * jupyter_gpu.json`, built from `lab.po` (docs/i18n.md) and served by JupyterLab's translation
 * server through the `jupyterlab.locale` entry point; the language is Lab's own (Settings → Language).
 *
 * One bundle per page: the plugin (index.ts, `ITranslator` optional) and the MIME renderers (their
 * `IRendererOptions.translator`) call `useTranslator` when they start; until then, and where there
 * is no translator (other frontends, unit tests), `nullTranslator` keeps the English source.
 * JupyterLab reloads the page when its language changes, so the bundle never changes under a view.
 *
 * Rules for marking (`scripts/i18n.py` extracts with Babel's JavaScript reader, which does not see
 * inside template literals): a literal string as the first argument, `%1`, `%2`… for the values,
 * never a call inside `${…}`, never a sentence glued from translated pieces.
 */
import type { ITranslator, TranslationBundle } from '@jupyterlab/translation';
import { nullTranslator } from '@jupyterlab/translation';

/** The gettext domain: JupyterLab's name for `jupyter_gpu.json` (the `jupyterlab.locale` entry point). */
export const DOMAIN = 'jupyter_gpu';

/** The bundle every view reads its words from (a live binding: `useTranslator` replaces it). */
export let trans: TranslationBundle = nullTranslator.load(DOMAIN);

/** Speak `translator`'s language from now on; nothing changes without one. */
export function useTranslator(translator: ITranslator | null | undefined): void {
  if (!translator) {
    return;
  }
  trans = translator.load(DOMAIN);
}
