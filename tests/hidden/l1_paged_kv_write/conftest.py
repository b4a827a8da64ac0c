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
        # All of it counts in the performance area, not in the test whose setup it runs in.
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
    timings = {}
    # A failure here must not take the other areas down with it (this fixture sets up every
    # test): it is kept per case, and each performance test reports its own.
    # The GPU is shared while the inputs are built and the kernel warms up, and held alone
    # only while the reference is timed.
    with gpu_share() as turn:
        for case in CASES:
            try:
                batch = Batch(reference, case, case_seed(run_seed, case))
                timed(reference, batch)                  # compile and warm up

                def one_timing(batch=batch):
                    # The copy ceiling too (the submission's floor): the GPU's, measured here in a
                    # quiet window, the highest of the run kept.
                    ceiling = copy_ceiling(device)
                    fixed = round_trip(reference, batch)
                    return ceiling, fixed, min(timed(reference, batch, REPEATS)) - fixed
                with turn.exclusive() as alone:
                    ceiling, fixed, t_ref = quiet_gpu.measure(one_timing)
                timings[case] = {"t_ref_s": t_ref, "round_trip_s": fixed, "ref_alone": float(bool(alone)),
                                 "gbps_ref": batch.bytes_moved / t_ref / 1e9, "ceiling_bps": ceiling}
            except Busy as exc:
                timings[case] = {"busy": str(exc)}
            except (Exception, SandboxFailure) as exc:
                timings[case] = {"problem": f"{type(exc).__name__}: {exc}"}
            finally:
                reference.exchange.release()
    return timings
