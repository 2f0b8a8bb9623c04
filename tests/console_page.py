"""The admin console in headless Chromium: opened as a hub user, and its first paint timed.

Shared by the console's browser tests (``tests/browser/test_hub_*console.py``) and the benchmarks
that time its first paint (``benchmarks/bench_hub.py``, ``bench_accounting.py``)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

USERS_ROWS = "#jg-users tr.jg-user"
USAGE_ROWS = "#jg-usage tr.jg-user"

#: The harness's own clock of the rows' first paint, the same for any tree: from the first animation
#: frame in which the ``rows``-th row of ``selector`` exists, a message posted to the page's task
#: queue runs after that frame's style, layout and paint; its ``performance.now()`` (milliseconds
#: since navigation start) lands in ``window.__jgPainted``. Added with ``add_init_script`` (outside
#: the page's CSP); it costs one ``querySelectorAll`` per frame until the rows are there.
PAINT_CLOCK = """(() => {
  const tick = () => {
    if (document.querySelectorAll(%(selector)s).length >= %(rows)d) {
      const channel = new MessageChannel();
      channel.port1.onmessage = () => { window.__jgPainted = performance.now(); };
      channel.port2.postMessage(0);
    } else requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})();"""


def open_console(
    browser: Any,
    url: str,
    token: str,
    *,
    height: int = 900,
    wait_for: tuple[str, ...] = (USERS_ROWS,),
    locale: str | None = None,
) -> Any:
    """A page of the console at ``url`` as the holder of ``token``, once ``wait_for`` are drawn;
    ``page.errors`` collects the page's uncaught errors. ``locale``: the browser's language (its
    ``Accept-Language`` and ``navigator.language``, e.g. ``zh-CN``)."""
    context = browser.new_context(
        viewport={"width": 1280, "height": height},
        extra_http_headers={"Authorization": f"token {token}"},
        **({"locale": locale} if locale else {}),
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    for selector in wait_for:
        page.wait_for_selector(selector, timeout=30_000)
    page.errors = errors
    return page


def first_paint(
    url: str,
    runs: int,
    drawn: tuple[str, ...] = (USERS_ROWS,),
    rows: int = 50,
    page_clock: list[float] | None = None,
    wait_until: str = "load",
    paint_clock: list[float] | None = None,
    data_clock: list[float] | None = None,
) -> list[float]:
    """Milliseconds from navigation until the ``rows``-th row of each table in ``drawn`` is shown, in
    ``runs`` fresh browser contexts as the admin (a first run, which also starts the service's
    sampler and HTTP clients, is not counted). ``page_clock`` gets the page's own figure of each
    counted run: milliseconds from its navigation start (``performance.timeOrigin``) until its
    script had drawn the users (``document.body.dataset.rendered``), without the harness's own
    costs (starting the navigation, Playwright's script injected into the page, its round trips).
    ``wait_until``: when ``page.goto`` returns and the wait for the rows begins ("load": after the
    page's load event, so Playwright's own set-up in the page starts only then; "commit": once the
    answer arrives, so that set-up overlaps the page's parsing and rendering). ``paint_clock`` gets
    the harness's figure of the same runs: milliseconds from navigation start until the frame that
    first drew the ``rows``-th row of the first of ``drawn`` was painted (:data:`PAINT_CLOCK`: the
    page clock stops when the script has built the rows, before the browser's style, layout and
    paint of them, the larger part on a loaded machine)."""
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as playwright:
        chromium = os.environ.get("JUPYTER_GPU_CHROMIUM", "/usr/bin/chromium")
        browser = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        for _ in range(runs + 1):
            context = browser.new_context(extra_http_headers={"Authorization": "token admin-token"})
            page = context.new_page()
            if paint_clock is not None:
                page.add_init_script(PAINT_CLOCK % {"selector": json.dumps(drawn[0]), "rows": rows})
            began = time.perf_counter()
            page.goto(url, wait_until=wait_until)
            for selector in drawn:
                page.locator(selector).nth(rows - 1).wait_for(timeout=30_000)  # the CSP forbids eval
            times.append((time.perf_counter() - began) * 1000)
            if data_clock is not None and len(times) > 1:
                data_clock.append(page.evaluate("performance.getEntriesByType('navigation')[0].responseEnd"))
            if page_clock is not None and len(times) > 1:
                page_clock.append(page.evaluate("Number(document.body.dataset.rendered) - performance.timeOrigin"))
            if paint_clock is not None and len(times) > 1:
                painted = None
                for _ in range(300):  # the frame after the rows' (polled: the CSP forbids eval)
                    painted = page.evaluate("window.__jgPainted ?? null")
                    if painted is not None:
                        break
                    page.wait_for_timeout(100)
                if painted is None:
                    raise TimeoutError("the page's rows were never painted")
                paint_clock.append(painted)
            context.close()
        browser.close()
    return times[1:]
