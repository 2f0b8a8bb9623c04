/**
 * The GPU monitor's settings schema in the user's language, for JupyterLab's Settings editor.
 *
 * JupyterLab's server translates a settings schema only where one plugin is asked for (`GET
 * lab/api/settings/jupyter-gpu:plugin`, jupyter_gpu/server/lab_settings.py); the list the settings
 * registry preloads, which the Settings editor shows, carries an extension's schema untranslated
 * (jupyterlab_server's `_list_settings`). So the schema asks for a transform
 * (`"jupyter.lab.transform": true`) and the plugin translates the same strings, in the same contexts,
 * from the same catalog (`lab.po`: `msgctxt "schema"` / `"settings"`) when the registry fetches it.
 * A string already translated (the server's answer) has no entry and stays as it is.
 */
import type { ISettingRegistry } from '@jupyterlab/settingregistry';
import type { TranslationBundle } from '@jupyterlab/translation';

type Schema = ISettingRegistry.ISchema;

/** `schema` with its title, description, icon label and properties' titles and descriptions
 * translated (jupyterlab_server's default selectors, as `core.i18n_catalogs.SCHEMA_SELECTORS`). */
export function translatedSchema(schema: Schema, words: TranslationBundle): Schema {
  const say = (context: string, text: unknown): string | undefined =>
    typeof text === 'string' ? words._p(context, text) : undefined;
  const properties: Record<string, ISettingRegistry.IProperty> = {};
  for (const [key, property] of Object.entries(schema.properties ?? {})) {
    properties[key] = {
      ...property,
      ...(property.title !== undefined ? { title: say('settings', property.title) } : {}),
      ...(property.description !== undefined ? { description: say('settings', property.description) } : {})
    };
  }
  const label = schema['jupyter.lab.setting-icon-label'];
  return {
    ...schema,
    ...(schema.title !== undefined ? { title: say('schema', schema.title) } : {}),
    ...(schema.description !== undefined ? { description: say('schema', schema.description) } : {}),
    ...(typeof label === 'string' ? { 'jupyter.lab.setting-icon-label': say('settings', label) } : {}),
    ...(schema.properties ? { properties } : {})
  };
}

/** Translate the plugin's schema whenever the registry fetches it (before the first `load`). */
export function translateSettings(
  registry: ISettingRegistry,
  pluginId: string,
  words: () => TranslationBundle
): void {
  registry.transform(pluginId, {
    fetch: plugin => ({ ...plugin, schema: translatedSchema(plugin.schema, words()) })
  });
}
