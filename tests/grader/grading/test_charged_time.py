"""Time a session fixture spends for one area (charge_time) counts in that area's seconds, not
in the test whose setup it ran in: the reference's timing for performance runs before the
first test, which on L1 is an int64_overflow test."""
import time
from pathlib import Path
from types import SimpleNamespace

from grader.assignment import Assignment
from grader.gpu.memo import GpuMemo
from grader.grading.pytest_plugin import _WaitsKept, charged, set_aside
from grader.grading.report import build
from grader.grading.scoring import NEIGHBOURS, SHARED_FIGURE, TestResult, score

REPO = Path(__file__).resolve().parents[3]
ASSIGNMENT = Assignment.load(REPO / "assignment" / "l1_paged_kv_write")


def _seconds(results):
    report = build(ASSIGNMENT, score(ASSIGNMENT, results, "cuda"), results,
                   submission={"file": "x.py", "sha256": "0" * 64, "bytes": 1},
                   environment={"device": "cuda", "device_name": "gpu", "python": "3", "torch": "t",
                                "triton": "t", "triton_interpreter": False},
                   sandbox={"privilege_drop": True, "uid": 61234}, phases={"total_s": 1.0}, instructor={"seed": 1})
    return {a: d["seconds"] for a, d in report["extra_data"]["areas"].items()}, report


def test_charged_seconds_move_to_their_area_and_the_test_keeps_its_duration():
    results = [TestResult("t::first", "int64_overflow", "c", "passed", duration_s=10.5,
                          charged={"performance": 9.0}),
               TestResult("t::perf", "performance", "c", "passed", duration_s=2.0, measure=1.0)]
    seconds, report = _seconds(results)
    assert seconds["int64_overflow"] == 1.5 and seconds["performance"] == 11.0
    first = next(t for t in report["tests"] if t["tags"] == ["int64_overflow"])
    assert first["extra_data"]["duration_s"] == 10.5, "the test's own record is what pytest measured"


def test_a_charge_to_an_unknown_area_or_beyond_the_test_moves_nothing_it_should_not():
    results = [TestResult("t::a", "write", "c", "passed", duration_s=1.0, charged={"no_such_area": 0.5}),
               TestResult("t::b", "padding", "c", "passed", duration_s=1.0, charged={"performance": 3.0})]
    seconds, _ = _seconds(results)
    assert seconds["write"] == 1.0
    assert seconds["padding"] == 1.0 and seconds["performance"] == 0.0, "no time is made up"


def test_a_charged_wait_for_the_neighbours_is_a_phase_and_in_no_area():
    """The reference's timing waited for another grading's (a memo being made, a quiet window):
    the seconds are the neighbours', shown as a phase, counted in neither the area charged nor
    the test they ran in, so that no budget pays for them."""
    results = [TestResult("t::first", "slot_mapping", "c", "passed", duration_s=6.0,
                          charged={"performance": 2.5, NEIGHBOURS: 3.0}),
               TestResult("t::perf", "performance", "c", "passed", duration_s=2.0, measure=1.0,
                          charged={"performance": 0.5, NEIGHBOURS: 1.0})]
    seconds, report = _seconds(results)
    assert seconds["slot_mapping"] == 0.5 and seconds["performance"] == 3.5
    assert report["extra_data"]["phases"]["gpu_neighbours_wait_s"] == 4.0


def test_making_a_figure_every_grading_on_the_gpu_reads_is_a_phase_and_in_no_area(tmp_path):
    """The grading that makes the reference's timings for its GPU (a memo, once for every grading
    there) is not charged for them: which grading makes them is chance, and a budget that paid for
    them would fail whichever one did. Its making is the phase gpu_shared_figure_s, its waits for
    the neighbours gpu_neighbours_wait_s; what asking for the figure cost it stays in the area."""
    def grading():
        return SimpleNamespace(charged={}, current="t::first")

    def make():
        time.sleep(0.4)
        set_aside(maker, NEIGHBOURS, 0.1)   # of which a turn it waited for: the neighbours'
        return {"t_ref_s": 1.0}

    maker, reader = grading(), grading()
    for who in (maker, reader):
        with charged(who, "performance"):
            got = _WaitsKept(GpuMemo(tmp_path, "gpu-a", "fp"), who).get("timings", make)
            time.sleep(0.05)            # the asking grading's own use of the figure
        assert got.value == {"t_ref_s": 1.0}
    made = maker.charged["t::first"]
    assert 0.25 <= made[SHARED_FIGURE] <= 0.4 and 0.1 <= made[NEIGHBOURS] < 0.12, made
    assert 0.05 <= made["performance"] < 0.15, made
    read = reader.charged["t::first"]
    assert SHARED_FIGURE not in read and 0.05 <= read["performance"] < 0.15, read

    results = [TestResult("t::first", "int64_overflow", "c", "passed", duration_s=6.0,
                          charged={"performance": 0.5, SHARED_FIGURE: 3.0, NEIGHBOURS: 1.0}),
               TestResult("t::perf", "performance", "c", "passed", duration_s=2.0, measure=1.0)]
    seconds, report = _seconds(results)
    assert seconds["int64_overflow"] == 1.5 and seconds["performance"] == 2.5
    assert report["extra_data"]["phases"]["gpu_shared_figure_s"] == 3.0
