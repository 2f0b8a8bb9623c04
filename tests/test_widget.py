"""The notebook panel (jupyter_gpu.panel.widget): model values, states, escaping, one shared sampler.

No browser and no kernel: ipywidgets falls back to a dummy comm, so the widget models (the values a
front end would render) can be read directly.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support import UNDER_LOAD_S, wait_until

from jupyter_gpu import simulate
from jupyter_gpu.core.units import GIB
from jupyter_gpu.panel import widget
from jupyter_gpu.panel.widget import SAMPLER_NAME, GPUMonitor
from jupyter_gpu.sources import nvml

EVIL = "<img src=x onerror=alert(1)>"


def sampler_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == SAMPLER_NAME]


@pytest.fixture(autouse=True)
def no_panels_left() -> Iterator[None]:
    yield
    widget.close_all()
    wait_until(lambda: not sampler_threads(), timeout_s=UNDER_LOAD_S)


def shown(panel: GPUMonitor, condition: Any, what: str) -> None:
    """Wait until ``condition`` holds and the update that made it true has finished: the sampler's
    thread sets a row's values one after the other (memory, then utilization, temperature, power,
    chart, processes), so a value set first can be read while the others are still the old ones."""
    wait_until(condition, what=what)
    with panel._update_lock:  # an update under way when the condition became true ends first
        pass


def test_model_values_follow_scenario_changes(scenario: Any) -> None:
    panel = GPUMonitor(interval_s=0.1)
    wait_until(lambda: len(panel.rows) == 2)
    first, second = panel.rows
    assert "GPU 0" in first.title.value and "A100" in first.title.value
    shown(panel, lambda: first.memory_text.value.startswith("0 MiB / 80 GiB"), "GPU 0's memory")
    # Said once per card: in the chart's legend; the label shows only in the compact panel (CSS).
    assert first.utilization.value == "util 0 %" and "jupyter-gpu-mig" not in first.utilization._dom_classes
    assert "util <b>0 %</b>" in first.history_chart.value
    assert first.temperature.value == "32 °C"
    assert first.power.value == "58 W / 400 W"

    def busy(data: dict[str, Any]) -> None:
        data["gpus"][1].update(utilization=88, temperature=77, power_w=301)
        data["gpus"][1]["processes"] = [{"pid": 4242, "memory_mib": 40960, "user": "alice", "name": "train"}]

    scenario.update(busy)
    shown(panel, lambda: second.memory_text.value == "40 GiB / 80 GiB", "GPU 1's new memory")
    wait_until(lambda: "util <b>88 %</b>" in second.history_chart.value)
    assert second.temperature.value == "77 °C"
    assert second.power.value == "301 W / 400 W"
    assert "alice" in second.processes.value and "4242" in second.processes.value
    assert "40 GiB" in second.processes.value
    assert "No processes" in first.processes.value  # the sidebar's words
    # the history chart gained the new sample: memory 50 % drawn
    assert "<polyline" in second.history_chart.value
    assert 50.0 in second.memory_history


def test_a_row_is_filled_before_it_is_shown(scenario: Any) -> None:
    panel = GPUMonitor(start=False)
    titles_when_shown: list[list[str]] = []
    panel.rows_box.observe(
        lambda _change: titles_when_shown.append([row.title.value for row in panel.rows]), "children"
    )
    scenario.write(simulate.plausible_gpus(3))  # a card more: a new row
    panel.update(nvml.snapshot())
    assert titles_when_shown and len(titles_when_shown[-1]) == 3
    assert all("GPU" in title for title in titles_when_shown[-1])


def test_simulated_gpus_are_announced(scenario: Any) -> None:
    panel = GPUMonitor(start=False)
    panel.update(nvml.snapshot())
    assert "simulated GPUs" in panel.status.value
    assert "2 GPUs" in panel.status.value


def test_data_rendered_as_html_is_escaped(scenario: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("JUPYTER_GPU_SHOW_OTHER_NAMES", "1")  # other users' names shown (admin)

    def evil(data: dict[str, Any]) -> None:
        data["gpus"][0]["name"] = f"A100 {EVIL}"
        data["gpus"][0]["processes"] = [{"pid": 999991, "memory_mib": 10, "user": "<b>eve</b>", "name": EVIL}]

    scenario.update(evil)
    panel = GPUMonitor(start=False)
    panel.update(nvml.snapshot())
    row = panel.rows[0]
    for html_value in (row.title.value, row.processes.value):
        assert "<img" not in html_value
    assert "&lt;img src=x onerror=alert(1)&gt;" in row.processes.value
    assert "&lt;b&gt;eve&lt;/b&gt;" in row.processes.value
    assert "A100 &lt;img" in row.title.value


def test_this_kernels_process_is_marked(scenario: Any) -> None:
    def mine(data: dict[str, Any]) -> None:
        data["gpus"][0]["processes"] = [
            {"pid": os.getpid(), "memory_mib": 2048},
            {"pid": 999992, "memory_mib": 1024, "user": "bob", "name": "python"},
        ]

    scenario.update(mine)
    panel = GPUMonitor(start=False)
    panel.update(nvml.snapshot())
    procs = panel.rows[0].processes.value
    assert procs.count("this kernel") == 1
    own_row = procs[procs.index('<tr class="jupyter-gpu-own">') :]
    own_row = own_row[: own_row.index("</tr>")]
    assert "this kernel" in own_row and str(os.getpid()) in own_row
    assert procs.index("999992") > 0


def test_no_nvml_state_says_why(scenario: Any) -> None:
    panel = GPUMonitor(start=False)
    panel.update(nvml.snapshot())
    assert len(panel.rows) == 2
    scenario.update(lambda data: data.update(fault="driver_not_loaded"))
    snapshot = nvml.snapshot()
    assert not snapshot.nvml_available
    panel.update(snapshot)
    assert "NVML unavailable" in panel.status.value
    assert "river" in panel.status.value  # the reason: "Driver Not Loaded" or its explanation
    assert panel.rows == [] and panel.rows_box.children == ()


def test_lost_gpu_state(scenario: Any) -> None:
    scenario.update(lambda data: data["gpus"][1].update(fault="lost"))
    panel = GPUMonitor(start=False)
    panel.update(nvml.snapshot())
    healthy, lost = panel.rows
    assert lost.lost and not healthy.lost
    assert "jupyter-gpu-lost" in lost.box._dom_classes
    assert "lost" in lost.title.value.lower()
    assert lost.memory_text.value == "memory: — (GPU lost)"
    # What cannot be read is "—", never "mem 0 %".
    assert "mem <b>—</b>" in lost.history_chart.value and "util <b>—</b>" in lost.history_chart.value
    assert "1 lost" in panel.status.value
    # and it comes back
    scenario.update(lambda data: data["gpus"][1].update(fault=None))
    panel.update(nvml.snapshot())
    assert not panel.rows[1].lost
    assert "jupyter-gpu-lost" not in panel.rows[1].box._dom_classes


def test_unselected_gpus_dimmed_and_limit_drawn(scenario: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(widget, "_plan_view", lambda: ((0,), lambda index: 10 * GIB if index == 0 else None))
    panel = GPUMonitor(start=False)
    panel.update(nvml.snapshot())
    selected, other = panel.rows
    assert other.dimmed and "jupyter-gpu-dimmed" in other.box._dom_classes
    assert "not selected" in other.title.value
    assert not selected.dimmed
    assert "jupyter-gpu-limit" in selected.memory_bar.value
    assert "left:12.5%" in selected.memory_bar.value  # 10 GiB of 80 GiB
    assert selected.memory_text.value.endswith("(limit 10 GiB)")
    assert "jupyter-gpu-limit" not in other.memory_bar.value


def test_several_panels_share_one_sampler_and_closing_stops_the_thread(scenario: Any) -> None:
    first = GPUMonitor(interval_s=0.5)
    second = GPUMonitor(interval_s=0.1)
    sampler = widget.shared_sampler()
    assert sampler.listener_count == 2
    assert sampler.interval_s == 0.1  # the fastest panel sets the pace
    wait_until(lambda: first.updates >= 2 and second.updates >= 3)
    assert len(sampler_threads()) == 1
    first.close()
    assert first.closed and sampler.running
    assert sampler.listener_count == 1
    second.close()
    wait_until(lambda: not sampler.running, timeout_s=UNDER_LOAD_S)
    assert sampler_threads() == []
    assert widget.open_panels() == []


def test_pause_and_resume(scenario: Any) -> None:
    panel = GPUMonitor(interval_s=0.1)
    sampler = widget.shared_sampler()
    wait_until(lambda: panel.updates >= 1)
    panel.pause_button.value = True  # the user clicks "Pause"
    assert panel.paused and panel.pause_button.description == "Resume"
    wait_until(lambda: not sampler.running, timeout_s=UNDER_LOAD_S)
    updates = panel.updates
    time.sleep(0.3)
    assert panel.updates == updates
    panel.pause_button.value = False
    assert panel.active and panel.pause_button.description == "Pause"
    wait_until(lambda: panel.updates > updates)


def test_the_panel_pauses_when_its_last_view_goes_and_resumes_when_one_comes_back(scenario: Any) -> None:
    panel = GPUMonitor(interval_s=0.1)
    sampler = widget.shared_sampler()
    assert panel._view_count == 0  # the front end is asked to count the panel's views
    wait_until(lambda: panel.updates >= 1)
    panel._view_count = 2  # two views are shown (what a front end's "displayed" events send)
    panel._view_count = 1
    assert panel.active
    panel._view_count = 0  # "Clear output": the last view went
    assert panel.paused and panel.no_view and widget.NO_VIEW_TEXT in panel.status.value
    wait_until(lambda: not sampler.running, timeout_s=UNDER_LOAD_S)
    updates = panel.updates
    panel._view_count = 1  # the notebook was opened again
    assert panel.active and not panel.no_view and panel.pause_button.description == "Pause"
    wait_until(lambda: panel.updates > updates)


def test_a_panel_the_user_paused_stays_paused_when_a_view_comes_back(scenario: Any) -> None:
    panel = GPUMonitor(interval_s=0.1)
    panel._view_count = 1
    panel.pause_button.value = True
    panel._view_count = 0
    panel._view_count = 1
    assert panel.paused and not panel.no_view


def test_close_button_stops_the_panel_for_good(scenario: Any) -> None:
    panel = GPUMonitor(interval_s=0.1)
    sampler = widget.shared_sampler()
    wait_until(lambda: panel.updates >= 1)
    panel.close_button.click()
    assert panel.closed and not panel.active and widget.open_panels() == []
    wait_until(lambda: not sampler.running, timeout_s=UNDER_LOAD_S)
    assert panel.comm is None and panel.close_button.comm is None  # every widget closed
    panel._view_count = 1  # a late view count changes nothing
    assert panel.closed and not sampler.running
    with pytest.raises(RuntimeError, match="closed"):
        panel.resume()


def test_history_is_bounded(scenario: Any) -> None:
    panel = GPUMonitor(history=5, start=False)
    snapshot = nvml.snapshot()
    for _ in range(50):
        panel.update(snapshot)
    assert len(panel.rows[0].memory_history) == 5
    assert len(panel.rows[0].utilization_history) == 5


def test_an_unchanged_snapshot_changes_only_the_history_charts(scenario: Any) -> None:
    panel = GPUMonitor(start=False)
    snapshot = nvml.snapshot()
    panel.update(snapshot)
    panel.update(snapshot)  # the chart is full enough to draw from now on
    changed: list[str] = []
    watched = [
        panel.status,
        *(
            w
            for row in panel.rows
            for w in (
                row.title,
                row.memory_bar,
                row.memory_text,
                row.utilization,
                row.temperature,
                row.power,
                row.history_chart,
                row.processes,
            )
        ),
    ]
    for w in watched:
        w.observe(lambda change, w=w: changed.append(type(w).__name__), names="value")
    panel.update(snapshot)
    history_charts = {id(row.history_chart) for row in panel.rows}
    assert len(changed) <= len(history_charts)


@pytest.mark.parametrize(
    "kwargs", [{"interval_s": 0}, {"interval_s": -1}, {"interval_s": "1"}, {"history": 1}, {"history": 2.5}]
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        GPUMonitor(start=False, **kwargs)


def test_repr_is_stable() -> None:
    panel = GPUMonitor(interval_s=2, history=30, start=False)
    assert repr(panel) == "GPUMonitor(interval_s=2, history=30)"


def test_gpu_monitor_magic(scenario: Any) -> None:
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_gpu.kernel import monitor_magics

    ip = InteractiveShell.instance()
    monitor_magics.register(ip)
    try:
        magics = ip.magics_manager.registry["MonitorMagics"]
        for bad in ("--interval 0.01", "--history 1", "--interval x", "--colour red"):
            with pytest.raises(UsageError) as error:
                ip.run_line_magic("gpu_monitor", bad)
            assert "\n" not in str(error.value)
        assert magics.panels == [] and widget.open_panels() == []
        ip.run_line_magic("gpu_monitor", "--interval 0.2 --history 10")
        (panel,) = magics.panels
        assert (panel.interval_s, panel.history) == (0.2, 10)
        wait_until(lambda: panel.updates >= 1)
    finally:
        monitor_magics.unregister(ip)
    assert panel.closed
    wait_until(lambda: not sampler_threads(), timeout_s=UNDER_LOAD_S)


def test_the_kernels_plan_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from jupyter_gpu import plan

    fake = SimpleNamespace(selected_indices=(1,), memory_limit_bytes=lambda index: 2 * GIB if index == 1 else None)
    monkeypatch.setattr(plan, "current_plan", lambda: fake)
    selected, limit = widget._plan_view()
    assert selected == (1,) and limit(1) == 2 * GIB and limit(0) is None


def test_long_and_bidi_names_are_cut_and_neutralised_with_the_full_text_in_the_tooltip(
    scenario: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("JUPYTER_GPU_SHOW_OTHER_NAMES", "1")  # other users' names shown (admin)

    def long_names(data: dict[str, Any]) -> None:
        data["gpus"][0]["name"] = "NVIDIA " + "Z" * 70  # NVML names hold 96 bytes, " [simulated]" included
        data["gpus"][0]["processes"] = [
            {"pid": 999993, "memory_mib": 10, "user": "a\u202eevil" + "u" * 240, "name": "evil\u202egnp.ipynb"}
        ]

    scenario.update(long_names)
    panel = GPUMonitor(start=False)
    panel.update(nvml.snapshot())
    row = panel.rows[0]
    procs = row.processes.value
    assert "\u202e" not in procs and "\u202e" not in row.title.value
    assert "a\ufffdevil" in procs and "evil\ufffdgnp.ipynb" in procs
    assert procs.count("u" * 240) == 1  # the long user name is cut in the cell, whole only in the tooltip
    assert "…" in procs
    # The GPU name: cut in the card, whole in the tooltip.
    assert "Z" * 70 not in row.title.value.split(">", 1)[1]
    assert f'title="GPU 0 NVIDIA {"Z" * 70} [simulated]"' in row.title.value


def test_snapshot_warnings_are_shown_as_text(scenario: Any) -> None:
    panel = GPUMonitor(start=False)
    snapshot = nvml.snapshot()
    panel.update(snapshot)
    assert panel.warnings.value == "" and panel.warnings.layout.display == "none"
    warned = dataclasses.replace(
        snapshot, warnings=("simulated scenario rejected: gpus[0].memory_used_mib must be >= 0", "<b>x</b>\u202e")
    )
    panel.update(warned)
    assert "simulated scenario rejected: gpus[0].memory_used_mib must be &gt;= 0" in panel.warnings.value
    assert "&lt;b&gt;x&lt;/b&gt;\ufffd" in panel.warnings.value
    assert panel.warnings.layout.display is None
    panel.update(snapshot)  # no warnings: nothing shown
    assert panel.warnings.value == "" and panel.warnings.layout.display == "none"


def test_cards_sit_in_a_grid_and_use_only_standard_widgets(scenario: Any) -> None:
    import ipywidgets

    panel = GPUMonitor(start=False)
    panel.update(nvml.snapshot())
    assert "jupyter-gpu-grid" in panel.rows_box._dom_classes
    standard = {name for name in dir(ipywidgets) if isinstance(getattr(ipywidgets, name), type)}

    def walk(w: Any) -> Iterator[Any]:
        yield w
        for child in getattr(w, "children", ()):
            yield from walk(child)

    for w in walk(panel):
        # Every model is one of ipywidgets' own (no custom front-end code for VS Code etc. to lack).
        assert w._model_module == "@jupyter-widgets/controls", w
        assert type(w).__name__ in standard or type(w) is GPUMonitor
    row = panel.rows[0]
    areas = {c for w in row.box.children for c in w._dom_classes}
    assert {
        "jupyter-gpu-title-cell",
        "jupyter-gpu-bar-cell",
        "jupyter-gpu-memory-cell",
        "jupyter-gpu-stats",
        "jupyter-gpu-chart-cell",
        "jupyter-gpu-procs-cell",
        "jupyter-gpu-who-cell",
    } <= areas


def test_slices_are_shown_under_their_gpu_with_this_kernels_process_marked(scenario: Any) -> None:
    from support import A100_MIG_UUIDS, a100_mig_scenario

    data = a100_mig_scenario()
    data["gpus"][0]["mig_slices"][1]["processes"] = [{"pid": os.getpid(), "memory_mib": 1024}]
    data["gpus"][0]["mig_slices"][2]["profile"] = "1g<i>x</i>"  # data rendered as HTML stays text
    data["gpus"][0]["mig_slices"][2]["memory_total_mib"] = 9728
    scenario.write(data)
    panel = GPUMonitor(start=False)
    panel.update(nvml.snapshot())
    mig, whole = panel.rows
    assert mig.utilization.value == "util n/a on MIG" and "jupyter-gpu-mig" in mig.utilization._dom_classes
    assert "jupyter-gpu-mig" not in whole.utilization._dom_classes
    assert "util <b>20 %</b>" in whole.history_chart.value
    html_text = mig.processes.value
    starts = [html_text.index(uuid) for uuid in A100_MIG_UUIDS]
    assert starts == sorted(starts)  # slices in NVML's order, each with its UUID
    assert "0:0</b> MIG 3g.40gb" in html_text and "0:1</b> MIG 2g.20gb" in html_text
    assert html_text.count('role="meter"') == 3  # a memory bar per slice
    # each process under its slice; this kernel's marked once, in the 2g.20gb slice
    assert starts[0] < html_text.index("4100001") < starts[1] < html_text.index(str(os.getpid())) < starts[2]
    assert starts[2] < html_text.index("4100002")
    assert html_text.count("this kernel") == 1 and starts[1] < html_text.index("this kernel") < starts[2]
    assert "<i>x" not in html_text and "1g&lt;i&gt;x" in html_text
    assert "4100003" in whole.processes.value and "MIG" not in whole.processes.value


def test_the_status_line_says_where_the_sample_came_from(scenario: Any) -> None:
    panel = GPUMonitor(start=False)
    taken = nvml.snapshot()
    note = 'from the Jupyter server at http://127.0.0.1:8888/"><b>'
    panel.update(dataclasses.replace(taken, extra={"source": "jupyter-server", "source_note": note}))
    assert "from the server" in panel.status.value
    assert 'title="from the Jupyter server at http://127.0.0.1:8888/&quot;&gt;&lt;b&gt;"' in panel.status.value
    panel.update(dataclasses.replace(taken, extra={"source": "nvml", "source_note": "NVML read locally: no ..."}))
    assert "NVML read here" in panel.status.value and "from the server" not in panel.status.value


def test_a_front_end_loading_the_panel_again_restarts_the_view_count_without_pausing(scenario: Any) -> None:
    panel = GPUMonitor(interval_s=0.1)
    panel._view_count = 1  # shown; then the notebook was closed: its front end never took the view off
    state = panel.get_state()  # the notebook is opened again: its front end asks for the whole state
    assert state["_view_count"] == 0 and panel._view_count == 0
    assert panel.active  # no pause in between
    panel._view_count = 1  # the view it shows now
    panel._view_count = 0  # and "Clear output" then pauses the panel, as it should
    assert panel.paused and panel.no_view
    assert panel.get_state("_view_count") == {"_view_count": 0}


@pytest.mark.parametrize(
    ("readings", "expected"),
    [
        # (sample time, kernel_connections) -> whether the panel pauses at that sample
        ([(0, 1), (5, 0), (10, 0), (14.9, 0), (15, 0)], [False, False, False, False, True]),
        ([(0, 0), (9, 0), (9.5, 2), (12, 0), (21, 0), (22, 0)], [False, False, False, False, False, True]),
        ([(0, 0), (5, None), (11, 0), (20, 0)], [False, False, False, False]),  # the server did not say
        ([(0, 0), (30, "0"), (31, True), (32, -1), (40, 0)], [False] * 5),  # not a count: not "nobody"
        ([(0, 0), (12, 0)], [False, True]),  # samples far apart: the grace period is time, not a count
    ],
)
def test_the_panel_pauses_only_after_nobody_was_connected_for_the_grace_period(
    readings: list[tuple[float, Any]], expected: list[bool]
) -> None:
    rule = widget.Unconnected(grace_s=10.0)
    assert [rule.seen(timestamp, connections) for timestamp, connections in readings] == expected


def test_the_panel_pauses_when_nobody_is_connected_to_its_kernel_and_resumes_with_a_view(scenario: Any) -> None:
    panel = GPUMonitor(interval_s=0.1, start=False)
    panel.resume()
    panel._view_count = 1  # shown in a tab; then the tab is closed: the view count stays at 1
    taken = nvml.snapshot()

    def sample(at: float, connections: int | None) -> None:
        extra = {"source": "jupyter-server", "kernel_connections": connections}
        panel._on_snapshot(dataclasses.replace(taken, timestamp=at, extra=extra))

    sample(1000.0, 1)
    sample(1001.0, 0)
    sample(1001.0 + widget.UNCONNECTED_GRACE_S / 2, 0)
    assert panel.active and not panel.no_view  # a page reload reconnects within the grace period
    sample(1001.0 + widget.UNCONNECTED_GRACE_S, 0)
    assert panel.paused and panel.no_view and widget.NO_VIEW_TEXT in panel.status.value
    assert panel.pause_button.description == "Resume"
    state = panel.get_state()  # the notebook is opened again: its front end asks for the whole state
    assert state["_view_count"] == 0
    panel._view_count = 1  # and shows the panel: it resumes
    assert panel.active and not panel.no_view
    sample(2000.0, 0)  # the stretch starts again after a resume
    assert panel.active


def test_a_panel_whose_sample_does_not_say_who_is_connected_never_pauses_for_it(scenario: Any) -> None:
    panel = GPUMonitor(interval_s=0.1, start=False)
    panel.resume()
    taken = nvml.snapshot()
    for at in range(0, 100, 5):
        panel._on_snapshot(dataclasses.replace(taken, timestamp=float(at), extra={"source": "nvml"}))
    assert panel.active and not panel.no_view


# -- one vocabulary with the sidebar (issue 31)


def test_withheld_program_names_leave_no_column_of_question_marks(scenario: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("JUPYTER_GPU_SHOW_OTHER_NAMES", raising=False)

    def others(data: dict[str, Any]) -> None:
        data["gpus"][0]["processes"] = [
            {"pid": 999993, "memory_mib": 1024, "user": "bob", "name": "python"},
            {"pid": 999994, "memory_mib": 2048, "user": "carol", "name": "train"},
        ]

    scenario.update(others)
    panel = GPUMonitor(start=False)
    panel.update(nvml.snapshot())
    procs = panel.rows[0].processes.value
    assert "bob" in procs and "carol" in procs
    assert "?" not in procs and "<th>program</th>" not in procs  # the names are withheld: no such column
    assert "<th>user</th>" in procs and '<th class="jupyter-gpu-num">memory</th>' in procs


def test_the_program_column_says_dash_for_a_withheld_name_beside_a_shown_one() -> None:
    from jupyter_gpu.core.snapshot import GpuProcess
    from jupyter_gpu.panel.render import _process_table

    table = _process_table([GpuProcess(1, 10, "me", "python"), GpuProcess(2, 20, "bob", None)], own_pid=1)
    assert "<th>program</th>" in table and ">—</td>" in table and "?" not in table


def test_the_legend_says_the_window_in_time_as_the_sidebar() -> None:
    from jupyter_gpu.panel.render import Sparkline

    chart = Sparkline(60, interval_s=0.5)
    for _ in range(40):
        chart.append(10.0, 20.0)
    assert "<span>last 20 s</span>" in chart.svg() and "samples" not in chart.svg()


def test_above_four_gpus_the_panel_is_compact_with_who_is_on_each(scenario: Any) -> None:
    from jupyter_gpu.core.snapshot import GpuInfo, GpuProcess, Snapshot

    def gpus(count: int) -> Snapshot:
        return Snapshot(
            nvml_available=True,
            timestamp=time.time(),
            gpus=tuple(
                GpuInfo(
                    index=i,
                    uuid=f"GPU-{i}",
                    name="T4",
                    memory_total=16 * GIB,
                    memory_used=GIB if i in (1, 2) else 0,
                    memory_free=15 * GIB,
                    utilization=0,
                    temperature=30,
                    power=20.0,
                    power_limit=70.0,
                    processes=(GpuProcess(7, GIB, "zhang_wei", None),) if i == 1 else (),
                )
                for i in range(count)
            ),
        )

    panel = GPUMonitor(start=False)
    panel.update(gpus(4))
    assert "jupyter-gpu-compact" not in panel.rows_box._dom_classes
    panel.update(gpus(5))
    assert "jupyter-gpu-compact" in panel.rows_box._dom_classes
    assert "zhang_wei" in panel.rows[1].who.value and ">free<" in panel.rows[0].who.value
    assert ">in use<" in panel.rows[2].who.value  # memory held, no process seen: not free (the one rule: "in use")
    panel.update(gpus(2))
    assert "jupyter-gpu-compact" not in panel.rows_box._dom_classes
