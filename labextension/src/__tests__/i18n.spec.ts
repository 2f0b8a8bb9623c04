/// <reference types="node" />
// @vitest-environment jsdom
/**
 * The extension's words through JupyterLab's translator (i18n.ts): English without one, the
 * user's language once the plugin or a renderer hands Lab's translator over, read by JupyterLab's
 * own `Gettext` from a catalog in the form `jupyter_gpu/core/i18n.py` (`lab_catalog`) writes.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Gettext, type ITranslator, nullTranslator } from '@jupyterlab/translation';
import { afterEach, describe, expect, it } from 'vitest';

import { DOMAIN, trans, useTranslator } from '../i18n';
import { statusSummary } from '../overview';
import { GIB, gpu, processEntry, snapshot } from './fixtures';

interface IHeader {
  domain: string;
  language: string;
  plural_forms: string;
  version: string;
}

interface ICatalog {
  '': IHeader;
  [message: string]: string[] | IHeader;
}

/** A few messages of `jupyter_gpu.json` as `lab_catalog` writes them (a plural: two entries). */
const CATALOG: ICatalog = {
  '': {
    domain: 'jupyter_gpu',
    language: 'zh-CN',
    plural_forms: 'nplurals=1; plural=0;',
    version: 'jupyter_gpu'
  },
  '%1/%2 GPUs in use': ['%1/%2 个 GPU 使用中'],
  '%1 of %2 GPUs in use': ['%2 个 GPU 中 %1 个使用中'],
  'yours %1': ['您占用 %1'],
  'your kernels hold %1': ['您的内核占用 %1'],
  'idle %1': ['闲置 %1'],
  '%1 of your kernels is idle while holding GPU memory': ['您有 %1 个内核闲置但仍占用显存', ''],
  'between the clauses of a tooltip\u0004; ': ['；']
};

/** JupyterLab's translator for one language, as its `TranslationManager.load` builds a bundle. */
function translator(catalog: ICatalog): ITranslator {
  const bundle = new Gettext({ domain: DOMAIN, locale: 'zh-CN' });
  const header = { ...catalog[''], pluralForms: catalog[''].plural_forms };
  bundle.loadJSON({ ...catalog, '': header } as unknown as Parameters<Gettext['loadJSON']>[0], DOMAIN);
  return { languageCode: 'zh-CN', load: () => bundle };
}

const busy = snapshot({
  gpus: [
    gpu({ processes: [processEntry({ memory: 4 * GIB })] }),
    gpu({ index: 1, uuid: 'GPU-1', memory_used: 0 })
  ]
});
const idle = snapshot({
  gpus: [gpu({ processes: [processEntry({ memory: 4 * GIB, idle: true, idle_s: 600 })] })]
});

afterEach(() => useTranslator(nullTranslator));

describe('the translator', () => {
  it('leaves the English source without one', () => {
    useTranslator(null);
    expect(statusSummary(busy, 'ok', null).text).toBe('1/2 GPUs in use · yours 4 GiB');
    expect(trans.__('%1 of %2 used', '1 GiB', '2 GiB')).toBe('1 GiB of 2 GiB used');
  });

  it("speaks Lab's language once handed its translator", () => {
    useTranslator(translator(CATALOG));
    const summary = statusSummary(busy, 'ok', null);
    expect(summary.text).toBe('1/2 个 GPU 使用中 · 您占用 4 GiB');
    expect(summary.title).toBe('2 个 GPU 中 1 个使用中；您的内核占用 4 GiB');
    // a message the catalog lacks stays English, its values filled in
    expect(trans.__('%1 of %2 used', '1 GiB', '2 GiB')).toBe('1 GiB of 2 GiB used');
  });

  it('keeps the language when a later caller has no translator', () => {
    useTranslator(translator(CATALOG));
    useTranslator(undefined);
    expect(statusSummary(busy, 'ok', null).text).toBe('1/2 个 GPU 使用中 · 您占用 4 GiB');
  });

  it('takes a plural translation only with two entries, as lab_catalog writes it', () => {
    useTranslator(translator(CATALOG));
    expect(statusSummary(idle, 'ok', null).title).toContain('您有 1 个内核闲置但仍占用显存');
    const key = '%1 of your kernels is idle while holding GPU memory';
    useTranslator(translator({ ...CATALOG, [key]: ['您有 %1 个内核闲置但仍占用显存'] }));
    expect(statusSummary(idle, 'ok', null).title).toContain(
      '1 of your kernels is idle while holding GPU memory'
    );
  });

  const built = join(
    dirname(fileURLToPath(import.meta.url)),
    '../../../jupyter_gpu/locale/zh_CN/LC_MESSAGES/jupyter_gpu.json'
  );
  it.skipIf(!existsSync(built))('reads the built zh_CN catalog (scripts/i18n.py update builds it)', () => {
    useTranslator(translator(JSON.parse(readFileSync(built, 'utf-8')) as ICatalog));
    expect(statusSummary(idle, 'ok', null).title).toContain('您有 1 个内核闲置但仍占用显存');
    expect(trans._p('button: free GPU memory', 'Free')).toBe('释放');
    expect(trans.__('Restart kernel and apply')).toBe('重启内核并应用');
  });
});
