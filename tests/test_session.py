"""The plan session without IPython: a PlanSession with plain settings changes the plan, and the
report functions say what the magics would print; no shell, no magics."""

from __future__ import annotations

import os

import pytest
from IPython.core.error import UsageError
from support import flat

from jupyter_gpu.kernel.session import NoGpuFitsError, PlanSession, Settings
from jupyter_gpu.plan import current_plan
from jupyter_gpu.session.report import limit_report, selection_report, summary


def test_a_session_selects_and_caps_without_a_shell(clean) -> None:
    session = PlanSession(Settings())
    plan = session.change("%gpu_select", selection="1", growth=True)
    assert plan is not None and plan.selected_indices == (1,)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert "GPU 1 (A100-SXM4-80GB [simulated], 79.5 GiB free) → TensorFlow /GPU:0" in selection_report(plan)
    plan = session.change("%gpu_limit", limits=("4GiB",))
    assert plan is not None and current_plan() is plan
    assert "GPU 1: at most 4 GiB of 80 GiB" in limit_report(plan)
    assert summary(plan) == "GPU 1; growth on; limit GPU 1: 4 GiB"
    assert session.pending_request is None  # nothing was refused as too late


def test_the_admin_ceiling_comes_from_the_settings(clean) -> None:
    plan = PlanSession(Settings(max_limit="2GiB")).change("%gpu_select", selection="0")
    assert plan is not None and plan.limit_from_ceiling
    assert "admin ceiling 2GiB" in summary(plan)


def test_no_gpu_fits_is_its_own_error_for_the_wait_loop_and_a_usage_error_for_users(clean) -> None:
    session = PlanSession(Settings())
    with pytest.raises(NoGpuFitsError, match="900 GiB"):
        session.change_if_fits("%gpu_select", selection="auto:1", min_free="900GiB")
    with pytest.raises(UsageError, match="900 GiB") as refused:
        session.change("%gpu_select", selection="auto:1", min_free="900GiB")
    assert type(refused.value) is UsageError  # IPython prints only an exact UsageError as one line
    assert current_plan().selected_indices is None  # nothing changed


def test_19_2_caps_without_a_selection_on_two_models_set_pci_order_and_say_so(clean) -> None:
    """A T400 4 GB (GPU 0) and an RTX A6000: different shares per GPU, so CUDA's numbering must be
    nvidia-smi's for PyTorch's caps; the plan sets it (the kernel started without one) and says so."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "standin"))
    from cuda_standin import MIXED_WORKSTATION

    from jupyter_gpu.session.report import ORDER_NOTE

    clean.write(MIXED_WORKSTATION)
    session = PlanSession(Settings())
    plan = session.change("%gpu_limit", limits=("3GiB",))
    assert plan is not None and os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
    assert flat(ORDER_NOTE) in flat(limit_report(plan))
    # JAX: one share for both, 3 GiB of 48 GiB: a quarter of a GiB on the T400
    assert "JAX: one fraction 0.062 for all its GPUs: GPU 0 254 MiB, GPU 1 3 GiB" in limit_report(plan)
    plan = session.change("%gpu_limit", limits=("10%",))  # one share: the order does not matter
    assert plan is not None and "CUDA_DEVICE_ORDER" not in os.environ
    assert flat(ORDER_NOTE) not in flat(limit_report(plan)) and "JAX: one fraction" not in flat(limit_report(plan))


def test_the_session_below_the_kernel_refuses_with_plan_error_and_hands_claim_fields_to_the_board(
    clean, monkeypatch
) -> None:
    """``jupyter-gpu run``'s session: no IPython, a refusal is a PlanError; what a face says about its
    claim (``claim_fields``) reaches ``ClaimBoard.claim`` with the GPUs auto chose."""

    from jupyter_gpu.core.errors import PlanError
    from jupyter_gpu.session import plan_session
    from jupyter_gpu.sources.claims import ClaimBoard

    session = plan_session.PlanSession(
        plan_session.Settings(claims=True, claims_dir=os.environ["JUPYTER_GPU_CLAIMS_DIR"])
    )
    with pytest.raises(PlanError, match="there is no GPU 7") as refused:
        session.change("jupyter-gpu run", selection="7")
    assert not isinstance(refused.value, UsageError)
    seen: list[dict] = []
    real = ClaimBoard.claim
    monkeypatch.setattr(ClaimBoard, "claim", lambda board, uuids, **fields: seen.append(fields) or real(board, uuids))
    session.claim_fields = {"label": "train.py"}
    plan = session.change("jupyter-gpu run", selection="auto")
    assert plan is not None and seen == [{"label": "train.py"}]
    session.release_claims()
