"""Browser tests' layout helper, shared by the sidebar tests of JupyterLab and Notebook 7."""

from __future__ import annotations

from typing import Any


def drag_side_panel_to_its_minimum(page: Any) -> None:
    """Drag JupyterLab's left side panel edge as far left as it goes: the sidebar's minimum, 250 px."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    box = handle.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(60, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
