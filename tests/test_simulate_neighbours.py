"""The simulation's file against another user (issue 27 item 5, docs/security.md): a scenario another
user could have written is refused with one line, at start and when a running process re-reads it,
and a relative path is pinned to one absolute file at start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpu import simulate
from jupyter_gpu.core.files import others_can_replace

ROOT = Path(__file__).resolve().parents[1]


def _write_hers(path: str) -> None:
    """As the neighbour: her own world, 8 idle GPUs, at the victim's path."""
    with open(path, "w") as file:
        json.dump({"gpus": [{"utilization": 99, "name": "hers"}] * 8}, file)


def _mkdir(path: str) -> None:
    os.mkdir(path, 0o755)


def _link(target: str, path: str) -> None:
    os.symlink(target, path)


def test_a_running_process_refuses_the_file_the_neighbour_put_in_place_of_its_own(neighbour, shared_tmp: Path) -> None:
    """The issue's scenario: the victim's file in a shared sticky folder is removed, the neighbour
    writes hers at the same path, the victim's running process re-reads it."""
    path = shared_tmp / "x.json"
    simulate.write_scenario(path, {"gpus": [{"utilization": 40}]})
    source = simulate.ScenarioSource(str(path))
    assert [g.utilization for g in source.current().gpus] == [40]
    path.unlink()
    neighbour.run(_write_hers, str(path))
    assert neighbour.owns(path)
    assert [g.utilization for g in source.current().gpus] == [40]  # the last good world, not hers
    line = source.rejection()
    assert line is not None and "\n" not in line
    assert "refused, another user could have written it" in line and f"'{neighbour.name}'" in line
    with pytest.raises(simulate.ScenarioError, match=rf"^JUPYTER_GPU_SIMULATE=.*owned by '{neighbour.name}'") as error:
        simulate.ScenarioSource(str(path))  # and a process starting now refuses it at once
    assert "\n" not in str(error.value)


def test_the_neighbours_file_never_reaches_pynvml(neighbour, shared_tmp: Path) -> None:
    import pynvml

    path = shared_tmp / "x.json"
    simulate.write_scenario(path, {"gpus": [{"utilization": 40}]})
    library = simulate.install(str(path))
    try:
        pynvml.nvmlInit()
        path.unlink()
        neighbour.run(_write_hers, str(path))
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 40
        assert pynvml.nvmlDeviceGetCount() == 1
        assert f"owned by '{neighbour.name}'" in (library.source.rejection() or "")
        pynvml.nvmlShutdown()
    finally:
        simulate.uninstall()


def test_a_scenario_in_a_folder_others_can_write_without_the_sticky_bit_is_refused(shared_tmp: Path) -> None:
    folder = shared_tmp / "open"
    folder.mkdir()
    folder.chmod(0o777)
    path = folder / "s.json"
    simulate.write_scenario(path, {"gpus": [{}]})
    with pytest.raises(simulate.ScenarioError, match="writable by other users without the sticky bit") as error:
        simulate.ScenarioSource(str(path))
    assert str(error.value).startswith("JUPYTER_GPU_SIMULATE=") and "\n" not in str(error.value)
    folder.chmod(0o1777)  # the sticky bit: others cannot remove or rename the victim's file
    assert len(simulate.ScenarioSource(str(path)).current().gpus) == 1


def test_a_folder_made_open_later_refuses_the_next_edit(shared_tmp: Path) -> None:
    folder = shared_tmp / "mine"
    folder.mkdir()
    path = folder / "s.json"
    simulate.write_scenario(path, {"gpus": [{"utilization": 5}]})
    source = simulate.ScenarioSource(str(path))
    folder.chmod(0o777)
    simulate.write_scenario(path, {"gpus": [{"utilization": 6}]})
    assert source.current().gpus[0].utilization == 5
    assert "without the sticky bit" in (source.rejection() or "")


