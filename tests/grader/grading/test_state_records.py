"""The trust boundary between a grading and its test process: grader/grading/grade_one.py's `read_state` reads
the records the test process left (grader/grading/state_records.py) and scores only what they hold in the
expected shape. Fed records that are forged, cut short or duplicated, it gives error rows or no
points with a reason, and never a higher score than the honest records of the same run."""
import json
import math

import pytest

from grader.grading import state_records
from grader.assignment import REPO, Assignment
from grader.grading.grade_one import read_state
from grader.grading.scoring import score, totals

TOY = Assignment.load(REPO / "tests/grader/toy")
L1 = Assignment.load(REPO / "assignment/l1_paged_kv_write")

# One honest run of the toy: add has one failed test of two, so echo (which requires add) is gated.
COLLECTED = [{"nodeid": "t::add_a", "area": "add", "contract": "adds"},
             {"nodeid": "t::add_b", "area": "add", "contract": "adds in place"},
             {"nodeid": "t::echo", "area": "echo", "contract": "echoes"}]
OUTCOME = {"t::add_a": "passed", "t::add_b": "failed", "t::echo": "passed"}


def _test(nodeid: str, outcome: str, **meta) -> dict:
    return {"nodeid": nodeid, "outcome": outcome, "call": {"duration": 0.25},
            "metadata": {"outcome": outcome, "hint": "", **meta}}


def _state(folder, collected=COLLECTED, tests=None, raw: dict[str, str] | None = None):
    tests = [_test(n, o) for n, o in OUTCOME.items()] if tests is None else tests
    (folder / state_records.COLLECTED).write_text(json.dumps(collected))
    (folder / state_records.PYTEST).write_text(json.dumps({"tests": tests}))
    for name, text in (raw or {}).items():
        (folder / name).write_text(text)
    return folder


def _read(folder, assignment=TOY, code=1):
    results, _sandbox, problem = read_state(folder, assignment, code, "", {}, {})
    return results, problem, totals(score(assignment, results, "cpu"))[0]


@pytest.fixture
def honest(tmp_path):
    folder = tmp_path / "honest"
    folder.mkdir()
    results, problem, points = _read(_state(folder))
    assert problem is None and [r.outcome for r in results] == ["passed", "failed", "passed"]
    return points


def test_the_honest_records_score_what_they_say(honest):
    assert honest == pytest.approx(30.0)        # half of add; echo gated behind add


def test_a_test_reported_twice_scores_nothing_even_when_one_report_passes(tmp_path, honest):
    tests = [_test(n, o) for n, o in OUTCOME.items()] + [_test("t::add_b", "passed")]
    results, problem, points = _read(_state(tmp_path, tests=tests))
    twice = next(r for r in results if r.nodeid == "t::add_b")
    assert twice.outcome == "error" and "more than once" in twice.hint
    assert problem and "damaged" in problem
    assert points <= honest


def test_a_test_collected_twice_gives_no_points(tmp_path, honest):
    collected = COLLECTED + [COLLECTED[0]]
    results, problem, points = _read(_state(tmp_path, collected=collected))
    assert results == [] and "damaged" in problem and points == 0 <= honest


@pytest.mark.parametrize("collected", [
    [{"nodeid": "t::add_a", "area": "bonus", "contract": "an area the rubric does not have"}],
    [{"nodeid": "t::add_a", "area": "add"}],                     # no contract
    [{"nodeid": 7, "area": "add", "contract": "c"}],             # not a node id
    ["t::add_a"],
])
def test_a_collection_record_of_the_wrong_shape_gives_no_points(tmp_path, collected):
    results, problem, points = _read(_state(tmp_path, collected=collected))
    assert results == [] and "damaged" in problem and points == 0


@pytest.mark.parametrize("name", [state_records.COLLECTED, state_records.PYTEST])
def test_a_record_cut_short_gives_no_points_and_says_why(tmp_path, name):
    folder = _state(tmp_path)
    text = (folder / name).read_text()
    (folder / name).write_text(text[: len(text) // 2])
    results, problem, points = _read(folder)
    assert points == 0 and problem
    assert all(r.outcome == "error" for r in results)


@pytest.mark.parametrize("meta", [
    {"outcome": "PASSED"},                     # not one of the outcomes
    {"outcome": ["passed"]},
    {},
])
def test_a_test_whose_record_is_not_an_outcome_is_an_error_row(tmp_path, honest, meta):
    tests = [_test(n, o) for n, o in OUTCOME.items() if n != "t::add_a"]
    tests.append({"nodeid": "t::add_a", "outcome": "passed", "metadata": meta})
    results, problem, points = _read(_state(tmp_path, tests=tests))
    row = next(r for r in results if r.nodeid == "t::add_a")
    assert row.outcome == "error" and problem
    assert points < honest


def test_a_report_of_a_test_that_was_never_collected_is_ignored(tmp_path, honest):
    tests = [_test(n, o) for n, o in OUTCOME.items()] + [_test("t::extra", "passed")]
    results, problem, points = _read(_state(tmp_path, tests=tests))
    assert [r.nodeid for r in results] == [c["nodeid"] for c in COLLECTED]
    assert problem is None and points == honest


@pytest.mark.parametrize("measure", ["NaN", "Infinity", "true", '"0.9"'])
def test_a_measure_that_is_not_a_finite_number_earns_no_curve_points(tmp_path, measure):
    timed = [{"nodeid": "p::copy", "area": "performance", "contract": "as fast as the reference"}]
    text = json.dumps({"tests": [_test("p::copy", "passed", measure="MEASURE")]}).replace('"MEASURE"', measure)
    folder = _state(tmp_path, collected=timed, raw={state_records.PYTEST: text})
    results = read_state(folder, L1, 0, "", {}, {})[0]
    assert results[0].outcome == "passed" and results[0].measure is None
    assert L1.areas["performance"].credit(results[0].measure) == 0


def test_a_nan_on_the_curve_is_no_credit_not_full_credit():
    curve = L1.areas["performance"]
    assert curve.credit(math.nan) == 0.0
    assert curve.credit(float("inf")) == curve.credit(1e9) == 1.0     # far past the top: full, as before
