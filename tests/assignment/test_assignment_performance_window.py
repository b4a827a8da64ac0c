"""The performance area times its cases together, in one quiet window, at its first test
(tests/hidden/l1_paged_kv_write/test_performance.py, _time_cases). What is timed only runs on a
GPU; its bookkeeping is held here on the CPU, with the timing itself played by stand-ins: a
case that fails its warm-up stays out of the window and fails its own test; a wrong case in the
window fails alone and the others are timed; a worker lost in the window leaves the cases after
it to time on their own; and the window backs exactly one recorded measure per case timed in it."""
import importlib.util
import sys
from pathlib import Path

import pytest

from grader.gpu.quiet import Unchecked
from grader.sandbox import WorkerCrashed

# the suite's own marker (area) is the grader plugin's, not registered here
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")
HIDDEN = Path(__file__).resolve().parents[1] / "hidden" / "l1_paged_kv_write"
CASES = ["prefill-fp16-fused", "decode-bf16-fused-h32", "hd640-fp16-plain"]


@pytest.fixture
def performance(monkeypatch):
    monkeypatch.syspath_prepend(str(HIDDEN))           # its `from timing import ...`
    monkeypatch.delitem(sys.modules, "timing", raising=False)
    spec = importlib.util.spec_from_file_location("l1_test_performance", HIDDEN / "test_performance.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)     # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


class _Exchange:
    def __init__(self):
        self.released = 0

    def release(self):
        self.released += 1


class _Submission:
    def __init__(self):
        self.exchange = _Exchange()


def _play(performance, monkeypatch, behaviour: dict[str, str]) -> list[tuple[str, int]]:
    """Stand-ins for the batches and their timing: `behaviour[case]` is "ok", "warm-up fails",
    "wrong" (its check fails in the window) or "crash" (its worker dies in the window)."""
    calls = []

    class Batch:
        bytes_moved = 4_000_000

        def __init__(self, proxy, case, seed):
            self.case = case

    def timed(proxy, batch, repeats=1):
        calls.append((batch.case, repeats))
        how = behaviour[batch.case]
        if how == "warm-up fails" and repeats == 1:
            raise AssertionError("a timed launch did not leave the expected cache")
        if how == "wrong" and repeats > 1:
            raise AssertionError("a timed launch did not leave the expected cache")
        if how == "crash" and repeats > 1:
            raise WorkerCrashed("the worker died")
        return [0.002] * repeats
    monkeypatch.setattr(performance, "Batch", Batch)
    monkeypatch.setattr(performance, "timed", timed)
    monkeypatch.setattr(performance, "round_trip", lambda proxy, batch: 0.0004)
    monkeypatch.setattr(performance, "copy_ceiling", lambda device: 4.0e12)
    return calls


def _time(performance, cases=CASES):
    quiet = Unchecked()
    reference = {c: {"t_ref_s": 0.0019, "round_trip_s": 0.0005, "ceiling_bps": 4.2e12} for c in CASES}
    out = performance._time_cases(cases, _Submission(), object(), reference, 7, "cuda", quiet)
    return out, quiet


def test_every_case_is_timed_in_one_window_after_every_warm_up(performance, monkeypatch):
    calls = _play(performance, monkeypatch, dict.fromkeys(CASES, "ok"))
    out, quiet = _time(performance)
    assert len(quiet.windows) == 1 and quiet.serving == 3, "one window, backing the three tests' measures"
    assert calls == [(c, 1) for c in CASES] + [(c, performance.REPEATS) for c in CASES], \
        "each case warmed up (beside the neighbours) before any was timed (alone)"
    for case in CASES:
        t = out[case]
        assert isinstance(t, performance.Timed) and t.cases == 3
        assert t.fixed == 0.0004, "the smaller round trip (this run's or the reference's) is taken off"
        assert t.ceiling == 4.2e12, "the higher copy ceiling (this run's or the reference's) counts"
        assert t.times == pytest.approx([0.0016] * performance.REPEATS)


def test_a_case_that_fails_its_warm_up_stays_out_of_the_window(performance, monkeypatch):
    calls = _play(performance, monkeypatch, {**dict.fromkeys(CASES, "ok"), CASES[1]: "warm-up fails"})
    out, quiet = _time(performance)
    assert isinstance(out[CASES[1]], AssertionError), "its own test fails with the check's message"
    assert (CASES[1], performance.REPEATS) not in calls
    assert all(isinstance(out[c], performance.Timed) and out[c].cases == 2 for c in (CASES[0], CASES[2]))
    assert quiet.serving == 2


def test_a_wrong_case_in_the_window_fails_alone(performance, monkeypatch):
    _play(performance, monkeypatch, {**dict.fromkeys(CASES, "ok"), CASES[0]: "wrong"})
    out, quiet = _time(performance)
    assert isinstance(out[CASES[0]], AssertionError)
    assert all(isinstance(out[c], performance.Timed) for c in CASES[1:]), "the worker is up: the others are timed"
    assert quiet.serving == 2, "a case that was not timed backs no measure"


def test_a_worker_lost_in_the_window_leaves_the_cases_after_it_to_their_own_tests(performance, monkeypatch):
    _play(performance, monkeypatch, {**dict.fromkeys(CASES, "ok"), CASES[1]: "crash"})
    out, quiet = _time(performance)
    assert isinstance(out[CASES[0]], performance.Timed)
    assert isinstance(out[CASES[1]], WorkerCrashed)
    assert CASES[2] not in out, ("a new worker would compile while the GPU is held alone, and its calls "
                                 "could run the window past its turn: the case is timed by its own test")
    assert quiet.serving == 1
