"""Gradescope's leaderboard: declared in assignment.toml, filled from a passed test's
figures, checked against the results.json schema, ranked on the class summary page."""
import types

import pytest

from grader.grading import report as report_mod
from grader.assignment import REPO, Assignment, AssignmentError
from grader.course.folder import StudentRow
from grader.grading.grade_one import environment
from grader.grading.scoring import TestResult, score
from grader.summary.page import _leaderboard
from toy_reports import validate_report

TOY_TOML = (REPO / "tests/grader/toy/assignment.toml").read_text()
BOARD = '''
[leaderboard]
enabled = true
columns = [
  { name = "GB/s", test = "test_speed[big]", figure = "gbps", order = "desc" },
  { name = "ratio", test = "test_speed[big]", figure = "measure" },
  { name = "us (small)", test = "test_speed[small]", figure = "us", order = "asc" },
]
'''


def toy_with(tmp_path, extra: str) -> Assignment:
    (tmp_path / "assignment.toml").write_text(TOY_TOML + extra)
    return Assignment.load(tmp_path)


def result(name, outcome="passed", measure=None, figures=None, area="add"):
    return TestResult(nodeid=f"tests/grader/toy/suite/test_toy.py::{name}", area=area, contract=name,
                      outcome=outcome, duration_s=0.1, measure=measure, figures=figures)


def build(assignment, results):
    areas = score(assignment, results, "cpu")
    return report_mod.build(assignment, areas, results, submission={"file": "toy.py", "sha256": "0" * 64, "bytes": 10},
                            environment=environment("cpu"), sandbox={}, phases={"total_s": 1.0},
                            instructor={"seed": 1})


def test_columns_are_read_from_the_toml_and_off_unless_enabled(tmp_path):
    board = toy_with(tmp_path, BOARD).leaderboard
    assert [(c.name, c.test, c.figure, c.order) for c in board] == [
        ("GB/s", "test_speed[big]", "gbps", "desc"), ("ratio", "test_speed[big]", "measure", "desc"),
        ("us (small)", "test_speed[small]", "us", "asc")]
    assert toy_with(tmp_path, BOARD.replace("enabled = true", "enabled = false")).leaderboard == ()
    assert Assignment.load(REPO / "tests/grader/toy").leaderboard == ()


@pytest.mark.parametrize("bad, says", [
    ('[leaderboard]\nenabled = true\ncolumns = [{ name = "x", test = "t", figure = "f", order = "up" }]\n',
     'order must be "asc" or "desc"'),
    ('[leaderboard]\nenabled = true\ncolumns = [{ name = "x", figure = "f" }]\n', "needs name, test and figure"),
    ('[leaderboard]\nenabled = true\n', "enabled but has no columns"),
])
def test_a_malformed_leaderboard_is_the_instructors_error(tmp_path, bad, says):
    with pytest.raises(AssignmentError, match=says):
        toy_with(tmp_path, bad)


def test_the_report_carries_each_column_its_passed_test_recorded(tmp_path):
    assignment = toy_with(tmp_path, BOARD)
    results = [result("test_speed[big]", measure=0.93456789, figures={"gbps": 3981.123456, "us": 1.0}),
               result("test_speed[small]", outcome="failed", figures={"us": 12.5})]
    report = build(assignment, results)
    validate_report(report)
    assert report["leaderboard"] == [{"name": "GB/s", "value": 3981.12, "order": "desc"},
                                     {"name": "ratio", "value": 0.934568, "order": "desc"}]


def test_no_leaderboard_without_a_passed_timed_test(tmp_path):
    assignment = toy_with(tmp_path, BOARD)
    report = build(assignment, [result("test_speed[big]", outcome="failed", figures={"gbps": 9e9})])
    validate_report(report)
    assert "leaderboard" not in report
    assert "leaderboard" not in build(Assignment.load(REPO / "tests/grader/toy"),
                                      [result("test_speed[big]", measure=1.0, figures={"gbps": 1.0})])


def test_the_schema_holds_gradescopes_leaderboard_fields(tmp_path):
    report = build(toy_with(tmp_path, BOARD), [result("test_speed[big]", measure=1.0, figures={"gbps": 2.0})])
    for bad in ([{"name": "x"}], [{"name": "x", "value": 1, "order": "sideways"}],
                [{"name": "x", "value": 1, "rank": 3}]):
        with pytest.raises(Exception, match="leaderboard|required|sideways|Additional"):
            validate_report({**report, "leaderboard": bad})
    validate_report({**report, "leaderboard": [{"name": "stars", "value": "***"}]})   # Gradescope allows strings


def test_the_summary_ranks_by_the_first_column(tmp_path):
    course = types.SimpleNamespace(assignment=toy_with(tmp_path, BOARD))
    rows = [StudentRow("slow", "graded", report={"leaderboard": [{"name": "GB/s", "value": 1200.0}]}),
            StudentRow("fast", "graded", report={"leaderboard": [{"name": "GB/s", "value": 3900.0},
                                                           {"name": "ratio", "value": 0.98}]}),
            StudentRow("cpu_only", "graded", report={})]
    page = _leaderboard(course, rows)
    assert page.index("fast") < page.index("slow") and "cpu_only" not in page
    assert "3,900" in page and "0.98" in page
    assert _leaderboard(types.SimpleNamespace(assignment=Assignment.load(REPO / "tests/grader/toy")), rows) == ""
    assert "No report has a leaderboard entry" in _leaderboard(course, rows[2:])
