"""Browser tests' stand-ins for the server's answers (Playwright routes), shared by the sidebar's
JupyterLab and Notebook 7 tests."""

from __future__ import annotations

from typing import Any

IDLE_KERNEL = "abcdef01-2345-6789-abcd-ef0123456789"


def show_an_idle_kernel_about_to_be_culled(page: Any, gpu: int = 1, notebook: str = "experiments/train.ipynb") -> None:
    """Answer every snapshot request with the server's snapshot plus one of this user's kernels on
    ``gpu``: idle for 1 h 50 min while holding 3 GiB, shut down by the culler in 9 min."""

    def answer(route: Any) -> None:
        response = route.fetch()
        data = response.json()
        if len(data.get("gpus", [])) <= gpu:  # no GPUs yet (e.g. NVML not read yet): as it is
            route.fulfill(response=response)
            return
        data["gpus"][gpu]["processes"].append(
            {
                "pid": 4_000_077,
                "memory": 3 * 1024**3,
                "user": None,
                "name": None,
                "type": "compute",
                "kernel_id": IDLE_KERNEL,
                "notebook": notebook,
                "own": True,
                "idle_s": 6600,
                "idle": True,
                "cull_in_s": 540,
                "cull_warning": True,
            }
        )
        data["kernels"] = [
            {
                "kernel_id": IDLE_KERNEL,
                "notebook": notebook,
                "gpu_memory": 3 * 1024**3,
                "reported_gpu_memory": None,
                "cull_in_s": 540,
                "cull_warning": True,
            }
        ]
        route.fulfill(response=response, json=data)

    page.route("**/jupyter-gpu/snapshot*", answer)
