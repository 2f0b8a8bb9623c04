"""One background thread that takes GPU snapshots while anybody wants them.

The notebook panel and the server extension both sit on a :class:`Sampler`: NVML is read on this
thread, never on a kernel's main thread or on the server's event loop, and however many panels or
HTTP clients look, NVML is read once per interval.

Demand comes in two forms:

- :meth:`Sampler.subscribe` — a listener called with every new snapshot (a widget). The thread runs
  while at least one listener is subscribed.
- :meth:`Sampler.touch` — "someone just looked" (an HTTP poll, a Prometheus scrape). The thread runs
  until ``linger_s`` seconds pass without a touch, so an idle server makes no NVML calls at all.

When demand ends the thread exits (no leaked threads); the next demand starts a new one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..core.snapshot import Snapshot

log = logging.getLogger(__name__)

Listener = Callable[[Snapshot], None]


class Sampler:
    """Samples ``take()`` every ``interval_s`` seconds on a daemon thread while there is demand."""

    def __init__(
        self,
        interval_s: float = 1.0,
        take: Callable[[], Snapshot] | None = None,
        linger_s: float = 30.0,
        name: str = "jupyter-gpu-sampler",
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {interval_s}")
        if take is None:
            from .nvml import snapshot  # late, as before: a sampler with its own take() never imports nvml

            take = snapshot
        self._take = take
        self._interval_s = interval_s
        self.linger_s = linger_s
        self.name = name
        self.samples_taken = 0
        self._listeners: list[Listener] = []
        self._latest: Snapshot | None = None
        self._last_touch = float("-inf")
        self._thread: threading.Thread | None = None
        self._condition = threading.Condition()
        self._wake = threading.Event()
        self._closed = False

    # -- demand

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(snapshot)`` from the sampling thread after every sample.

        Returns a function that unsubscribes. If a snapshot exists already, the listener is not
        called with it; read :attr:`latest` for that.
        """
        with self._condition:
            self._listeners.append(listener)
            self._ensure_running()

        def unsubscribe() -> None:
            with self._condition:
                if listener in self._listeners:
                    self._listeners.remove(listener)
            self._wake.set()  # let the thread notice if it was the last one

        return unsubscribe

    def touch(self) -> None:
        """Record demand without a listener: keeps sampling for the next ``linger_s`` seconds."""
        with self._condition:
            self._last_touch = time.monotonic()
            self._ensure_running()

    # -- results

    @property
    def latest(self) -> Snapshot | None:
        """The newest snapshot, or None before the first one."""
        return self._latest

    def wait_for_snapshot(self, newer_than: float | None = None, timeout: float | None = None) -> Snapshot | None:
        """Block until a snapshot with ``timestamp > newer_than`` exists (any snapshot if None).

        Returns it, or the newest one so far (possibly None) when ``timeout`` passes first. Also
        records demand, like :meth:`touch`.
        """
        self.touch()

        def ready() -> bool:
            return self._latest is not None and (newer_than is None or self._latest.timestamp > newer_than)

        with self._condition:
            self._condition.wait_for(ready, timeout)
            return self._latest

    # -- control

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        if value <= 0:
            raise ValueError(f"interval_s must be positive, not {value}")
        self._interval_s = value
        self._wake.set()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def listener_count(self) -> int:
        return len(self._listeners)

    def close(self, timeout: float = 5.0) -> None:
        """Stop sampling now and wait for the thread to end. The sampler cannot be restarted."""
        with self._condition:
            self._closed = True
            self._listeners.clear()
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the thread

    def _wanted(self) -> bool:
        return not self._closed and (bool(self._listeners) or time.monotonic() - self._last_touch < self.linger_s)

    def _ensure_running(self) -> None:
        # Called with the condition held.
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._condition:
                if not self._wanted():
                    self._thread = None
                    return
                listeners = list(self._listeners)
            try:
                snapshot = self._take()
            except Exception as error:  # the reader never raises, but a custom take() might
                log.exception("taking a GPU snapshot failed")
                snapshot = Snapshot(nvml_available=False, timestamp=time.time(), error=str(error))
            with self._condition:
                self._latest = snapshot
                self.samples_taken += 1
                self._condition.notify_all()
            for listener in listeners:
                try:
                    listener(snapshot)
                except Exception:
                    log.exception("a GPU snapshot listener failed")
            self._wake.wait(self._interval_s)
            self._wake.clear()
