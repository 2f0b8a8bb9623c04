"""Who asks the service: the hub's OAuth and token checks, shared by every handler (tornado wiring).

A request's identity is looked up once, awaited, in ``prepare()`` (:class:`UserFirst`), through the
app's one :class:`jupyterhub.services.auth.HubOAuth` (cached for ``cache_max_age``, as HubAuth
does). :class:`ConsoleBase` adds the console's roles (:func:`jupyter_gpu.hub.core.access`) and
the language each of its requests is answered in (:meth:`ConsoleBase.language`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from jupyterhub.services.auth import HubAuthenticated, HubOAuth, HubOAuthenticated, UserNotAllowed
from tornado import web

from ..core import i18n
from ..core.i18n import N_
from . import core, page

if TYPE_CHECKING:
    from .service import HubService


class Refusal(web.HTTPError):
    """An answer's error whose ``message`` is in the asker's language (``said``) while the service's
    log keeps the English (admin logs stay English)."""

    def __init__(self, status_code: int, english: str, said: str) -> None:
        super().__init__(status_code, english.replace("%", "%%"))
        self.said = said


class Base(web.RequestHandler):
    @property
    def service(self) -> HubService:
        return self.settings["jupyter_gpu_hub"]

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        reason = self._reason
        exc = kwargs.get("exc_info", (None, None))[1]
        if isinstance(exc, Refusal):
            reason = exc.said
        elif isinstance(exc, web.HTTPError) and exc.log_message:
            reason = exc.log_message % exc.args if exc.args else exc.log_message
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": reason}))


class HubAuthFromSettings:
    """The app's one HubOAuth (``settings["hub_auth"]``) rather than a process-wide singleton."""

    @property
    def hub_auth(self) -> HubOAuth:
        # A mixin: ``settings`` is the tornado RequestHandler's it is mixed into, unknown to mypy here.
        return self.settings["hub_auth"]  # type: ignore[attr-defined]

    @hub_auth.setter
    def hub_auth(self, value: Any) -> None:
        pass


class UserFirst(HubAuthenticated):
    """Who asks, found once in ``prepare()`` on the event loop, before any handler code runs.

    JupyterHub 6.1's ``HubAuthenticated.get_current_user`` asks ``hub_auth.get_user`` synchronously:
    the lookup runs on HubAuth's one-thread pool while the event loop waits for it. For a request
    with a login cookie that needs an XSRF check (DELETE, POST, ``Sec-Fetch-Mode: cors``...) and
    carries no valid ``_xsrf`` cookie, that lookup makes a new ``_xsrf`` cookie, which asks for
    ``current_user`` again: a second job on the same one-thread pool, waited for by the first. The
    loop waited for good (every user server's ``api/devices`` included), and any identity that can
    log in could cause it, before any role check. Here the lookup is awaited (``sync=False``), the
    pool is never used, and ``get_current_user`` only returns what ``prepare()`` found, so a nested
    ``current_user`` (the XSRF cookie's) sees "nobody yet" instead of re-entering the lookup.
    """

    _resolved_user: Any = None

    async def prepare(self) -> None:
        model = await self.hub_auth.get_user(self, sync=False)
        user = None
        if model:
            try:
                user = self.check_hub_user(model)
            except UserNotAllowed:
                raise web.HTTPError(403, "{kind} {name} is not allowed".format(**model)) from None
            self.hub_auth._persist_url_token_if_set(self)
        self._resolved_user = user
        self.current_user = user  # replaces what a nested current_user cached meanwhile (nobody)

    def get_current_user(self) -> Any:
        return self._resolved_user


class Api:
    def get_login_url(self) -> str:
        raise web.HTTPError(403, "authentication required (a hub token or the console's login)")


class ConsoleBase(UserFirst, HubAuthFromSettings, HubOAuthenticated, Base):
    def viewer(self) -> str:
        """Who asks: a user's name, or ``service:<name>`` for a service's token (a service named
        like a user must not see that user's notebooks as its own)."""
        model = self.current_user or {}  # @web.authenticated: never None here
        name = str(model.get("name"))
        return name if model.get("kind", "user") == "user" else f"service:{name}"

    def role(self) -> str:
        role = core.access(self.current_user)
        if role is None:
            raise self.refusal(
                403, N_("the GPU console is for hub admins and holders of {scope}"), scope=core.READ_SCOPE
            )
        return role

    def refusal(self, status_code: int, message: str, **values: Any) -> Refusal:
        """The error to raise for ``message`` (marked with ``N_``, ``{placeholders}`` filled from
        ``values``): its answer says it in :meth:`language`, the log in English."""
        said = i18n.translator(self.language()).gettext(message)
        return Refusal(status_code, message.format(**values), said.format(**values))

    def language(self) -> str:
        """The language this request is answered in (:func:`jupyter_gpu.hub.page.request_language`):
        the page's ``?lang=``, the service's ``--language`` or ``JUPYTER_GPU_LANG``, the browser's
        ``Accept-Language``, English. Field names, numbers and units stay as they are."""
        chosen: str | None = getattr(self, "_jupyter_gpu_language", None)
        if chosen is None:
            chosen = page.request_language(
                self.get_query_argument("lang", None),
                self.service.language or os.environ.get(i18n.ENV),
                self.request.headers.get("Accept-Language"),
            )
            self._jupyter_gpu_language = chosen
        return chosen

    @contextmanager
    def speaking(self) -> Iterator[None]:
        """Messages made in this block are in :meth:`language` (this request's task alone:
        :func:`jupyter_gpu.core.i18n.language_forced`). Not around code that starts work shared
        with other requests (a task started here would inherit the language: Prometheus mode's
        asking, whose log stays English)."""
        with i18n.language_forced(self.language()):
            yield
