"""`jupyter-gpu status`: the table, --json, --watch and the exit codes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from jupyter_gpu import cli, simulate


@pytest.fixture(autouse=True)
def _no_running_server(tmp_path, monkeypatch):
    """No Jupyter server or hub service of this user answers unless a test starts one: the host's
    sample is read through NVML here (another test run's or engineer's server must not answer)."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.delenv("JUPYTER_GPU_SERVICE_URL", raising=False)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_table_lists_gpus_and_processes(demo_gpus):
    code, out, _ = run("status")
    assert code == 0
    lines = out.splitlines()
    assert "simulated" in lines[0] and "550.54.15" in lines[0]
    assert lines[1] == "Sample: NVML read locally: no Jupyter server or hub service answered"
    assert lines[2].split()[:2] == ["GPU", "Name"]
    assert "74.2 GiB / 80 GiB (93%)" in out and "97%" in out and "71°C" in out and "372 / 400 W" in out
    assert "NVIDIA RTX A6000" in out
    bob = next(line for line in lines if "910001" in line)
    assert "bob" in bob and "74.2 GiB" in bob and "python" not in bob  # another user's program: withheld


def test_other_users_program_names_are_withheld_unless_the_admin_widens_it(demo_gpus):
    # The server's rule, here too: bob's process shows PID, user and memory only
    code, out, _ = run("status", "--json")
    bob = next(p for gpu in json.loads(out)["gpus"] for p in gpu["processes"] if p["pid"] == 910001)
    assert bob["user"] == "bob" and bob["name"] is None and "command" not in bob
    # An admin widens it with a flag, or the environment variable
    code, out, _ = run("status", "--show-other-names")
    assert code == 0 and "python" in next(line for line in out.splitlines() if "910001" in line)
    # (the environment variable, for kernels and panels: tests/test_processes.py)


def test_json_is_the_snapshot_contract(demo_gpus):
    code, out, err = run("status", "--json")
    data = json.loads(out)
    assert code == 0 and err == ""
    assert data["nvml_available"] is True and len(data["gpus"]) == 4
    assert data["gpus"][1]["processes"][0]["user"] == "carol"


def test_no_nvml_exits_1_with_the_reason(scenario):
    scenario.write({"fault": "driver_not_loaded", "gpus": []})
    code, out, _ = run("status")
    assert code == 1 and "driver is not loaded" in out
    code, out, err = run("status", "--json")
    assert code == 1 and json.loads(out)["nvml_available"] is False and "driver is not loaded" in err


def test_lost_gpu_shows_its_error_and_the_rest(scenario):
    scenario.write({"gpus": [{"fault": "lost"}, {"name": "NVIDIA L4"}]})
    code, out, _ = run("status")
    assert code == 0 and "GPU is lost" in out and "NVIDIA L4" in out


def test_watch_refreshes_until_interrupted(demo_gpus, monkeypatch):
    sleeps = []

    def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli.time, "sleep", fake_sleep)
    code, out, _ = run("status", "--watch", "0.5")
    assert code == 0 and sleeps == [0.5, 0.5, 0.5]
    assert out.count("every 0.5 s, Ctrl-C to stop") == 3


def test_watch_ends_the_same_when_ctrl_c_lands_while_nvml_is_read(demo_gpus, monkeypatch):
    from jupyter_gpu.sources.host import HostSample

    reads = []
    real = HostSample.read

    def read(self: HostSample) -> object:
        reads.append(1)
        if len(reads) == 3:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(HostSample, "read", read)
    monkeypatch.setattr(cli.time, "sleep", lambda seconds: None)
    code, out, _ = run("status", "--watch", "0.5")
    assert code == 0 and out.count("every 0.5 s, Ctrl-C to stop") == 2

    def interrupted(self: HostSample) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(HostSample, "read", interrupted)
    code, out, _ = run("status", "--watch", "0.5")  # before anything was shown: interrupted
    assert code == 130 and out == ""


@pytest.mark.parametrize("bad", ["0", "-1", "soon"])
def test_bad_watch_interval_is_a_usage_error(bad, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["status", "--watch", bad])
    assert exit_info.value.code == 2
    assert "--watch" in capsys.readouterr().err


def test_console_script_runs_without_a_gpu(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != simulate.ENV_VAR}
    env["LD_LIBRARY_PATH"] = str(tmp_path)  # no libnvidia-ml.so.1 anywhere here
    done = subprocess.run([sys.executable, "-m", "jupyter_gpu.cli", "status"], env=env, capture_output=True, text=True)
    if "No GPUs can be read" not in done.stdout:
        pytest.skip("this machine has a real NVIDIA driver")
    assert done.returncode == 1 and "libnvidia-ml.so.1" in done.stdout


