"""The files a kernel leaves for others, removed when it goes away: its report in this server's
runtime directory (read by the sampling thread with
:class:`jupyter_gpu.sources.kernel_reports.ReportReader`), also at start-up when a dead kernel left
one behind; and its GPU claims (:mod:`jupyter_gpu.sources.claims`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from ..sources.claims import ClaimBoard, claims_directory
from ..sources.kernel_reports import REPORT_PREFIX, ReportReader, remove_dead_reports
from ..sources.processes import ProcessKey

log = logging.getLogger(__name__)


class ReportFiles:
    """The reports in ``report_dir`` (None: this server has no runtime directory; nothing to do)."""

    def __init__(self, report_dir: str | None, reader: ReportReader) -> None:
        self.report_dir = report_dir
        self.reader = reader

    def remove(self, kernel_id: str, unless: ProcessKey | None = None) -> None:
        """Delete a kernel's report file (it went away), unless it is the report of process ``unless``."""
        if not self.report_dir or not kernel_id or "/" in kernel_id or kernel_id.startswith("."):
            return
        path = Path(self.report_dir) / f"{REPORT_PREFIX}{kernel_id}.json"
        if unless is not None:
            report = self.reader.read_one(path)
            if report is not None and report.key == unless:
                return
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as error:
            log.warning("jupyter_gpu: cannot remove the kernel report %s: %s", path, error)

    def remove_orphans(self) -> list[str]:
        """Delete the reports that a dead kernel left behind; returns their kernel ids.

        A kernel removes its report when it exits, and this server removes its kernels' reports when
        it stops; but a server killed outright (SIGKILL: the hub's last resort, the OOM killer)
        does neither, and its kernels then exit through ipykernel's parent poller (``os._exit``)
        without their own clean-up. So when a server starts, every report in its runtime directory
        whose writer (PID and start time) no longer runs, in this PID namespace, is deleted
        (:func:`jupyter_gpu.sources.kernel_reports.remove_dead_reports`, which kernels run too).
        Files of other owners, bad files and reports from another PID namespace are left alone.
        """
        if not self.report_dir:
            return []
        removed = remove_dead_reports(self.report_dir, self.reader)
        if removed:
            log.info("jupyter_gpu: removed %d kernel report(s) left by kernels that no longer run", len(removed))
        return removed


def remove_ended_claims(ended: Iterable[ProcessKey] = ()) -> int:
    """Delete the GPU claims of the ``ended`` kernel processes, and this user's claims of processes
    that no longer run, in the claims directory kernels use (``$JUPYTER_GPU_CLAIMS_DIR``, else
    ``/tmp``; the kernels inherit the server's environment). A kernel removes its own when it ends,
    but not when it is killed (SIGKILL: a shutdown's last resort, the OOM killer, its server killed
    with it). Never raises (claims are never required); returns how many were deleted."""
    try:
        removed = ClaimBoard(claims_directory()).remove_ended(ended)
    except Exception:
        log.warning("jupyter_gpu: removing the GPU claims of ended kernels failed", exc_info=True)
        return 0
    if removed:
        log.info("jupyter_gpu: removed %d GPU claim(s) of kernels that ended", removed)
    return removed
