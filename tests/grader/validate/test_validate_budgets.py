"""Each rubric area's time budget (assignment.toml `budget_s`): the reference must grade
within it, and no corpus entry may cost more than a few times it plus one call's timeout,
so a wrong answer cannot hold a grading slot for long (validate.over_budget)."""
import re
from pathlib import Path

import pytest

from grader.validate import corpus as corp
from grader.validate import matrix as v
from grader.assignment import Assignment, AssignmentError
from grader.grading.report import build
from grader.grading.scoring import TestResult, score

REPO = Path(__file__).resolve().parents[3]
ASSIGNMENT = Assignment.load(REPO / "assignment" / "l1_paged_kv_write")
CPU = v.columns(ASSIGNMENT, "cpu")


def report(seconds: dict[str, float], timeouts=(), waits: dict[str, float] | None = None, unmeasured=()):
    """Every test passed; area a's two tests took seconds[a] between them (0.1 s elsewhere);
    an area in `timeouts` has its second test end at a call's timeout; in an area of `waits`,
    its first test waited that long for its neighbours on the GPU (its turn, then a quiet window)."""
    results = []
    for name in ASSIGNMENT.areas:
        each = seconds.get(name, 0.1) / 2
        waited = (waits or {}).get(name)
        results += [TestResult(f"test_{name}.py::t{i}", name, "contract",
                               "timeout" if (i and name in timeouts) else
                               "not_measured" if name in unmeasured else "passed", duration_s=each,
                               figures={"gpu_turn_wait_s": waited * 0.75, "gpu_quiet_wait_s": waited * 0.25}
                               if (waited and not i) else None)
                    for i in range(2)]
    return build(ASSIGNMENT, score(ASSIGNMENT, results, "cpu"), results,
                 submission={"file": "x.py", "sha256": "0" * 64, "bytes": 1},
                 environment={"device": "cpu", "device_name": "cpu", "python": "3", "torch": "t",
                              "triton": "t", "triton_interpreter": True},
                 sandbox={"privilege_drop": True, "uid": 61234}, phases={"total_s": 1.0}, instructor={"seed": 1})


def entry(kind, name="x"):
    return corp.Entry(kind, name, Path(f"{name}.py"))


BUDGETS = {"write": 4.0, "slot_mapping": 2.0}


def test_the_reference_over_an_areas_budget_fails_the_matrix():
    ok = v.judge(entry("reference", "reference"), report({"write": 3.9}), CPU, budgets=BUDGETS, call_timeout_s=60)
    assert ok.problems == [] and ok.seconds["write"] == pytest.approx(3.9)
    slow = v.judge(entry("reference", "reference"), report({"write": 4.2}), CPU, budgets=BUDGETS, call_timeout_s=60)
    assert slow.problems == ["the reference spent 4.2 s in write (waits for its neighbours aside), "
                             "over its budget of 4 s"]


def test_waiting_for_the_neighbours_on_a_shared_gpu_is_not_the_gradings_own_cost():
    """With several gradings on a GPU a timing test waits for the others' turns: that time is theirs. The
    budget bounds what is left, and the table shows the waits beside it."""
    row = v.judge(entry("reference", "reference"), report({"write": 12.0}, waits={"write": 9.0}), CPU,
                  budgets=BUDGETS, call_timeout_s=60)
    assert row.problems == [] and row.seconds["write"] == pytest.approx(3.0) and row.waited["write"] == pytest.approx(9.0)
    over = v.judge(entry("reference", "reference"), report({"write": 12.0}, waits={"write": 7.0}), CPU,
                   budgets=BUDGETS, call_timeout_s=60)
    assert [p for p in over.problems if "spent 5.0 s in write" in p], over.problems
    assert "waited 9.00 s" in v.budget_table([row], BUDGETS)


def test_a_timing_made_again_beside_foreign_work_is_not_the_gradings_own_cost():
    """A quiet window thrown away because a neighbour's work ran in it (gpu_quiet_redo_s) was
    spent on the neighbour's account, as a wait for the window is."""
    results = [TestResult(f"test_performance.py::t{i}", name, "contract", "passed", duration_s=4.5 if i else 0.5,
                          figures={"gpu_quiet_wait_s": 0.5, "gpu_quiet_redo_s": 2.5} if (i and name == "write") else None)
               for name in ASSIGNMENT.areas for i in range(2)]
    made = build(ASSIGNMENT, score(ASSIGNMENT, results, "cpu"), results,
                 submission={"file": "x.py", "sha256": "0" * 64, "bytes": 1},
                 environment={"device": "cpu", "device_name": "cpu", "python": "3", "torch": "t", "triton": "t",
                              "triton_interpreter": True},
                 sandbox={"privilege_drop": True, "uid": 61234}, phases={"total_s": 1.0}, instructor={"seed": 1})
    row = v.judge(entry("reference", "reference"), made, CPU, budgets=BUDGETS, call_timeout_s=60)
    assert row.seconds["write"] == pytest.approx(2.0) and row.waited["write"] == pytest.approx(3.0)
    assert not [p for p in row.problems if "write" in p], row.problems


