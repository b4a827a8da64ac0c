"""Run-wide fixtures of the L1 hidden suite."""
from __future__ import annotations

import collections.abc

import pytest

from grader.gpu.quiet import Busy
from grader.sandbox import SandboxFailure
from timing import CASES, REPEATS, Batch, case_seed, copy_ceiling, round_trip, timed


def _performance_is_graded(session) -> bool:
    return any(item.get_closest_marker("area").args[0] == "performance" and not item.get_closest_marker("skip")
               for item in session.items if item.get_closest_marker("area"))


@pytest.fixture(scope="session", autouse=True)
def reference_timings(request, device, submission, run_seed, gpu_share, quiet_gpu, charge_time, gpu_memo) -> dict:
    """The reference's time on every performance case, taken before the first test, while the
    submission's worker is up but has not imported the file: nothing the submission starts
    (a thread keeping the GPU or the host busy) can slow the reference and so lift its own
    ratio. case -> {"t_ref_s", "round_trip_s", ...}; "problem" -> why there are none, and "busy"
    where no quiet window came (the case is then not measured for the submission either).

    The reference's time is a property of the GPU, not of one grading's random inputs, so it is
    measured once per GPU and read by the gradings on it for the memo's lifetime (gpu_memo): a
    grading then holds the GPU alone only for the submission's timings. A grading that made it
    measured it before its own submission ran, as every grading did before; a set with a case
    not timed is never kept."""
    if device.type != "cuda" or not _performance_is_graded(request.session):
        return {}

    try:
        reference = request.getfixturevalue("reference")
    except pytest.skip.Exception as exc:
        return {"problem": str(getattr(exc, "msg", exc))}

    def make():
        return _time_reference(reference, device, submission, run_seed, gpu_share, quiet_gpu)

    def get(wait: bool):
        # Asking counts in the performance area, not in the test whose setup it runs in. What it
        # waited for other gradings (their timing of it, their work in its window) counts in
        # neither, nor does making it here: the figure is the GPU's, read by every grading on it.
        with charge_time("performance"):
            memo = gpu_memo.get("l1-reference-timings", make, wait=wait,
                                keep=lambda timings: all("t_ref_s" in timings.get(case, {}) for case in CASES))
        if memo is None:
            return None
        return {case: {**t, "ref_age_s": memo.age_s} if isinstance(t, dict) else t
                for case, t in memo.value.items()}
    # Where another grading on this GPU is timing the reference now (slots that start together),
    # this one runs its other tests meanwhile and reads the figures when a performance test needs
    # them. Made then, here (the other's timing failed), they are made as above: the submission's
    # worker stopped first (_time_reference).
    return get(wait=False) or _Later(lambda: get(wait=True))


class _Later(collections.abc.Mapping):
    """A mapping made on first use."""

    def __init__(self, make):
        self._make, self._value = make, None

    def _got(self) -> dict:
        if self._value is None:
            self._value = self._make()
        return self._value

    def __getitem__(self, key):
        return self._got()[key]

    def __iter__(self):
        return iter(self._got())

    def __len__(self) -> int:
        return len(self._got())


def _time_reference(reference, device, submission, run_seed, gpu_share, quiet_gpu) -> dict:
    try:
        submission.wait_idle()
    except SandboxFailure:
        pass                      # its own tests say why; the reference can still be timed
    timings: dict = {}
    # A failure here must not take the other areas down with it (this fixture sets up every
    # test): it is kept per case, and each performance test reports its own. As the submission's
    # cases are (test_performance.py), the cases are compiled and warmed up beside the
    # neighbours, one case's inputs held at a time, and then timed together in one window with
    # the GPU held alone: one wait for the neighbours to leave it, and one wait for NVML's samples
    # on each side of it, instead of one each per case.
    def failed(exc) -> dict:
        return {"problem": f"{type(exc).__name__}: {exc}"}

    with gpu_share() as turn:
        ready = []
        for case in CASES:
            try:
                timed(reference, Batch(reference, case, case_seed(run_seed, case)))    # compile and warm up
                ready.append(case)
            except (Exception, SandboxFailure) as exc:
                timings[case] = failed(exc)
            finally:
                reference.exchange.release()
        if not ready:
            return timings

        def one_window() -> dict:
            # The copy ceiling too (the submission's floor): the GPU's, measured here in the
            # quiet window, before the cases and after them, the highest of the run kept.
            ceiling, got = copy_ceiling(device), {}
            for case in ready:
                batch = None
                try:
                    batch = Batch(reference, case, case_seed(run_seed, case))
                    times = timed(reference, batch, REPEATS)
                    fixed = round_trip(reference, batch)
                    got[case] = {"t_ref_s": min(times) - fixed, "round_trip_s": fixed,
                                 "gbps_ref": batch.bytes_moved / (min(times) - fixed) / 1e9, "ceiling_bps": ceiling}
                except (Exception, SandboxFailure) as exc:
                    got[case] = failed(exc)
                finally:
                    del batch
                    reference.exchange.release()
            ceiling = copy_ceiling(device)          # again, the GPU warm from the cases: the highest
            for found in got.values():
                if "t_ref_s" in found:
                    found["ceiling_bps"] = ceiling
            return got
        try:
            with turn.exclusive() as alone:
                # serves=0: these figures back no test's measure; the submission's own window does
                got = quiet_gpu.measure(one_window, serves=0)
            for found in got.values():
                if "t_ref_s" in found:
                    found["ref_alone"] = float(bool(alone))
            timings.update(got)
        except Busy as exc:
            timings.update({case: {"busy": str(exc)} for case in ready})
    return timings
