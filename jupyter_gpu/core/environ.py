"""The environment the process was started with (cheap to import: the extension loads it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["environment_at_process_start"]


def environment_at_process_start() -> Mapping[str, str]:
    """The environment this process was started with, whatever its code changed since.

    On Linux that is ``/proc/self/environ`` (the environment block the process was executed with;
    assignments to ``os.environ`` do not change it). Elsewhere, ``os.environ`` as it is now.
    """
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    environment = {}
    for entry in raw.split(b"\0"):
        name, separator, value = entry.partition(b"=")
        if separator:
            environment[os.fsdecode(name)] = os.fsdecode(value)
    return environment
