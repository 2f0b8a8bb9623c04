"""``%gpu_watch`` and its core (jupyter_gpu.kernel.watch): figures against scenario changes during a cell."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from support import UNDER_LOAD_S, wait_until

from jupyter_gpu.kernel import monitor_magics
from jupyter_gpu.kernel.watch import FRAMEWORK_PROBES, SAMPLER_NAME, CellWatch, format_change

MIB = 1024**2
PID = os.getpid()


def hold(scenario: Any, mib_by_gpu: dict[int, int]) -> None:
    """Make this test process hold ``mib`` MiB on each listed GPU (and nothing elsewhere)."""

    def change(data: dict[str, Any]) -> None:
        for index, gpu in enumerate(data["gpus"]):
            gpu["processes"] = [p for p in gpu.get("processes", []) if p["pid"] != PID]
            if index in mib_by_gpu:
                gpu["processes"].append({"pid": PID, "memory_mib": mib_by_gpu[index]})

    scenario.update(change)


def watch_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == SAMPLER_NAME]


def test_change_and_peak_over_a_cell(scenario: Any) -> None:
    hold(scenario, {0: 1000})
    watch = CellWatch(interval_s=0.05, probes={})
    watch.start()
    assert len(watch_threads()) == 1
    hold(scenario, {0: 3000, 1: 500})  # the peak, only visible to the background sampler
    # until the sampler has seen it (a fixed 0.5 s held only while the sampler got the CPU in time)
    wait_until(lambda: watch._peak == 3500 * MIB and watch._samples >= 3, UNDER_LOAD_S, "the peak to be sampled")
    hold(scenario, {0: 2000})
    report = watch.stop()
    assert watch_threads() == []
    assert report.nvml_available
    assert (report.before, report.after, report.peak) == (1000 * MIB, 2000 * MIB, 3500 * MIB)
    assert report.change == 1000 * MIB
    assert report.gpus == (0, 1)
    assert report.samples >= 4
    assert report.line() == (
        f"GPU memory of this kernel (PID {PID}): +1000 MiB over the cell (1000 MiB → 2 GiB), "
        "peak 3.4 GiB during the cell on GPU 0,1"
    )


def test_memory_freed_during_a_cell(scenario: Any) -> None:
    hold(scenario, {1: 4096})
    watch = CellWatch(interval_s=0.05, probes={})
    watch.start()
    hold(scenario, {})
    report = watch.stop()
    assert report.change == -4096 * MIB and report.peak == 4096 * MIB
    assert "-4 GiB over the cell (4 GiB → 0 MiB), peak 4 GiB" in report.line()


def test_nothing_held(scenario: Any) -> None:
    watch = CellWatch(interval_s=0.05, probes={})
    watch.start()
    assert watch.stop().line() == f"GPU memory of this kernel (PID {PID}): none held"


def test_no_nvml(scenario: Any) -> None:
    scenario.update(lambda data: data.update(fault="library_not_found"))
    watch = CellWatch(interval_s=0.05, probes={})
    watch.start()
    assert watch_threads() == []  # nothing to sample
    report = watch.stop()
    assert not report.nvml_available
    assert "not measured, NVML unavailable:" in report.line()


def test_format_change() -> None:
    assert format_change(0) == "±0 MiB"
    assert format_change(3 * MIB) == "+3 MiB"
    assert format_change(-(3 * 1024**3) // 2) == "-1.5 GiB"


# -- framework counters: only where the framework is initialized already


def fake_torch(initialized: bool, allocated: list[int], peaks: list[int]) -> types.ModuleType:
    torch = types.ModuleType("torch")
    calls: list[str] = []

    def record(name: str, value: Any) -> Any:
        def function(*args: Any) -> Any:
            calls.append(name)
            return value(*args) if callable(value) else value

        return function

    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        _initialized=initialized,  # the flag torch.cuda.is_initialized() reads
        is_initialized=record("is_initialized", initialized),
        is_available=record("is_available", lambda: pytest.fail("is_available() calls cuInit")),
        device_count=record("device_count", len(allocated)),
        get_device_properties=record("get_device_properties", lambda i: types.SimpleNamespace(name="GPU")),
        memory_allocated=record("memory_allocated", lambda i: allocated[i]),
        max_memory_allocated=record("max_memory_allocated", lambda i: peaks[i]),
        memory_reserved=record("memory_reserved", lambda i: allocated[i]),
    )
    torch.calls = calls  # type: ignore[attr-defined]
    return torch


def install_torch(monkeypatch: pytest.MonkeyPatch, torch: types.ModuleType) -> None:
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.cuda", torch.cuda)


def test_uninitialized_torch_is_not_touched(scenario: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = fake_torch(initialized=False, allocated=[5], peaks=[5])
    install_torch(monkeypatch, torch)
    watch = CellWatch(interval_s=0.05, probes={"torch": FRAMEWORK_PROBES["torch"]})
    watch.start()
    report = watch.stop()
    assert report.frameworks == ()
    assert torch.calls == []  # not even a call: the initialized flag is read from the module
    assert "torch" not in report.line()


def test_initialized_torch_counters_join_the_line(scenario: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    allocated, peaks = [512 * MIB, 0], [600 * MIB, 0]
    install_torch(monkeypatch, fake_torch(True, allocated, peaks))
    hold(scenario, {0: 1000})
    watch = CellWatch(interval_s=0.05, probes={"torch": FRAMEWORK_PROBES["torch"]})
    watch.start()
    allocated[0], peaks[0] = 1536 * MIB, 2048 * MIB  # the cell allocates, with a transient peak
    hold(scenario, {0: 2600})
    report = watch.stop()
    (torch,) = report.frameworks
    assert (torch.framework, torch.before, torch.after, torch.peak) == ("torch", 512 * MIB, 1536 * MIB, 2048 * MIB)
    assert report.line().endswith(" · torch: +1 GiB in use, peak 2 GiB")


def test_an_old_framework_peak_is_not_this_cells_peak(scenario: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    allocated, peaks = [100 * MIB], [5000 * MIB]  # a peak reached in an earlier cell
    install_torch(monkeypatch, fake_torch(True, allocated, peaks))
    watch = CellWatch(interval_s=0.05, probes={"torch": FRAMEWORK_PROBES["torch"]})
    watch.start()
    allocated[0] = 300 * MIB
    (torch,) = watch.stop().frameworks
    assert torch.peak == 300 * MIB


def test_measuring_never_imports_or_initializes_a_framework(scenario: Any) -> None:
    code = (
        "import sys\n"
        "from jupyter_gpu.kernel.watch import CellWatch\n"
        "w = CellWatch(interval_s=0.05); w.start(); line = w.stop().line()\n"
        "print(sorted(m for m in ('torch', 'jax', 'tensorflow', 'keras') if m in sys.modules))\n"
        "import torch\n"
        "w.start(); report = w.stop()\n"
        "print(report.frameworks, torch.cuda.is_initialized())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.splitlines() == ["[]", "() False"]


# -- the magic


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    monitor_magics.register(ip)
    yield ip
    monitor_magics.unregister(ip)


def test_gpu_watch_reports_after_each_cell(
    shell: InteractiveShell, scenario: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    hold(scenario, {0: 1000})
    shell.run_line_magic("gpu_watch", "on --interval 0.05")
    assert "%gpu_watch on" in capsys.readouterr().out

    magics = shell.magics_manager.registry["MonitorMagics"]

    def cell_body() -> None:
        hold(scenario, {0: 6144})
        wait_until(lambda: magics.watch._peak == 6144 * MIB, UNDER_LOAD_S, "the peak to be sampled")
        hold(scenario, {0: 3072})
        print("cell output")

    shell.user_ns["cell_body"] = cell_body
    result = shell.run_cell("cell_body()")
    assert result.success
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "cell output",
        f"GPU memory of this kernel (PID {PID}): +2 GiB over the cell (1000 MiB → 3 GiB), "
        "peak 6 GiB during the cell on GPU 0",
    ]
    assert watch_threads() == []  # no sampling between cells

    shell.run_cell("pass")
    assert (
        capsys.readouterr()
        .out.strip()
        .endswith("±0 MiB over the cell (3 GiB → 3 GiB), peak 3 GiB during the cell on GPU 0")
    )

    shell.run_line_magic("gpu_watch", "off")
    shell.run_cell("pass")
    assert capsys.readouterr().out == "%gpu_watch off\n"
    assert magics._pre_run_cell not in shell.events.callbacks["pre_run_cell"]
    assert magics._post_run_cell not in shell.events.callbacks["post_run_cell"]


def test_a_failing_cell_is_reported_too(
    shell: InteractiveShell, scenario: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("gpu_watch", "on")
    capsys.readouterr()
    shell.run_cell("1/0")
    assert "GPU memory of this kernel" in capsys.readouterr().out


@pytest.mark.parametrize("line", ["maybe", "on --interval -1", "on --interval x", "on off"])
def test_bad_input_is_a_usage_error_and_changes_nothing(shell: InteractiveShell, line: str) -> None:
    with pytest.raises(UsageError) as error:
        shell.run_line_magic("gpu_watch", line)
    assert "\n" not in str(error.value)
    assert shell.magics_manager.registry["MonitorMagics"].watch is None


def test_unregister_removes_hooks_and_magics(scenario: Any) -> None:
    ip = InteractiveShell.instance()
    monitor_magics.register(ip)
    monitor_magics.register(ip)  # twice: no effect
    ip.run_line_magic("gpu_watch", "on")
    magics = ip.magics_manager.registry["MonitorMagics"]
    monitor_magics.unregister(ip)
    assert magics._post_run_cell not in ip.events.callbacks["post_run_cell"]
    assert ip.find_line_magic("gpu_watch") is None and ip.find_line_magic("gpu_monitor") is None
    monitor_magics.unregister(ip)  # twice: no effect
