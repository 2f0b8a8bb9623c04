"""JupyterLab's Settings editor in the user's language: the jupyter-gpu settings schema translated.

JupyterLab translates a plugin's settings schema on the server before it answers
``GET lab/api/settings/<plugin>`` (``jupyterlab_server.translation_utils.translator.translate_schema``):
the title, the description, each property's title and description, the setting icon's label and the
schema's own ``jupyter.lab.internationalization`` selectors, each looked up with ``pgettext`` (context
``schema`` or ``settings``) in the gettext domain the schema names there (``jupyter_gpu``), in the
language chosen in Settings → Language.

jupyterlab_server (2.28) looks a domain up only in the language pack's folder
(``jupyterlab_language_pack_<locale>/locale/<locale>/LC_MESSAGES/<domain>.mo``; its ``TranslationBundle``
says "TODO: Need to handle packages that provide their own .mo files"): an extension's own catalog,
the one its ``jupyterlab.locale`` entry point names for the front end, is never read there. So the
server extension, when it loads, gives JupyterLab's translator the ``jupyter_gpu`` domain's bundle
itself (:func:`install`): one that reads the catalog every Python face reads
(:func:`jupyter_gpu.core.i18n.translator`: the ``.po`` sources, ``lab.po`` among them, where
``scripts/i18n.py update`` puts the schema's strings), in whatever language JupyterLab sets.
Nothing is compiled to a file for it, so no ``.mo`` can fall behind its ``.po``. (The list of every
plugin's settings, which the registry preloads, is not translated by jupyterlab_server for an
extension's schema; the extension translates its own there: ``labextension/src/settingsSchema.ts``.)

Where jupyterlab_server is not installed (a server without JupyterLab or Notebook 7), nothing is done.
"""

from __future__ import annotations

from typing import Any

from ..core import i18n


def install() -> bool:
    """Serve the jupyter-gpu settings schema in JupyterLab's chosen language (see the module docstring).

    Returns False where there is no JupyterLab translation machinery to join."""
    try:
        from jupyterlab_server.translation_utils import TranslationBundle, translator
    except ImportError:
        return False

    class CatalogBundle(TranslationBundle):
        """jupyterlab_server's bundle of a domain, reading jupyter_gpu's own catalog."""

        def update_locale(self, locale_: str) -> None:
            self._locale = locale_
            self._translator = i18n.translator(locale_)

    domain = translator.normalize_domain(i18n.DOMAIN)
    # translator.load(domain) would make the stock bundle (the language pack's folder); the bundles
    # live in this table, and set_locale (each settings request) moves every one of them along.
    bundles: dict[str, Any] = translator._TRANSLATORS
    bundles[domain] = CatalogBundle(domain, translator._LOCALE)
    return True