def test_long_and_bidi_names_are_cut_and_neutralised(scenario, monkeypatch):
    monkeypatch.setenv("JUPYTER_GPU_SHOW_OTHER_NAMES", "1")  # other users' names shown (admin)
    longest_name = "NVIDIA " + "X" * 76  # the longest a scenario may give: NVML's 96-byte name holds it whole
    scenario.write(
        {
            "gpus": [
                {
                    "name": longest_name,
                    "processes": [
                        {
                            "pid": 4_000_001,
                            "memory_mib": 1024,
                            "user": "a\u202eevil" + "u" * 240,
                            "name": "evil\u202egnp.py",
                        }
                    ],
                }
            ]
        }
    )
    code, out, _ = run("status")
    assert code == 0
    assert "\u202e" not in out
    assert "a\ufffdevil" in out and "evil\ufffdgnp.py" in out
    assert "error" not in out  # the GPU was read
    assert max(len(line) for line in out.splitlines()) < 160  # a 240-character user name is cut
    assert "…" in out


def test_invisible_and_line_breaking_characters_are_shown_as_replacements(scenario, monkeypatch):
    """U+2028 would break a table row, ZWJ/ZWSP/BOM would make two names look alike."""
    monkeypatch.setenv("JUPYTER_GPU_SHOW_OTHER_NAMES", "1")
    process = {"pid": 4_000_002, "memory_mib": 1024, "user": "bo\u200bb\ufeff", "name": "two\u2028lines\u200d.py"}
    scenario.write({"gpus": [{"name": "NVIDIA A100", "processes": [process]}]})
    code, out, _ = run("status")
    assert code == 0
    assert not {"\u2028", "\u200b", "\u200d", "\ufeff"} & set(out)
    assert "bo\ufffdb\ufffd" in out and "two\ufffdlines\ufffd.py" in out


def test_a_rejected_scenario_edit_is_printed_and_the_last_good_one_kept(scenario):
    # Given a scenario the reader has read once
    assert run("status")[0] == 0
    # When an edit breaks a rule (written by hand: write_scenario refuses it)
    bad = json.loads(json.dumps(scenario.data))
    bad["gpus"][0]["memory_used_mib"] = -5
    scenario.path.write_text(json.dumps(bad))
    code, out, err = run("status")
    # Then the table still shows the last good scenario, under one warning line
    rejected = "simulated scenario rejected: gpus[0].memory_used_mib must be >= 0 (keeping the last good scenario)"
    head = out.split("\nDriver ")[0]  # the warning, wrapped to 80 columns
    assert code == 0 and " ".join(line.strip() for line in head.splitlines()) == f"Warning: {rejected}"
    assert "0 MiB / 80 GiB" in out
    # And --json carries it in "warnings" and says it on stderr
    code, out, err = run("status", "--json")
    assert json.loads(out)["warnings"] == [rejected] and err == f"jupyter-gpu: warning: {rejected}\n"
    # And a good edit clears it
    scenario.write(scenario.data)
    assert json.loads(run("status", "--json")[1])["warnings"] == []


@pytest.mark.parametrize(
    "text",
    ['{"gpus": [{"memory_total_mib": 1e400}]}', "[" * 100_000 + "]" * 100_000, '{"gpus": [{"temperature": -300}]}'],
)
def test_a_bad_scenario_from_the_start_is_one_line_not_a_traceback(tmp_path, text):
    path = tmp_path / "s.json"
    path.write_text(text)
    env = {**os.environ, simulate.ENV_VAR: str(path)}
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_gpu.cli", "status"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith("No GPUs can be read: simulated GPUs could not be set up: JUPYTER_GPU_SIMULATE=")


