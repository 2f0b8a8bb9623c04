"""Post-import hooks: run code right after a module is imported, without importing it."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    return subprocess.check_output([sys.executable, "-c", textwrap.dedent(code)], text=True).strip()


def test_callback_runs_after_the_module_body_once():
    out = run("""
        from jupyter_gpu.core.import_hooks import when_imported
        seen = []
        when_imported("json", lambda m: seen.append(hasattr(m, "dumps")))
        assert seen == []
        import json.decoder, json, importlib
        importlib.import_module("json")
        print(seen)
    """)
    assert out == "[True]"


def test_callback_runs_now_when_already_imported_and_errors_never_escape():
    out = run("""
        import json
        from jupyter_gpu.core.import_hooks import when_imported
        seen = []
        when_imported("json", lambda m: seen.append("now"))
        when_imported("csv", lambda m: 1 / 0)
        import csv
        print(seen, csv.__name__)
    """)
    assert out == "['now'] csv"


def test_cancel_forgets_a_callback():
    out = run("""
        from jupyter_gpu.core.import_hooks import when_imported, cancel, pending
        seen = []
        callback = lambda m: seen.append(1)
        when_imported("csv", callback)
        cancel("csv", callback)
        import csv
        print(seen, pending("csv"))
    """)
    assert out == "[] []"
