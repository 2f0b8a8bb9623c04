"""``jupyter_gpu_plan.pth`` and ``jupyter_gpu._startup``'s carried plan: caps applied in Python children.

The children process the worktree's ``.pth`` file from a ``sitecustomize`` (``plan_site``), after the
CUDA stand-in (as in a kernel of ``kernels.standin_kernel``, whose start-up file imports it before
jupyter_gpu watches): the file under test, whatever copy an editable install put in site-packages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from standin_site import ROOT, child_env, plan_site

from jupyter_gpu.plan.carry import PLAN_VARIABLE

GIB = 1024**3
A6000_GIB = 47.98828125  # demo-still's GPU 2, as the simulation gives its total


def carried(selection: str | None, *limits: str, growth: bool = False) -> str:
    """The ``JUPYTER_GPU_PLAN`` a kernel on demo-still writes for this plan."""
    os.environ["JUPYTER_GPU_SIMULATE"] = "demo-still"
    from jupyter_gpu.plan import Fence, PlanRequest, build_plan
    from jupyter_gpu.plan.carry import plan_environment
    from jupyter_gpu.sources.nvml import snapshot

    gpus = snapshot()
    plan = build_plan(PlanRequest(selection=selection, limits=limits, growth=growth), gpus, Fence({}))
    return plan_environment(plan, gpus.gpus)[PLAN_VARIABLE]


def run_child(site: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=child_env(site, "demo-still", **env),
        cwd=str(site),
        timeout=180,
    )


TORCH_CAPS = (
    "import json, torch, cuda_standin\n"
    "torch.cuda.init()\n"
    "print(json.dumps({'gpus': [i for i, _, _ in cuda_standin.cu_init()], 'fractions': cuda_standin.fractions}))\n"
)


def child_with_plan(tmp_path: Path, code: str, value: str, visible: str = "2") -> tuple[object, list[str]]:
    """Run ``code`` in a child with ``JUPYTER_GPU_PLAN=value`` and ``CUDA_VISIBLE_DEVICES=visible`` (PCI
    bus order) on the CUDA stand-in: what its last line printed (JSON), and its lines from jupyter_gpu."""
    result = run_child(
        plan_site(tmp_path / "site"),
        code,
        CUDA_VISIBLE_DEVICES=visible,
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        **{PLAN_VARIABLE: value},
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    said = [text for text in result.stderr.splitlines() if "jupyter_gpu" in text]
    return json.loads(result.stdout.strip().splitlines()[-1]), said


@pytest.mark.usefixtures("demo_gpus")
def test_a_child_gets_the_pytorch_cap_when_it_imports_torch(tmp_path: Path) -> None:
    # Given a kernel's plan: GPU 2 (an RTX A6000 of 48 GiB) capped at 4 GiB, carried to a child
    seen, said = child_with_plan(tmp_path, TORCH_CAPS, carried("2", "4GiB"))
    # Then PyTorch's lazy CUDA start in the child ran the plan's cap on its cuda:0 (GPU 2)
    assert isinstance(seen, dict) and seen["gpus"] == [2]
    assert {k: round(v * A6000_GIB, 3) for k, v in seen["fractions"].items()} == {"0": pytest.approx(4, abs=0.01)}
    assert said == []


def run_pth(value: str | None, code: str) -> subprocess.CompletedProcess[str]:
    """Only the worktree's ``jupyter_gpu_plan.pth``, processed as site.py does, then ``code`` (``-S``:
    no site-packages, so no installed ``.pth`` file runs; nothing simulated)."""
    env = {key: val for key, val in os.environ.items() if not key.startswith("JUPYTER_GPU_")}
    env["PYTHONPATH"] = str(ROOT)
    if value is not None:
        env[PLAN_VARIABLE] = value
    program = f"import site, sys; site.addpackage({str(ROOT)!r}, 'jupyter_gpu_plan.pth', set()); {code}"
    return subprocess.run([sys.executable, "-S", "-c", program], capture_output=True, text=True, env=env, cwd="/")


SHOW = "print(sorted(m for m in sys.modules if m.startswith('jupyter_gpu')))"


@pytest.mark.parametrize("value", [None, "", "  "])
def test_without_the_variable_the_pth_line_imports_nothing(value: str | None) -> None:
    result = run_pth(value, SHOW)
    assert result.returncode == 0 and result.stdout.strip() == "[]" and result.stderr == "", result


def test_with_the_variable_only_the_hook_is_registered_until_a_framework_is_imported() -> None:
    # even a malformed value costs nothing and says nothing at start: it is read when a framework is imported
    result = run_pth("{not json", SHOW + "; import jupyter_gpu.core.import_hooks as h; print(sorted(h._callbacks))")
    assert result.returncode == 0 and result.stderr == "", result
    modules, hooks = result.stdout.strip().splitlines()
    assert "jupyter_gpu.plan" not in modules and "jupyter_gpu.frameworks" not in modules
    assert hooks == "['jax', 'tensorflow', 'torch']"


def test_a_pth_line_whose_package_is_gone_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    env = {key: val for key, val in os.environ.items() if not key.startswith("JUPYTER_GPU_") and key != "PYTHONPATH"}
    env[PLAN_VARIABLE] = "{}"
    program = f"import site; site.addpackage({str(ROOT)!r}, 'jupyter_gpu_plan.pth', set()); print('started')"
    result = subprocess.run(
        [sys.executable, "-S", "-c", program], capture_output=True, text=True, env=env, cwd=str(tmp_path)
    )
    assert result.returncode == 0 and result.stdout.strip() == "started"
    assert result.stderr.splitlines() == [
        "jupyter_gpu: the GPU plan's caps are not applied: No module named 'jupyter_gpu'"
    ], result.stderr


@pytest.mark.usefixtures("demo_gpus")
def test_without_the_variable_a_child_that_imports_torch_gets_no_cap(tmp_path: Path) -> None:
    code = TORCH_CAPS + "import sys; print('jupyter_gpu.frameworks' in sys.modules)\n"
    result = run_child(plan_site(tmp_path / "site"), code, CUDA_VISIBLE_DEVICES="2", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert result.returncode == 0, result.stderr
    caps, frameworks = result.stdout.strip().splitlines()[-2:]
    assert json.loads(caps)["fractions"] == {} and frameworks == "False"


@pytest.mark.usefixtures("demo_gpus")
@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("{not json", "jupyter_gpu: the GPU plan's caps are not applied: JUPYTER_GPU_PLAN is malformed: not JSON"),
        ('{"v": 9}', "jupyter_gpu: the GPU plan's caps are not applied: JUPYTER_GPU_PLAN is malformed: v must be 1"),
    ],
)
def test_a_malformed_variable_is_one_line_and_the_child_runs_uncapped(tmp_path: Path, value: str, line: str) -> None:
    seen, said = child_with_plan(tmp_path, TORCH_CAPS, value)
    assert isinstance(seen, dict) and seen["fractions"] == {}
    assert len(said) == 1 and said[0].startswith(line), said


@pytest.mark.usefixtures("demo_gpus")
def test_a_child_that_chose_other_gpus_keeps_its_choice_and_gets_no_cap(tmp_path: Path) -> None:
    # `!CUDA_VISIBLE_DEVICES=0 python train.py` in a kernel whose plan is GPU 2 at 4 GiB
    seen, said = child_with_plan(tmp_path, TORCH_CAPS, carried("2", "4GiB"), visible="0")
    assert seen == {"gpus": [0], "fractions": {}}
    assert len(said) == 1 and "this process has CUDA_VISIBLE_DEVICES '0'" in said[0], said
    assert "the plan selected GPU 2" in said[0]


@pytest.mark.usefixtures("demo_gpus")
def test_a_child_gets_the_tensorflow_memory_limit_as_logical_devices(tmp_path: Path) -> None:
    value = carried("2", "2GiB", "1GiB")
    code = (
        "import json, tensorflow as tf\n"
        "gpus = tf.config.list_physical_devices('GPU')\n"
        "limits = [[c.memory_limit for c in tf.config.get_logical_device_configuration(g) or []] for g in gpus]\n"
        "print(json.dumps(limits))\n"
    )
    limits, said = child_with_plan(tmp_path, code, value)
    assert limits == [[2048, 1024]] and said == []


def test_the_wheel_installs_the_pth_file() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert '"jupyter_gpu_plan.pth" = "jupyter_gpu_plan.pth"' in text


SUBPROCESS_CAPS = (
    "json.loads(__import__('subprocess').run([sys.executable, '-c', {code!r}], capture_output=True, text=True, "
    "check=True).stdout.strip().splitlines()[-1])"
)


def test_a_kernels_limit_reaches_its_subprocess_and_follows_the_plan(tmp_path: Path) -> None:
    from kernels import standin_kernel

    site = plan_site(tmp_path / "site")
    paths = [str(site), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    for kernel in standin_kernel(tmp_path, {"PYTHONPATH": os.pathsep.join(paths)}):
        child = SUBPROCESS_CAPS.format(code=TORCH_CAPS)
        _, err = kernel.run("%load_ext jupyter_gpu\n%gpu_select 2\nimport sys")
        assert "Error" not in err, err
        assert kernel.value("os.environ.get('JUPYTER_GPU_PLAN')") is None  # no limit: nothing to carry
        kernel.run("%gpu_limit 4GiB")
        seen = kernel.value(child)
        assert seen["gpus"] == [2]
        assert {k: round(v * A6000_GIB, 3) for k, v in seen["fractions"].items()} == {"0": pytest.approx(4, abs=0.01)}
        # a later magic: the variable follows the plan (GPU 1, an 80 GiB A100, at 4 GiB)
        kernel.run("%gpu_select 1")
        seen = kernel.value(child)
        assert seen["gpus"] == [1] and seen["fractions"] == {"0": pytest.approx(4 / 80, abs=1e-4)}
        # the limit off: the variable goes, and so does the child's cap
        kernel.run("%gpu_limit off")
        assert kernel.value("os.environ.get('JUPYTER_GPU_PLAN')") is None
        assert kernel.value(child) == {"gpus": [1], "fractions": {}}


@pytest.mark.usefixtures("demo_gpus")
def test_a_plan_the_process_made_itself_wins_over_the_carried_one(tmp_path: Path) -> None:
    # a kernel started with the variable (a notebook run by nbconvert from a capped kernel) whose own
    # magic set GPU 2 at 1 GiB before `import torch`: the magic rewrote the variable, so the start-up
    # hook reads the kernel's own plan, not the 4 GiB it started with
    own = carried("2", "1GiB")
    code = (
        "from jupyter_gpu import frameworks\n"
        "from jupyter_gpu.plan import GpuPlan\n"
        "from jupyter_gpu.plan.carry import plan_from_environment\n"
        f"own = plan_from_environment({own!r})\n"
        "frameworks.remember_gpus(own.known_gpus())\n"  # as the magics do before they apply a plan
        "frameworks.apply_plan(GpuPlan(), own.plan)\n" + TORCH_CAPS
    )
    seen, said = child_with_plan(tmp_path, code, carried("2", "4GiB"))
    assert said == []
    assert isinstance(seen, dict)
    assert {k: round(v * A6000_GIB, 3) for k, v in seen["fractions"].items()} == {"0": pytest.approx(1, abs=0.01)}


@pytest.mark.usefixtures("demo_gpus")
def test_a_program_that_removes_the_variable_before_the_import_gets_no_cap_and_no_line(tmp_path: Path) -> None:
    code = "import os\ndel os.environ['JUPYTER_GPU_PLAN']\n" + TORCH_CAPS
    seen, said = child_with_plan(tmp_path, code, carried("2", "4GiB"))
    assert seen == {"gpus": [2], "fractions": {}} and said == []
