"""The service in Prometheus mode (``--prometheus-url``): every node's GPUs and kernels asked of
Prometheus's HTTP API, once per interval however many consoles look (tornado wiring; the rules
that turn Prometheus's answers into the console's JSON are :mod:`jupyter_gpu.hub.prometheus`)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import urllib.error
from concurrent.futures import Executor
from typing import Any
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ..core import i18n, wire
from ..core.i18n import N_, _
from ..sources.remote import account_uid, get_with_credential
from . import prometheus as prom

log = logging.getLogger("jupyter_gpu.hub")


class PrometheusAsker:
    """Instant and range queries to Prometheus (its answers are untrusted: bounded, parsed by
    :mod:`jupyter_gpu.core.wire` on the service's parser thread), cached for ``interval_s``."""

    def __init__(
        self,
        url: str,
        token_file: str | None,
        parser: Executor,
        interval_s: float,
        history_s: float,
        idle_after_s: float,
        account: str | None = "prometheus",
    ) -> None:
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.account = account  # who Prometheus runs as: its listener may get the bearer token
        self.interval_s = interval_s
        self.history_s = history_s
        self.idle_after_s = idle_after_s
        self._parser = parser
        self.logged: set[str] = set()  # dropped-series log lines already written (each kind once)
        self.answer: tuple[float, Any, dict[str, Any], str | None] | None = None
        self._asking: asyncio.Future[tuple[float, Any, dict[str, Any], str | None]] | None = None
        self._ranges: tuple[float, dict[str, Any]] | None = None  # (when asked, prom.history of the answers)
        # The last error as logged (English) and as a reader is told it: (english, (template, values)).
        self._error_said: tuple[str, tuple[str, dict[str, str]]] | None = None
        # Prometheus's answers are untrusted input: bounded in size before they are parsed.
        self.client = AsyncHTTPClient(force_instance=True, max_body_size=prom.MAX_BODY_BYTES)

    def close(self) -> None:
        self.client.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token_file:  # read each time: a rotated token is picked up
            with open(self.token_file, encoding="utf-8") as file:
                headers["Authorization"] = "Bearer " + file.read(4096).strip()
        return headers

    async def _get(self, path: str, params: dict[str, Any]) -> Any:
        url = f"{self.url}/api/v1/{path}?{urlencode(params)}"
        headers = self._headers()
        loop = asyncio.get_running_loop()
        if "Authorization" in headers:  # the bearer token: only to Prometheus's own listener (docs/security.md)
            owners = self.owners
            body = await loop.run_in_executor(
                None, lambda: get_with_credential(url, headers, owners, 10.0, prom.MAX_BODY_BYTES)
            )
        else:
            response = await self.client.fetch(
                HTTPRequest(url, headers=headers, request_timeout=10, follow_redirects=False)
            )
            body = response.body
        # Up to MAX_BODY_BYTES of JSON: parsed on the service's parser thread, so the event loop
        # keeps serving api/devices and the user servers' reports meanwhile.
        return await loop.run_in_executor(self._parser, lambda: wire.loads(body, max_bytes=prom.MAX_BODY_BYTES))

    @property
    def owners(self) -> frozenset[int]:
        """Who may listen at a ``http://`` Prometheus of this host and get the bearer token: root,
        the service's own account, and ``--prometheus-account`` (the account Prometheus runs as)."""
        owners = {0, os.getuid()}
        if self.account:
            try:
                owners.add(account_uid(self.account))
            except KeyError:
                pass  # no such account: root and the service only
        return frozenset(owners)

    async def _ask(self) -> tuple[float, Any, dict[str, Any], str | None]:
        """One instant query; the history's range queries once per history step (they are larger)."""
        now = time.time()
        step = max(self.interval_s, self.history_s / 300)
        asks = [self._get("query", {"query": prom.INSTANT_QUERY})]
        renew = self._ranges is None or now - self._ranges[0] >= step
        if renew:
            asks += [
                self._get("query_range", {"query": query, "start": now - self.history_s, "end": now, "step": step})
                for query in prom.range_queries().values()
            ]
        instant, *ranges = await asyncio.gather(*asks, return_exceptions=True)
        if renew:  # a failed range query costs the history, never the console
            for answer in ranges:
                if isinstance(answer, Exception) and not isinstance(instant, Exception):
                    log.warning("jupyter-gpu: no GPU history from Prometheus: %s", str(answer)[:300])
            # The history columns are built here, once per history step, not per console request.
            self._ranges = (
                now,
                prom.history(
                    {
                        key: None if isinstance(answer, BaseException) else answer
                        for key, answer in zip(prom.range_queries(), ranges, strict=True)
                    },
                    logged=self.logged,
                ),
            )
        error = None
        said: tuple[str, dict[str, str]] | None = None
        if isinstance(instant, (HTTPClientError, urllib.error.HTTPError)):  # urllib's: with the bearer token
            said = (N_("cannot read Prometheus at {url}: HTTP {code}"), {"url": self.url, "code": str(instant.code)})
        elif isinstance(instant, Exception):  # unreachable, not JSON, token file unreadable
            problem = str(instant)[:300] or type(instant).__name__
            said = (N_("cannot read Prometheus at {url}: {problem}"), {"url": self.url, "problem": problem})
        elif isinstance(instant, BaseException):
            raise instant
        if said:
            error = said[0].format(**said[1])  # the log's, in English
            self._error_said = (error, said)
            log.warning("jupyter-gpu: %s", error)
        answer = (now, None if error else instant, self._ranges[1] if self._ranges else {}, error)
        self.answer = answer
        return answer

    async def console(self, viewer: str, role: str, language: str | None = None) -> dict[str, Any]:
        """The console from Prometheus (asked at most once per interval, shared by requests), its
        messages in ``language`` (the asking happens outside it: the log stays English)."""
        cached = self.answer
        if cached is None or time.time() - cached[0] >= self.interval_s:
            if self._asking is None or self._asking.done():
                self._asking = asyncio.ensure_future(self._ask())
            cached = await asyncio.shield(self._asking)
        now, instant, past, error = cached
        with i18n.language_forced(language):  # no await in here
            said = self._error_said
            if error and said is not None and said[0] == error:
                error = _(said[1][0]).format(**said[1][1])
            data = prom.console(instant, viewer, role, past, self.idle_after_s, error, self.logged)
        data["timestamp"] = data["timestamp"] or now
        return data
