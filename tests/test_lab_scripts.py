"""scripts/lab.sh's helpers: the progress line says what moved, and the examples open from copies so
the checkout stays as cloned (issue 31, items 14 and 15)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _checkout(tmp_path: Path) -> Path:
    """A scratch checkout holding the scripts and the examples (the scripts run from its root)."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    for name in ("progress_step.sh", "examples_copy.sh"):
        shutil.copy2(ROOT / "scripts" / name, root / "scripts" / name)
    shutil.copytree(ROOT / "example_notebooks", root / "example_notebooks")
    return root


def _run(root: Path, *args: str) -> str:
    return subprocess.run(args, cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def test_the_unpacking_line_counts_the_packages_unpacked_so_far_and_names_the_latest(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    log = root / "setup.log"
    log.write_text("Collecting numpy\nInstalling collected packages: numpy, torch, jax\n")
    site = root / "venv" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    (site / "old_pkg-1.0.dist-info").mkdir()  # there before the install: not counted
    since = root / "setup.log.since"
    time.sleep(0.05)
    since.touch()
    os.utime(site / "old_pkg-1.0.dist-info", (1, 1))
    step = ("scripts/progress_step.sh", str(log), "venv", str(since))
    assert _run(root, *step) == "unpacking into .venv: 0 of 3 packages (latest: old_pkg)"
    time.sleep(0.05)
    (site / "numpy-2.1.0.dist-info").mkdir()
    first = _run(root, *step)
    time.sleep(0.05)
    (site / "torch-2.5.1.dist-info").mkdir()
    second = _run(root, *step)
    assert first == "unpacking into .venv: 1 of 3 packages (latest: numpy)"
    assert second == "unpacking into .venv: 2 of 3 packages (latest: torch)"  # what moved, not the same words


def test_other_steps_say_the_package_and_the_extension_build_says_how_far(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    log = root / "setup.log"
    since = root / "since"
    since.touch()
    step = ("scripts/progress_step.sh", str(log), "venv", str(since))
    assert _run(root, *step) == "starting"  # no log yet
    log.write_text("Collecting numpy\n  Downloading torch-2.5.1-cp312-manylinux.whl (906 MB)\n")
    assert _run(root, *step) == "Downloading torch-2.5.1-cp312-manylinux.whl (906 MB)"
    (root / "labextension" / "node_modules" / "a").mkdir(parents=True)
    (root / "labextension" / "lib").mkdir()
    (root / "labextension" / "lib" / "index.js").write_text("")
    log.write_text("Building editable for jupyter_gpu (pyproject.toml): started\n")
    assert _run(root, *step) == (
        "building jupyter_gpu's JupyterLab extension: 1 npm packages in place, 1 modules compiled"
    )


def test_the_examples_open_from_copies_that_keep_the_users_changes(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    original = (root / "example_notebooks" / "monitor.ipynb").read_bytes()
    dest = _run(root, "scripts/examples_copy.sh", ".venv/examples")
    copy = root / dest / "monitor.ipynb"
    assert copy.read_bytes() == original
    # Used (autosave): the copy changes, the checkout does not; a second start keeps the user's copy.
    copy.write_text('{"changed": true}')
    _run(root, "scripts/examples_copy.sh", ".venv/examples")
    assert copy.read_text() == '{"changed": true}'
    assert (root / "example_notebooks" / "monitor.ipynb").read_bytes() == original
    # A newer checkout (git pull) brings its new version.
    later = time.time() + 10
    os.utime(root / "example_notebooks" / "monitor.ipynb", (later, later))
    _run(root, "scripts/examples_copy.sh", ".venv/examples")
    assert copy.read_bytes() == original


def test_lab_sh_serves_the_copies_not_the_checkout() -> None:
    lab = (ROOT / "scripts" / "lab.sh").read_text(encoding="utf-8")
    assert "--ServerApp.root_dir=example_notebooks" not in lab
    assert "examples=$(scripts/examples_copy.sh .venv/examples)" in lab
    assert '--ServerApp.root_dir="$examples"' in lab
