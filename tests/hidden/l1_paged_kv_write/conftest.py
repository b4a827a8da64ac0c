"""Run-wide fixtures of the L1 hidden suite."""
from __future__ import annotations

import pytest

from grader.gpu_quiet import Busy
from grader.sandbox import SandboxFailure
from timing import CASES, REPEATS, Batch, case_seed, copy_ceiling, round_trip, timed


def _performance_is_graded(session) -> bool:
    return any(item.get_closest_marker("area").args[0] == "performance" and not item.get_closest_marker("skip")
               for item in session.items if item.get_closest_marker("area"))


@pytest.fixture(scope="session", autouse=True)
def reference_timings(request, device, submission, run_seed, gpu_share, quiet_gpu, charge_time) -> dict:
    """The reference's time on every performance case, taken before the first test, while the
    submission's worker is up but has not imported the file: nothing the submission starts
    (a thread keeping the GPU or the host busy) can slow the reference and so lift its own
    ratio. case -> {"t_ref_s", "round_trip_s"}; "problem" -> why there are none, and "busy" where
    no quiet window came (the case is then not measured for the submission either)."""
    if device.type != "cuda" or not _performance_is_graded(request.session):
        return {}
    # All of it counts in the performance area, not in the test whose setup it runs in.
    with charge_time("performance"):
        return _time_reference(request, device, submission, run_seed, gpu_share, quiet_gpu)


def _time_reference(request, device, submission, run_seed, gpu_share, quiet_gpu) -> dict:
    try:
        reference = request.getfixturevalue("reference")
    except pytest.skip.Exception as exc:
        return {"problem": str(getattr(exc, "msg", exc))}
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
                    copy_ceiling(device)
                    fixed = round_trip(reference, batch)
                    return fixed, min(timed(reference, batch) for _ in range(REPEATS)) - fixed
                with turn.exclusive() as alone:
                    fixed, t_ref = quiet_gpu.measure(one_timing)
                timings[case] = {"t_ref_s": t_ref, "round_trip_s": fixed, "ref_alone": float(bool(alone)),
                                 "gbps_ref": batch.bytes_moved / t_ref / 1e9}
            except Busy as exc:
                timings[case] = {"busy": str(exc)}
            except (Exception, SandboxFailure) as exc:
                timings[case] = {"problem": f"{type(exc).__name__}: {exc}"}
            finally:
                reference.exchange.release()
    return timings
