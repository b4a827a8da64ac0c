"""The service's gradings: one worker thread per slot, each taking the next submission from the
store's round-robin queue and grading it exactly as grade-all does, through batch.Runner (one
`python -m grader grade` process with its sandbox) in a slot of a machines.SlotPool (with a warm
host per slot, grader/warm/hosts.py), or as one task of grade-all's Slurm executor (cluster.py) on a
node. Nothing here grades: it only feeds the engine and files what comes back.

A grading that yields no report is the grader's failure, not the student's (a student's crash,
hang or syntax error still gets a report that says so): it is queued again once, then kept as an
error with the grader's output, which the instructor sees.
"""
from __future__ import annotations

import os
import shutil
import threading
import traceback
from pathlib import Path

from ..grading import report_reader
from ..course.batch import Job, Runner
from ..course.folder import Course
from ..gpu.machines import SlotPool
from ..warm.hosts import HostProcess
from .store import Claim, Store

WORKER_NICE = 10         # gradings yield the CPU to the front door: status requests stay fast


class Graders:
    def __init__(self, course: Course, store: Store, device: str, jobs: int, timeout_s: float,
                 warm: bool = True, say=print, cluster=None):
        """`cluster(folder)`: a cluster.SlurmBatch for one grading (its logs in `folder`); each
        grading is then one Slurm task, `jobs` of them at once, instead of a slot's subprocess."""
        self.course = course
        self.store = store
        self.jobs = jobs
        self.say = say
        self.runner = Runner(course, device, timeout_s)
        self.cluster = cluster
        self.batches: set = set()          # Slurm tasks in flight: cancelled by stop()
        hosts = (lambda env: HostProcess(course.assignment.folder, device, env)) if warm else None
        self.slots = None if cluster else SlotPool(device, jobs, course.assignment.grading_gpu_bytes, hosts=hosts)
        self.note = self.slots.note if self.slots else None
        self.scratch = scratch_root(course.root)
        self.wake = threading.Condition()
        self.stopping = False
        self.threads = [threading.Thread(target=self._work, name=f"grader-{i}", daemon=True) for i in range(jobs)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def poke(self) -> None:
        """A submission was queued."""
        with self.wake:
            self.wake.notify_all()

    def stop(self) -> None:
        """End the gradings in flight (they go back to the queue) and the slots' hosts."""
        with self.wake:
            self.stopping = True
            self.wake.notify_all()
        self.runner.stop()
        for batch in list(self.batches):
            batch.stop()
        for thread in self.threads:
            thread.join(timeout=60)
        if self.slots is not None:
            self.slots.close()

    def _work(self) -> None:
        # Linux keeps a nice value per thread, and the processes a thread starts inherit it: the
        # grading processes (and the slot's warm host, started from here) run below the server.
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICE)
        except (OSError, AttributeError):
            pass
        while True:
            with self.wake:
                if self.stopping:
                    return
            claim = self.store.claim()
            if claim is None:
                with self.wake:
                    if not self.stopping:
                        self.wake.wait(timeout=2.0)
                continue
            try:
                self._grade(claim)
            except Exception:       # the service's own failure on one file must not end the worker
                self._failed(claim, "the service failed while grading:\n" + traceback.format_exc())
            else:
                # A submission of this student's may have been held back while this one ran.
                self.poke()

    def _grade(self, claim: Claim) -> None:
        folder = self.scratch / str(claim.id)
        hand_in = folder / "submitted"
        shutil.rmtree(folder, ignore_errors=True)
        hand_in.mkdir(parents=True)
        # The bytes the database holds, under the assignment's name, in a hand-in folder of their
        # own: the grading applies grade-all's rule to it and reads nothing the client named.
        (hand_in / self.course.assignment.submission).write_bytes(claim.data)
        job = Job(claim.sha256, hand_in, [claim.student], report=folder / "report.json")
        report, why = self._on_cluster(job, folder / "slurm") if self.cluster else self.slots.run(self.runner.grade, job)
        if self.stopping:
            self.store.interrupt(claim, "the service was stopped during the grading")
        elif report is None:
            self._failed(claim, why)
        else:
            self.store.finish(claim, report)
            problem = report_reader.problem(report)
            self.say(f"graded #{claim.id} ({claim.student}, {claim.kind}): {report.get('score')} / "
                     f"{report.get('max_score')}" + (f"; {problem}" if problem else ""))
        shutil.rmtree(folder, ignore_errors=True)

    def _on_cluster(self, job: Job, folder: Path) -> tuple[dict | None, str]:
        """One grading as one Slurm task (cluster.grade_task runs it on the node as a slot would)."""
        batch = self.cluster(folder)
        self.batches.add(batch)
        try:
            if self.stopping:
                return None, "interrupted"
            for outcome in batch.run([job]):
                if outcome is not None:
                    return outcome[1], outcome[2]
            return None, "the Slurm task ended without a word about its grading"
        finally:
            self.batches.discard(batch)

    def _failed(self, claim: Claim, why: str) -> None:
        again = self.store.fail(claim, why)
        first = why.strip().splitlines()[0] if why.strip() else "no detail"
        self.say(f"grading #{claim.id} ({claim.student}) failed in the grader: {first}; "
                 + ("queued again" if again else "kept as an error"))


def scratch_root(course_root: Path) -> Path:
    return Path(course_root) / ".service" / "gradings"
