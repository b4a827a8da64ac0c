"""Where a grading's sandboxed workers come from. The plugin (grader/grading/pytest_plugin.py) is handed
one of two kinds with the same methods, and never asks which it has:

- ColdWorkers, for a session of its own process (`python -m grader.grading.session`): every worker is
  started for this grading and ends with it.
- HostWorkers, for a grading host (grader/grading/warm_host.py): the reference's worker, the same for
  every submission, is kept from one grading to the next, and the next grading's worker is
  started while this one runs. Nothing of a submission is kept: its worker, uid and folders
  end with its grading.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..assignment import Assignment
from ..sandbox import Confinement, Submission


class Grading(Protocol):
    """What the workers read of a grading (pytest_plugin.Grading)."""
    assignment: Assignment
    device: str
    want_uid: bool
    submission_path: Path

    def closed_paths(self) -> list[Path]: ...


def confinement_for(assignment: Assignment, device: str, closed: list[Path], want_uid: bool,
                    keep_out: list[Path] = ()) -> Confinement:
    """A confinement (and so a uid) of its own: stopping one worker sweeps its uid clean."""
    conf = Confinement.prepare(device, closed, want_uid=want_uid, keep_out=keep_out)
    if assignment.worker_memory_bytes:
        conf.memory_limit = assignment.worker_memory_bytes
    return conf


def started(module: Path, assignment: Assignment, device: str, conf: Confinement, roots: dict,
            budget: float = float("inf")) -> Submission:
    """A worker for `module`, spawned now: its imports overlap whatever the caller does next."""
    timeout = assignment.call_timeout_on(device)
    worker = Submission(module, list(assignment.functions), device, conf, timeout, budget, **roots)
    worker.start()
    return worker


@dataclass
class _First:
    """The grading a host expects first (HostWorkers.ahead): what its workers are keyed by."""
    assignment: Assignment
    device: str
    want_uid: bool
    submission_path: Path


class ColdWorkers:
    """Each worker started for this grading alone."""

    spare_used = False

    def __init__(self, roots: dict):
        self.roots = roots          # the grading's own folders, removed by it when it ends

    def spare_for(self, grading: Grading) -> Submission | None:
        return None

    def began(self, grading: Grading) -> None:
        pass

    def reference(self, grading: Grading) -> Submission:
        a = grading.assignment
        conf = confinement_for(a, grading.device, grading.closed_paths(), grading.want_uid)
        return started(a.reference, a, grading.device, conf, self.roots)

    def after(self, reference: Submission) -> None:
        reference.close()
        reference.conf.release()

    def others(self) -> list[Submission]:
        """Workers of this process that are not the grading's own (a host's spare)."""
        return []

    def ended(self, grading: Grading) -> None:
        pass

    def close(self) -> None:
        pass


class HostWorkers:
    """What a grading host keeps from one grading to the next (see the module's docstring)."""

    def __init__(self, roots: dict, spare: bool = True):
        self.roots = roots          # the host's own folders: a grading's are removed when it ends
        self.spare = spare          # start each grading's worker ahead (see began)
        self._references: dict[tuple, Submission] = {}
        self._spare: tuple[tuple, Submission] | None = None
        self.spare_used = False     # whether the last grading took the spare

    @staticmethod
    def _spare_key(grading: Grading) -> tuple:
        return (grading.submission_path.name, grading.device, grading.want_uid)

    def began(self, grading: Grading) -> None:
        """A worker for the next grading, started as this one begins, so that its imports, its
        CUDA context and Triton's start are done by the time that grading asks for it (started
        as a grading ends, it was still importing when the next asked). It has a uid and folders
        of its own, and holds an empty placeholder of the file's name until its grading puts its
        file there (Submission.adopt); it gets that grading's own closed paths then."""
        self._close_spare()
        if not self.spare:
            return
        a = grading.assignment
        placeholder = Path(self.roots["scratch_root"]) / grading.submission_path.name
        placeholder.write_text("")
        conf = confinement_for(a, grading.device, a.protected_paths(), grading.want_uid)
        self._spare = (self._spare_key(grading), started(placeholder, a, grading.device, conf, self.roots,
                                                         a.time_budget_s))

    def ahead(self, assignment: Assignment, device: str, want_uid: bool = True) -> None:
        """Before the host's first grading: the reference's worker, and a spare for a file of the
        assignment's name, started while the host itself starts and its first session collects.
        Started with that session instead, ten-odd processes of a class's first gradings imported
        torch and made CUDA contexts at once, and each grading waited 6-12 s for its worker on the
        H200 (docs/instructor.md). A first grading they do not suit starts its own."""
        first = _First(assignment, device, want_uid, Path(assignment.submission))
        self.reference(first)
        self.began(first)

    def spare_for(self, grading: Grading) -> Submission | None:
        """The spare, if it suits this grading (the same file name, device and uid policy) and
        its worker is still there; else None, and the grading starts its own."""
        key, spare = self._spare or (None, None)
        self._spare = None
        self.spare_used = spare is not None and key == self._spare_key(grading) and spare.started
        if spare is not None and not self.spare_used:
            spare.close()
            spare.conf.release()
        return spare if self.spare_used else None

    def _close_spare(self) -> None:
        if self._spare is not None:
            self._spare[1].close()
            self._spare[1].conf.release()
            self._spare = None

    def reference(self, grading: Grading) -> Submission:
        a = grading.assignment
        key = (str(a.reference), grading.device, grading.want_uid)
        if key not in self._references:
            conf = confinement_for(a, grading.device, a.protected_paths(), grading.want_uid)
            self._references[key] = started(a.reference, a, grading.device, conf, self.roots)
        return self._references[key]

    def after(self, reference: Submission) -> None:
        """A grading is over: its tensors go, and a reference worker that crashed, timed out or
        was restarted during it is replaced before the next, not trusted to be as it was."""
        reference.release_shared()
        if reference.restarts or reference.unavailable or reference.failures:
            self._drop(reference)

    def others(self) -> list[Submission]:
        return [self._spare[1]] if self._spare is not None else []

    def ended(self, grading: Grading) -> None:
        if self._spare is None or not self._spare[1].started:
            self.began(grading)     # the one started with this grading ended with it

    def _drop(self, reference: Submission) -> None:
        for key, ref in list(self._references.items()):
            if ref is reference:
                del self._references[key]
        reference.close()
        reference.conf.release()

    def close(self) -> None:
        self._close_spare()
        for ref in list(self._references.values()):
            self._drop(ref)
