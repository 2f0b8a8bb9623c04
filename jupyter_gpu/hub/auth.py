"""Who asks the service: the hub's OAuth and token checks, shared by every handler (tornado wiring).

A request's identity is looked up once, awaited, in ``prepare()`` (:class:`UserFirst`), through the
app's one :class:`jupyterhub.services.auth.HubOAuth` (cached for ``cache_max_age``, as HubAuth
does). :class:`ConsoleBase` adds the console's roles (:func:`jupyter_gpu.hub.core.access`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from jupyterhub.services.auth import HubAuthenticated, HubOAuth, HubOAuthenticated, UserNotAllowed
from tornado import web

from . import core

if TYPE_CHECKING:
    from .service import HubService


class Base(web.RequestHandler):
    @property
    def service(self) -> HubService:
        return self.settings["jupyter_gpu_hub"]

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        reason = self._reason
        exc = kwargs.get("exc_info", (None, None))[1]
        if isinstance(exc, web.HTTPError) and exc.log_message:
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
            raise web.HTTPError(403, f"the GPU console is for hub admins and holders of {core.READ_SCOPE}")
        return role