def test_slices_are_rows_under_their_gpu_with_their_processes(scenario):
    from support import A100_MIG_UUIDS, a100_mig_scenario

    scenario.write(a100_mig_scenario())
    code, out, _ = run("status")
    assert code == 0
    lines = out.splitlines()
    parent = next(i for i, line in enumerate(lines) if line.lstrip().startswith("0  "))
    assert "n/a on MIG" in lines[parent] and "44°C" in lines[parent] and "150 / 400 W" in lines[parent]
    assert "33.2 GiB / 80 GiB" in lines[parent]  # the whole card: both slices' processes
    slices = [line for line in lines if line.startswith("0:")]
    assert [line.split()[:4] for line in slices] == [
        ["0:0", "└", "MIG", "3g.40gb"],
        ["0:1", "└", "MIG", "2g.20gb"],
        ["0:2", "└", "MIG", "1g.10gb"],
    ]
    assert max(len(line) for line in lines) <= 80  # a classic terminal, MIG too (118 before)
    # the MIG UUIDs take room: --wide shows them
    wide = [line for line in run("status", "--wide")[1].splitlines() if line.startswith("0:")]
    assert all(uuid in row for uuid, row in zip(A100_MIG_UUIDS, wide, strict=True))
    assert "29.3 GiB / 39.3 GiB" in slices[0] and "n/a on MIG" in slices[0]
    # each process is printed once, under its slice
    assert out.count("4100001") == 1 and lines.index(slices[0]) + 1 == next(
        i for i, line in enumerate(lines) if "4100001" in line
    )
    assert lines.index(slices[2]) + 1 == next(i for i, line in enumerate(lines) if "4100002" in line)
    whole = next(line for line in lines if line.lstrip().startswith("1  "))
    assert "20%" in whole and "n/a" not in whole


# -- beside a running Jupyter server of this user (a real one, as a subprocess)


def test_beside_a_running_server_its_sample_and_the_users_kernels_are_shown(live_server, scenario, tmp_path):
    from support import a100_mig_scenario

    from jupyter_gpu.simulate import counters

    # Given a notebook's kernel holding memory on a MIG slice, and a display server on GPU 1
    pid = live_server.start_kernel()
    data = a100_mig_scenario()
    data["gpus"][0]["mig_slices"][1]["processes"] = [{"pid": pid, "memory_mib": 3072}]
    data["gpus"][1]["processes"] = [{"pid": 4_200_001, "memory_mib": 300, "user": "dave", "type": "graphics"}]
    scenario.write(data)
    from live_processes import get_json

    get_json(live_server.url + "jupyter-gpu/snapshot", live_server.token, timeout=60)  # as its sidebar would
    calls = tmp_path / "nvml-calls"
    before = counters.calls_by_process(calls)
    # When the user runs jupyter-gpu status in a terminal
    code, out, _ = run("status")
    # Then the sample is the server's, the kernel is shown by notebook with its idle time
    assert code == 0, out
    lines = out.splitlines()
    assert lines[1] == f"Sample: from the Jupyter server at {live_server.url}"
    row = next(line for line in lines if f"pid {pid}" in line)
    assert "alice.ipynb" in row and ("idle" in row or "busy" in row) and "└ C " in row, row
    assert "python" not in row  # not "root python": the notebook
    assert "└ G " in next(line for line in lines if "4200001" in line)  # a graphics process: G, as nvitop
    assert lines[lines.index("Your kernels:") + 1].lstrip().startswith("alice.ipynb")
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)
    # and --json carries the source and the kernels
    data = json.loads(run("status", "--json")[1])
    assert data["source"] == "jupyter-server" and data["source_note"] == f"from the Jupyter server at {live_server.url}"
    (kernel,) = data["kernels"]
    assert kernel["notebook"] == "alice.ipynb" and kernel["gpu_pids"] == [pid] and kernel["gpu_memory"] == 3 * 2**30
    assert isinstance(kernel["idle_s"], float)
    # and this terminal read no NVML at all: only the server's process counted calls
    after = counters.calls_by_process(calls)
    readers = {pid for pid, start in after if after[pid, start] != before.get((pid, start), 0)}
    assert readers <= {live_server.process.pid}, readers
    assert simulate.installed() is None  # NVML (simulated beneath pynvml) was never even loaded here


def test_wide_adds_fan_bus_id_ecc_and_clocks_where_nvml_has_them(demo_gpus):
    code, out, _ = run("status")
    assert code == 0 and "Bus-Id" not in out and max(len(line) for line in out.splitlines()) <= 80
    code, out, _ = run("status", "--wide")
    lines = out.splitlines()
    header = lines[2].split()
    assert header[-8:] == ["Fan", "Bus-Id", "ECC", "SM", "clock", "Mem", "clock", "UUID"]
    a100 = next(line for line in lines if line.startswith("  0 "))
    a6000 = next(line for line in lines if line.startswith("  2 "))
    # the A100 SXM has no fan of its own ("-"), ECC on; the A6000 a fan, ECC off ("-")
    assert "   -  00000000:17:00.0    0  1410 MHz   1593 MHz  GPU-" in a100, a100
    assert "30%  00000000:19:00.0    -   210 MHz    405 MHz  GPU-" in a6000, a6000
    data = json.loads(run("status", "--json")[1])
    assert [gpu["fan_speed"] for gpu in data["gpus"]] == [None, None, 30, 34]
    assert [gpu["ecc_errors"] for gpu in data["gpus"]] == [0, 2, None, None]
