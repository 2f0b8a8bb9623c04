"""The snapshot endpoint's answer: a sample joined to the kernel table, rendered once for every client.

Pure apart from the time given to it: no tornado, no jupyter_server, no I/O. :class:`AnswerBuilder`
renders an :class:`Answer` (the JSON bytes, gzipped once, an ETag, and the flat rows Prometheus and
the culler read) from a sample and a :class:`~jupyter_gpu.server.attribution.KernelTable`;
which process is whose kernel is :mod:`jupyter_gpu.server.attribution`'s rule.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..core.availability import Reservation, reservations_of
from ..core.gauges import GAUGED
from ..core.snapshot import GpuInfo, GpuProcess, Snapshot
from .attribution import (
    CullPolicy,
    Holdings,
    KernelInfo,
    KernelMatcher,
    KernelTable,
    attribution_note,
    current_reports,
    kernel_summary,
    notebook_of,
    process_fields,
    run_fields,
)
from .cull import Due, due_kernels

if TYPE_CHECKING:
    from ..sources.kernel_reports import KernelReport
    from ..sources.processes import ProcessKey
    from .config import JupyterGpuServer

GpuRow = tuple[str, str, str, "str | None", tuple[tuple[str, Any], ...]]  # index, uuid, name, error, gauges
SliceRow = tuple[str, str, str, str, int, int]  # MIG: gpu, parent uuid, MIG uuid, profile, used, total

_dumps = functools.partial(json.dumps, allow_nan=False, separators=(",", ":"))


@dataclass(frozen=True)
class Answer:
    """The snapshot endpoint's answer for one sample and one kernel table, built once for all.

    It keeps bytes and flat rows, not the annotated dict: with thousands of processes, a dict per
    process kept alive between samples is work for Python's cyclic garbage collector, whose full
    collections pause every thread, the event loop included (measured: 100-300 ms at 8,000).
    """

    key: tuple[Any, ...]
    nvml_available: bool
    timestamp: float
    gpu_rows: tuple[GpuRow, ...]
    body: bytes
    etag: str
    gzipped: bytes  # the same body, gzip-compressed once here for every client that accepts it
    kernel_memory: tuple[tuple[str, str, str, int], ...]  # (kernel_id, notebook, gpu, bytes)
    kernel_idle: tuple[tuple[str, str, float], ...]  # (kernel_id, notebook, idle seconds)
    due: tuple[Due, ...] = ()  # kernels due for culling at build time
    kernel_cull_in: tuple[tuple[str, str, float], ...] = ()  # (kernel_id, notebook, seconds to cull)
    slice_rows: tuple[SliceRow, ...] = ()  # every readable MIG slice


def stale_after_s(interval_s: float) -> float:
    """A sample older than this is marked ``stale`` (NVML is slow or hung)."""
    return 2 * interval_s + 1.0


def answer_key(snapshot: Snapshot | None, table: KernelTable, now: float, interval_s: float) -> tuple[Any, ...]:
    """What an answer is the answer for: (sample time, table version, stale, age second while stale)."""
    if snapshot is None:
        return (None, table.version, True, int(now))
    stale = now - snapshot.timestamp > stale_after_s(interval_s)
    # While stale, age_s is refreshed once a second; a fresh answer keeps the age it was built with.
    return (snapshot.timestamp, table.version, stale, int(now) if stale else None)


def newer(key: tuple[Any, ...], than: tuple[Any, ...]) -> bool:
    """Whether answer ``key`` is at least as new as ``than`` (sample time, then table version)."""
    return ((key[0] or 0.0), key[1], key[3] or 0) >= ((than[0] or 0.0), than[1], than[3] or 0)


@dataclass
class _Rendering:
    """What one build learns while rendering the GPUs."""

    kernels: dict[str, KernelInfo]
    matcher: KernelMatcher
    reports: dict[str, KernelReport]
    idle_of: dict[str, float | None]
    ancestry: dict[int, tuple[ProcessKey, ...]] = field(default_factory=dict)
    reservations: tuple[Reservation, ...] = ()
    holdings: Holdings = field(default_factory=Holdings)
    total: int = 0  # GPU processes
    unknown: int = 0  # GPU processes whose PID does not exist here
    gpu_texts: list[str] = field(default_factory=list)
    gpu_rows: list[GpuRow] = field(default_factory=list)
    slice_rows: list[SliceRow] = field(default_factory=list)


class AnswerBuilder:
    """Renders answers for one server's settings, reusing the JSON of unchanged foreign processes.

    Each process is rendered to its JSON text as soon as it is annotated, so a sample of thousands
    of processes never holds thousands of dicts at once: live dicts would be promoted through the
    garbage collector's generations and make its full collections, which pause every thread (the
    event loop too), more frequent.
    """

    def __init__(self, config: JupyterGpuServer, me: str | None) -> None:
        self.config = config
        self.me = me  # the user running this server: their processes show in full
        # The JSON text of each process nobody's kernel owns, per GPU, kept while its (immutable)
        # record is the same object: thousands of other users' steady processes cost no encoding.
        self._texts: dict[int, dict[int, tuple[GpuProcess, str]]] = {}
        self._texts_for: tuple[bool, str | None] | None = None

    def build(self, snapshot: Snapshot | None, table: KernelTable, now: float) -> Answer:
        """Join a snapshot to the kernel table and render the answer: the snapshot contract plus
        attribution, idle time and staleness (see docs/server.md), as JSON bytes."""
        sampled = snapshot is not None
        snapshot = snapshot if snapshot is not None else self._no_sample(now)
        age_s = max(0.0, now - snapshot.timestamp) if sampled else None
        work = self._start(snapshot, table.kernels, now)
        self._render_gpus(snapshot, work)
        summaries = self._summaries(snapshot, work, now)
        body = self._body(snapshot, summaries, work, age_s)
        return Answer(
            key=answer_key(snapshot if sampled else None, table, now, self.config.interval_s),
            nvml_available=snapshot.nvml_available,
            timestamp=snapshot.timestamp,
            gpu_rows=tuple(work.gpu_rows),
            body=body,
            etag='"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"',
            gzipped=gzip.compress(body, compresslevel=5, mtime=0),
            kernel_memory=tuple((*label, used) for label, used in sorted(work.holdings.by_label.items())),
            kernel_idle=tuple(
                (k["kernel_id"], k["notebook"] or "", k["idle_s"])
                for k in summaries
                if k["gpu_memory"] and k["idle_s"] is not None
            ),
            due=due_kernels(summaries, {gpu.index: gpu.uuid for gpu in snapshot.gpus}),
            kernel_cull_in=tuple(
                (k["kernel_id"], k["notebook"] or "", k["cull_in_s"]) for k in summaries if k["cull_in_s"] is not None
            ),
            slice_rows=tuple(work.slice_rows),
        )

    @property
    def policy(self) -> CullPolicy:
        """The idle and culling settings as they are now (the traits can change at run time)."""
        config = self.config
        return CullPolicy(config.idle_threshold_s, config.cull_idle_after_s, config.cull_warn_s)

    def _no_sample(self, now: float) -> Snapshot:
        """What the answer says before NVML answered at all."""
        return Snapshot(
            nvml_available=False,
            timestamp=now,
            error=f"no GPU sample yet: NVML has not answered within {self.config.wait_s:g} s "
            "(the driver may be hung or starting; NVML start-up can take seconds)",
        )

    @staticmethod
    def _start(snapshot: Snapshot, kernels: dict[str, KernelInfo], now: float) -> _Rendering:
        """The attribution inputs of one build: the reports that count and the matcher."""
        reports = current_reports(getattr(snapshot, "reports", {}), kernels)
        keys: dict[int, ProcessKey] = getattr(snapshot, "keys", {})
        ancestry: dict[int, tuple[ProcessKey, ...]] = getattr(snapshot, "ancestry", {})
        return _Rendering(
            kernels=kernels,
            matcher=KernelMatcher(kernels, keys, ancestry, reports),
            reports=reports,
            idle_of={kid: info.idle_s(now) for kid, info in kernels.items()},
            ancestry=ancestry,
            reservations=getattr(snapshot, "reservations", ()),
        )

    def _render_gpus(self, snapshot: Snapshot, work: _Rendering) -> None:
        """Render every GPU (its processes annotated and filtered, its slices) into ``work``."""
        show_others = self.config.show_other_users
        previous = self._texts if (show_others, self.me) == self._texts_for else {}
        all_texts: dict[int, dict[int, tuple[GpuProcess, str]]] = {}
        for gpu in snapshot.gpus:
            all_texts[gpu.index] = {}
            fragments = self._render_processes(gpu, work, previous.get(gpu.index, {}), all_texts[gpu.index])
            self._render_gpu(gpu, fragments, work)
        self._texts, self._texts_for = all_texts, (show_others, self.me)

    def _render_processes(
        self,
        gpu: GpuInfo,
        work: _Rendering,
        old_texts: dict[int, tuple[GpuProcess, str]],
        texts: dict[int, tuple[GpuProcess, str]],
    ) -> list[tuple[int, str]]:
        """(pid, JSON text) of each process of ``gpu`` that may be shown, in NVML's order."""
        dumps = _dumps
        show_others, me, policy = self.config.show_other_users, self.me, self.policy
        fragments: list[tuple[int, str]] = []
        for process in gpu.processes:
            work.total += 1
            pid = process.pid
            info = work.matcher.kernel_of(pid)
            if info is not None:
                notebook = notebook_of(info, work.reports.get(info.kernel_id))
                work.holdings.add(info.kernel_id, notebook, gpu.index, process)
                entry = process.to_dict()
                entry.update(process_fields(info, notebook, work.idle_of[info.kernel_id], process.memory or 0, policy))
                entry["mine"] = True
                fragments.append((pid, dumps(entry)))
                continue
            if process.user is None and process.name is None:
                work.unknown += 1  # a PID that does not exist here (another PID namespace)
            others = process.user is None or process.user != me
            if others and not show_others:
                continue
            run = None if others or not work.reservations else run_fields(pid, work.ancestry, work.reservations)
            if run is not None:  # this user's `jupyter-gpu run`: from its own claim, never cached
                entry = self._foreign_entry(process, others)
                entry.update(run)
                fragments.append((pid, dumps(entry)))
                continue
            cached = old_texts.get(pid)
            if cached is not None and cached[0] is process:  # the reader reuses unchanged records
                texts[pid] = cached  # the same tuple: nothing new for the garbage collector
            else:
                texts[pid] = (process, dumps(self._foreign_entry(process, others)))
            fragments.append((pid, texts[pid][1]))
        return fragments

    @staticmethod
    def _foreign_entry(process: GpuProcess, others: bool) -> dict[str, Any]:
        """A process nobody's kernel here holds; another user's without its name or command."""
        if others:
            entry: dict[str, Any] = {
                "pid": process.pid,
                "memory": process.memory,
                "user": process.user,
                "name": None,
                "type": process.type,
            }
            if process.slice is not None:
                entry["slice"] = process.slice
        else:
            entry = process.to_dict()
        entry.update(kernel_id=None, notebook=None, own=False, idle_s=None, idle=False, mine=not others)
        return entry

    @staticmethod
    def _render_gpu(gpu: GpuInfo, fragments: list[tuple[int, str]], work: _Rendering) -> None:
        """Render ``gpu`` around its processes' texts, with its MIG slices, and its gauge rows."""
        dumps = _dumps
        fragment_of = dict(fragments)  # pid -> its JSON text, for the GPU's slices (MIG mode)
        head = replace(gpu, processes=(), slices=()).to_dict()
        del head["processes"], head["slices"]
        head["reservations"] = [r.to_dict() for r in reservations_of(gpu.uuid, work.reservations)]
        # A slice lists the same process entries as its GPU (annotated and filtered the same way:
        # another user's process hidden on the GPU is hidden on its slice too).
        slice_texts = []
        for slice_ in gpu.slices:
            slice_head = replace(slice_, processes=()).to_dict()
            del slice_head["processes"]
            slice_head["reservations"] = [r.to_dict() for r in reservations_of(slice_.uuid, work.reservations)]
            members = ",".join(fragment_of[p.pid] for p in slice_.processes if p.pid in fragment_of)
            slice_texts.append(dumps(slice_head)[:-1] + ',"processes":[' + members + "]}")
            if slice_.error is None:
                work.slice_rows.append(
                    (str(gpu.index), gpu.uuid, slice_.uuid, slice_.profile, slice_.memory_used, slice_.memory_total)
                )
        work.gpu_texts.append(
            dumps(head)[:-1]
            + ',"processes":['
            + ",".join(text for _, text in fragments)
            + '],"slices":['
            + ",".join(slice_texts)
            + "]}"
        )
        work.gpu_rows.append(
            (str(gpu.index), gpu.uuid, gpu.name, gpu.error, tuple((name, head.get(name)) for name in GAUGED))
        )

    def _summaries(self, snapshot: Snapshot, work: _Rendering, now: float) -> list[dict[str, Any]]:
        """The answer's ``kernels``: one summary per kernel of the table."""
        known_slices = {s.uuid for gpu in snapshot.gpus for s in gpu.slices}
        policy = self.policy
        return [
            kernel_summary(info, work.holdings, work.reports.get(kid), now, policy, known_slices)
            for kid, info in work.kernels.items()
        ]

    def _body(
        self, snapshot: Snapshot, summaries: list[dict[str, Any]], work: _Rendering, age_s: float | None
    ) -> bytes:
        """The answer's JSON bytes: the snapshot's top-level fields, the server's additions, the GPUs."""
        config = self.config
        top = replace(snapshot, gpus=()).to_dict()
        del top["gpus"]
        top["kernels"] = summaries
        top["idle_threshold_s"] = float(config.idle_threshold_s)
        top["attribution"], top["attribution_note"] = attribution_note(
            snapshot, work.total, work.unknown, work.holdings.matched, work.reports
        )
        top["stale"] = age_s is None or age_s > stale_after_s(config.interval_s)
        top["age_s"] = None if age_s is None else round(age_s, 3)
        top["interval_s"] = float(config.interval_s)
        culling = config.cull_idle_after_s > 0
        top["cull_idle_after_s"] = float(config.cull_idle_after_s) if culling else None
        top["cull_warn_s"] = float(config.cull_warn_s) if culling else None
        return (_dumps(top)[:-1] + ',"gpus":[' + ",".join(work.gpu_texts) + "]}").encode()
