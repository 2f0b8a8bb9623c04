/// <reference types="node" />
// @vitest-environment jsdom
/**
 * The settings schema in the user's language for the Settings editor (settingsSchema.ts): the
 * schema's own words in the contexts JupyterLab's server uses, from the catalog lab.po builds.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ISettingRegistry } from '@jupyterlab/settingregistry';
import { Gettext } from '@jupyterlab/translation';
import { describe, expect, it } from 'vitest';

import { translatedSchema } from '../settingsSchema';

const HERE = dirname(fileURLToPath(import.meta.url));
const SCHEMA = JSON.parse(readFileSync(join(HERE, '..', '..', 'schema', 'plugin.json'), 'utf-8'));

function chinese(): Gettext {
  const bundle = new Gettext({ domain: 'jupyter_gpu', locale: 'zh-CN' });
  const catalog = {
    '': {
      domain: 'jupyter_gpu',
      language: 'zh-CN',
      pluralForms: 'nplurals=1; plural=0;',
      version: 'jupyter_gpu'
    },
    'schema\u0004GPU monitor': ['GPU 监视器'],
    'settings\u0004GPU monitor': ['GPU 监视器'],
    'settings\u0004Compact view': ['紧凑视图'],
    'settings\u0004Refresh interval (ms)': ['刷新间隔（毫秒）']
  };
  bundle.loadJSON(catalog as unknown as Parameters<Gettext['loadJSON']>[0], 'jupyter_gpu');
  return bundle;
}

describe('the settings schema', () => {
  it('asks the registry for a transform, so the plugin can translate it before the editor shows it', () => {
    expect(SCHEMA['jupyter.lab.transform']).toBe(true);
    expect(SCHEMA['jupyter.lab.internationalization'].domain).toBe('jupyter_gpu');
  });

  it('is translated in the contexts of JupyterLab and keeps its data', () => {
    const schema = translatedSchema(SCHEMA as ISettingRegistry.ISchema, chinese() as never);
    expect(schema.title).toBe('GPU 监视器');
    expect(schema['jupyter.lab.setting-icon-label']).toBe('GPU 监视器');
    expect(schema.properties?.compactView.title).toBe('紧凑视图');
    expect(schema.properties?.refreshIntervalMs.title).toBe('刷新间隔（毫秒）');
    expect(schema.properties?.compactView.enum).toEqual(['auto', 'compact', 'cards']);
    expect(schema.properties?.compactView.default).toBe('auto');
    // a string the catalog lacks (or one the server already translated) stays as it is
    expect(schema.properties?.historyMinutes.title).toBe('History (minutes)');
    expect(SCHEMA.title).toBe('GPU monitor'); // the fetched schema itself is not changed
  });
});