def test_a_scenario_in_the_neighbours_folder_is_refused(neighbour, shared_tmp: Path) -> None:
    folder = shared_tmp / "hers"
    neighbour.run(_mkdir, str(folder))
    path = folder / "s.json"
    path.write_text(json.dumps({"gpus": [{}]}))  # root writes there; she can still replace it
    with pytest.raises(simulate.ScenarioError, match=rf"folder .*hers is owned by '{neighbour.name}'"):
        simulate.ScenarioSource(str(path))


def test_a_link_the_neighbour_planted_is_not_followed(neighbour, shared_tmp: Path, tmp_path: Path) -> None:
    mine = tmp_path / "s.json"
    simulate.write_scenario(mine, {"gpus": [{}]})
    link = shared_tmp / "link.json"
    neighbour.run(_link, str(mine), str(link))
    with pytest.raises(simulate.ScenarioError, match=rf"the link .*link.json is owned by '{neighbour.name}'"):
        simulate.ScenarioSource(str(link))


def test_links_of_ones_own_are_followed_once_and_pinned(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    simulate.write_scenario(first, {"gpus": [{"utilization": 1}]})
    simulate.write_scenario(second, {"gpus": [{"utilization": 2}]})
    link = tmp_path / "s.json"
    link.symlink_to(first)
    source = simulate.ScenarioSource(str(link))
    assert source.pinned == str(first)
    link.unlink()
    link.symlink_to(second)
    assert source.current().gpus[0].utilization == 1  # the pinned file, not where the link points now
    first.unlink()
    first.symlink_to(second)  # a link put in the pinned file's place is refused, not followed
    assert source.current().gpus[0].utilization == 1
    assert "a link was put in its place" in (source.rejection() or "")


def test_group_writable_folders_are_open_unless_the_group_is_the_users_own(tmp_path: Path) -> None:
    folder = tmp_path / "group"
    folder.mkdir()
    path = folder / "s.json"
    path.write_text("{}")
    folder.chmod(0o775)
    os.chown(folder, 0, 0)  # group root: root's own private group
    assert others_can_replace(str(path), uid=0) is None
    try:
        os.chown(folder, 0, 100)  # "users" on most systems: other members may write
    except PermissionError:
        pytest.skip("chown needs root")
    assert "writable by other users without the sticky bit" in (others_can_replace(str(path), uid=0) or "")


def test_a_relative_path_is_pinned_at_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    simulate.write_scenario(here / "s.json", {"gpus": [{"utilization": 11}]})
    simulate.write_scenario(there / "s.json", {"gpus": [{"utilization": 22}] * 2})
    monkeypatch.chdir(here)
    monkeypatch.setenv(simulate.ENV_VAR, "s.json")
    library = simulate.install_from_environment()
    try:
        assert library is not None and os.environ[simulate.ENV_VAR] == str(here / "s.json")  # children get it
        os.chdir(there)
        simulate.write_scenario(here / "s.json", {"gpus": [{"utilization": 12}]})
        assert [g.utilization for g in library.source.current().gpus] == [12]  # the same file, re-read
        assert simulate.install_from_environment() is library
    finally:
        simulate.uninstall()


def test_a_child_started_with_a_relative_path_reads_the_file_of_its_starting_folder(tmp_path: Path) -> None:
    """The ``.pth`` hook pins the path at interpreter start: a ``chdir`` before ``import pynvml``
    (a kernel moving to its notebook's folder) changes nothing."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    simulate.write_scenario(here / "s.json", {"gpus": [{"utilization": 11}]})
    simulate.write_scenario(there / "s.json", {"gpus": [{"utilization": 22}]})
    code = (
        "import os; os.chdir(os.environ['THERE']); import pynvml; pynvml.nvmlInit(); "
        "print(pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(0)).gpu, "
        "os.environ['JUPYTER_GPU_SIMULATE'])"
    )
    env = {**os.environ, "JUPYTER_GPU_SIMULATE": "s.json", "THERE": str(there)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", code], cwd=here, env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["11", str(here / "s.json")], out.stderr
