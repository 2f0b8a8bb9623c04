"""Packaging of the JupyterLab extension: the sdist installs without node, bundles are reproducible.

``labextension/build_hook.py`` decides at ``pip install`` time whether to run npm (unit tests
below). The two ``slow`` tests build for real: an sdist installed by pip with no npm on ``PATH``, and
the bundle built twice in different directories, byte for byte the same.
"""

from __future__ import annotations

import filecmp
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "labextension"
BUILT = REPO / "jupyter_gpu" / "labextension"
VENV_BIN = Path(sys.executable).parent


def load_hook():
    spec = importlib.util.spec_from_file_location("jupyter_gpu_build_hook", PACKAGE / "build_hook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = load_hook()


def make_package(tmp_path: Path) -> tuple[Path, Path]:
    package = tmp_path / "labextension"
    (package / "src").mkdir(parents=True)
    (package / "src" / "index.ts").write_text("export default 1;\n")
    (package / "package.json").write_text('{"name": "x"}\n')
    return package, tmp_path / "out"


def make_bundle(output: Path, digest: str | None) -> None:
    (output / "static").mkdir(parents=True)
    (output / "package.json").write_text("{}")
    if digest is not None:
        (output / hook.STAMP).write_text(digest + "\n")


def test_a_bundle_built_from_these_sources_is_reused_without_npm(tmp_path):
    package, output = make_package(tmp_path)
    make_bundle(output, hook.source_digest(package))
    assert hook.decide(package, output, npm_found=False) == "skip"
    assert hook.decide(package, output, npm_found=True) == "skip"
    assert hook.decide(package, output, npm_found=True, mode="always") == "build"


@pytest.mark.parametrize("edit", ["src/index.ts", "style/base.css", "package.json"])
def test_changed_sources_are_rebuilt_with_npm_and_the_shipped_bundle_used_without(tmp_path, edit):
    package, output = make_package(tmp_path)
    make_bundle(output, hook.source_digest(package))
    (package / edit).parent.mkdir(parents=True, exist_ok=True)
    (package / edit).write_text("/* changed */\n")
    assert hook.decide(package, output, npm_found=True) == "build"
    assert hook.decide(package, output, npm_found=False) == "shipped"
    assert hook.decide(package, output, npm_found=False, mode="never") == "skip"


def test_no_bundle_and_no_npm_is_one_clear_error(tmp_path):
    package, output = make_package(tmp_path)
    assert hook.decide(package, output, npm_found=True) == "build"
    make_bundle(output, None)  # built by hand (npm run build:prod): no digest, rebuilt when possible
    assert hook.decide(package, output, npm_found=True) == "build"
    shutil.rmtree(output)
    with pytest.raises(RuntimeError, match=r"npm is not on PATH: install Node\.js"):
        hook.decide(package, output, npm_found=False)


def test_the_digest_covers_names_and_contents(tmp_path):
    package, _ = make_package(tmp_path)
    first = hook.source_digest(package)
    (package / "src" / "index.ts").rename(package / "src" / "main.ts")
    assert hook.source_digest(package) != first
    (package / "src" / "main.ts").rename(package / "src" / "index.ts")
    assert hook.source_digest(package) == first


def repo_files() -> list[str]:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [name for name in files.decode().split("\0") if name]


@pytest.mark.slow
def test_the_sdist_installs_without_npm_and_the_wheel_carries_the_shipped_bundle(tmp_path):
    if not (BUILT / "static").is_dir():
        pytest.skip("build the extension first (cd labextension && npm run build:prod)")
    pytest.importorskip("hatchling")
    pytest.importorskip("hatch_jupyter_builder")
    # A checkout with a built extension whose digest matches its sources (as `python -m build`
    # leaves it after running npm).
    source = tmp_path / "source"
    for name in repo_files():
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    shutil.copytree(BUILT, source / "jupyter_gpu" / "labextension", ignore=shutil.ignore_patterns(hook.STAMP))
    (source / "jupyter_gpu" / "labextension" / hook.STAMP).write_text(
        hook.source_digest(source / "labextension") + "\n"
    )

    no_npm = {**os.environ, "PATH": str(VENV_BIN)}  # python, pip, jupyter-builder; no node, no npm
    assert shutil.which("npm", path=no_npm["PATH"]) is None
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(tmp_path / "dist")],
        cwd=source,
        env=no_npm,
        check=True,
        capture_output=True,
    )
    sdist = next((tmp_path / "dist").glob("jupyter_gpu-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        root = names[0].split("/")[0]
        shipped = {
            name.split("/jupyter_gpu/labextension/", 1)[1]: archive.extractfile(name).read()
            for name in names
            if "/jupyter_gpu/labextension/static/" in name
        }
    assert any(name.startswith("static/remoteEntry.") for name in shipped)
    assert f"{root}/labextension/build_hook.py" in names

    # pip builds the sdist's wheel with npm nowhere on PATH (where it failed with "Could not find cmd
    # (npm) in path"); the wheel holds the shipped bundle byte for byte (the issue: a different
    # remoteEntry hash). Nothing here installs into the running environment.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "-w",
            str(tmp_path / "wheel"),
            str(sdist),
        ],
        env=no_npm,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Could not find cmd (npm)" not in result.stdout + result.stderr
    wheel = next((tmp_path / "wheel").glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        for name, data in shipped.items():
            assert archive.read(f"jupyter_gpu-0.1.0.data/data/share/jupyter/labextensions/jupyter-gpu/{name}") == data

    # Installed into a throwaway venv (pip, no network, no dependencies): the extension lands where
    # JupyterLab looks for prebuilt extensions.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        env=no_npm,
        check=True,
        capture_output=True,
    )
    installed = venv / "share" / "jupyter" / "labextensions" / "jupyter-gpu"
    for name, data in shipped.items():
        assert (installed / name).read_bytes() == data, name
    assert (installed / "install.json").is_file()


@pytest.mark.slow
def test_two_builds_in_different_directories_are_byte_identical(tmp_path):
    if shutil.which("npm") is None or not (PACKAGE / "node_modules").is_dir():
        pytest.skip("needs npm and labextension/node_modules (cd labextension && npm ci)")
    outputs = []
    for checkout in (tmp_path / "a", tmp_path / "somewhere" / "much" / "deeper"):
        package = checkout / "labextension"
        package.mkdir(parents=True)
        for name in ("src", "style", "schema"):
            shutil.copytree(PACKAGE / name, package / name)
        for name in ("package.json", "package-lock.json", "tsconfig.json", "webpack.config.js", "install.json"):
            shutil.copy2(PACKAGE / name, package / name)
        # Hard links: a real copy of node_modules at another path, in a second instead of a minute.
        subprocess.run(["cp", "-al", str(PACKAGE / "node_modules"), str(package / "node_modules")], check=True)
        env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
        result = subprocess.run(["npm", "run", "build:prod"], cwd=package, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        outputs.append(checkout / "jupyter_gpu" / "labextension")
    first, second = outputs
    comparison = filecmp.dircmp(first, second)
    assert sorted(os.listdir(first / "static")) == sorted(os.listdir(second / "static"))
    for name in os.listdir(first / "static"):
        assert (first / "static" / name).read_bytes() == (second / "static" / name).read_bytes(), name
    assert (first / "package.json").read_bytes() == (second / "package.json").read_bytes()
    assert not comparison.diff_files and not comparison.left_only and not comparison.right_only
    for path in (first / "static").iterdir():  # no build directory leaks into the bundle
        assert str(tmp_path).encode() not in path.read_bytes()