def test_an_area_not_measured_is_judged_neither_way_its_seconds_included():
    """No quiet window came (foreign work on the GPU): the grading is regraded, and the area's
    measurements, made again beside that work, are not its cost. The other areas still count."""
    busy = v.judge(entry("reference", "reference"), report({"write": 9.0, "slot_mapping": 2.5}, unmeasured={"write"}),
                   CPU, budgets=BUDGETS, call_timeout_s=60)
    assert busy.cells["write"] == "n/m"
    assert [p for p in busy.problems if "budget" in p] == [
        "the reference spent 2.5 s in slot_mapping (waits for its neighbours aside), over its budget of 2 s"]


def test_another_entry_may_cost_three_budgets_and_one_timeout_and_no_more():
    # within 3 x 2 s + 60 s
    row = v.judge(entry("right"), report({"slot_mapping": 65.0}), CPU, budgets=BUDGETS, call_timeout_s=60)
    assert not [p for p in row.problems if "slot_mapping" in p]
    row = v.judge(entry("right"), report({"slot_mapping": 79.6}), CPU, budgets=BUDGETS, call_timeout_s=60)
    assert [p for p in row.problems if "spent 79.6 s in slot_mapping" in p], row.problems


def test_tests_that_ended_at_a_timeout_are_the_timeouts_to_bound_not_the_budget():
    # a hang: 60 + 15 + 15 s in one area, each call ended by the engine's own timeout
    row = v.judge(entry("adversarial"), report({"write": 90.0}, timeouts={"write"}), CPU,
                  budgets=BUDGETS, call_timeout_s=60)
    assert not [p for p in row.problems if "budget" in p], row.problems


def test_the_table_puts_the_reference_beside_each_budget():
    rows = [v.judge(entry("reference", "reference"), report({"write": 3.0}), CPU, budgets=BUDGETS),
            v.judge(entry("wrong", "slow"), report({"write": 9.0}), CPU, budgets=BUDGETS)]
    text = v.budget_table(rows, BUDGETS)
    assert "write" in text and "3.00 s" in text and "budget   4.00 s" in text and "9.00 s (wrong/slow)" in text


def test_the_l1_rubric_states_a_budget_for_every_area_on_each_device_it_grades():
    for name, area in ASSIGNMENT.areas.items():
        for device in ("cpu", "cuda"):
            if area.applies_on(device):
                assert area.budget_on(device) is not None, f"{name} has no {device} budget"


def test_the_l1_reference_may_cost_ten_seconds_of_a_gpu_in_all():
    """Twenty gradings a minute on a GPU holding four at once leaves a grading 12 s of a slot,
    waits for its neighbours included. Each area's budget is a fifth to three quarters over the
    most the reference spent there on an H100 four at once; their sum, 10 s, is what no budget
    may grow past unseen."""
    cuda = {name: area.budget_on("cuda") for name, area in ASSIGNMENT.areas.items()}
    assert None not in cuda.values() and round(sum(cuda.values()), 6) <= 10, cuda


@pytest.mark.parametrize("budget", ["5", "{ cpu = -1 }", "{ gpu = 3 }", "{ cpu = true }"])
def test_a_malformed_budget_is_refused_in_a_sentence(tmp_path, budget):
    text = (REPO / "assignment" / "l1_paged_kv_write" / "assignment.toml").read_text()
    text = re.sub(r"(\[rubric\.write\]\npoints = .*\n)budget_s = .*\n", lambda m: m.group(1) + f"budget_s = {budget}\n",
                  text, count=1)
    assert f"budget_s = {budget}" in text
    text = text.replace('"../../', '"' + str(REPO) + "/")
    (tmp_path / "assignment.toml").write_text(text)
    with pytest.raises(AssignmentError, match=r"\[rubric.write\] budget_s must be a table of positive seconds"):
        Assignment.load(tmp_path)
