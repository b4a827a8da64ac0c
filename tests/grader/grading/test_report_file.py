"""Reading a report back (grader/grading/report_reader.py, also as report.read) and writing files whole
(grader/files.py)."""
import os

import pytest

from grader.grading import report, report_reader
from grader.assignment import REPO, Assignment
from grader.files import atomic_write, replacing
from grader.grading.scoring import TestResult, score

TOY = Assignment.load(REPO / "tests/grader/toy")


def built(pytest_exit=0, problem=None):
    runs = [TestResult("suite/test_toy.py::test_add", "add", "adds", "passed", duration_s=0.5, measure=0.9,
                       figures={"gbps": 12.5}),
            TestResult("suite/test_toy.py::test_echo", "echo", "echoes", "failed", duration_s=0.25)]
    return report.build(TOY, score(TOY, runs, "cpu"), runs,
                         submission={"file": "toy.py", "sha256": "ab" * 32, "bytes": 10},
                         environment={"device": "cpu"}, sandbox={"privilege_drop": True, "uid": 61234},
                         phases={"total_s": 1.0}, instructor={"seed": 1, "pytest_exit": pytest_exit},
                         problem=problem)


def test_the_accessors_read_what_build_wrote():
    r = built()
    assert report_reader.sha256(r) == "ab" * 32 and report_reader.device(r) == "cpu"
    assert report_reader.grader_version(r) == r["extra_data"]["grader_version"]
    assert report_reader.assignment_of(r) == ("toy_add", TOY.fingerprint())
    assert report_reader.interrupted(r) is False and report_reader.problem(r) is None
    assert report_reader.sandbox(r) == {"privilege_drop": True, "uid": 61234}
    assert report_reader.area_points(r) == {"add": 60.0, "echo": 0.0, "gpu_only": None}
    assert report_reader.areas(r)["echo"]["passed"] == 0
    add = next(t for t in r["tests"] if t["tags"] == ["add"])
    assert report_reader.test_detail(add) == {"outcome": "passed", "duration_s": 0.5, "measure": 0.9,
                                              "figures": {"gbps": 12.5}}


def test_the_terminal_table_says_what_the_report_says():
    """`grade` prints its table from the same typed results the report is built from."""
    runs = [TestResult("suite/test_toy.py::test_add", "add", "adds", "passed"),
            TestResult("suite/test_toy.py::test_echo", "echo", "echoes", "failed")]
    areas = score(TOY, runs, "cpu")
    r = report.build(TOY, areas, runs, submission={}, environment={}, sandbox={}, phases={}, instructor={})
    lines = report.terminal_table(areas).splitlines()
    assert lines[0].split() == ["area", "passed", "points"]
    assert lines[1].split() == ["add", "1/1", "60.00/60.00"] and lines[2].split() == ["echo", "0/1", "0.00/30.00"]
    # an area not graded on this device is told from a failure: no count, and why instead of points
    assert lines[3].split() == ["gpu_only", "–", "GPU", "only:", "not", "graded", "on", "this", "machine"], lines[3]
    assert lines[-1].split() == ["total", f"{r['score']:.2f}/{r['max_score']:.2f}"] == ["total", "60.00/90.00"]


def test_an_interrupted_grading_and_its_problem_are_seen():
    r = built(pytest_exit=-2, problem="the grader was stopped")
    assert report_reader.interrupted(r) and report_reader.problem(r) == "the grader was stopped"


def test_accessors_on_a_report_lacking_parts_give_nothing():
    bare = {"score": 0, "extra_data": {"sandbox": None}}
    assert (report_reader.sha256(bare), report_reader.device(bare), report_reader.sandbox(bare),
            report_reader.areas(bare)) == (None, None, {}, {})
    assert report_reader.test_detail({"name": "x"}) == {}


def test_read_round_trips_a_written_report(tmp_path):
    path, written = tmp_path / "deep" / "report.json", built()
    report.write_atomically(written, path)
    assert report.read(path) == written
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]      # no temporary left


@pytest.mark.parametrize("text, says", [
    ('{"score": 1, "tests": [', "not JSON, or cut short"),
    ("", "not JSON, or cut short"),
    ('[1, 2]', "not a grader report"),
    ('{"score": 1, "tests": []}', "not a grader report"),
])
def test_read_says_what_is_wrong_with_a_file_that_is_no_report(tmp_path, text, says):
    path = tmp_path / "report.json"
    path.write_text(text)
    with pytest.raises(report_reader.ReportError, match=says) as exc:
        report_reader.read(path)
    assert str(path) in str(exc.value)
    assert report_reader.read_or_none(path) is None


def test_read_of_a_missing_file_is_none(tmp_path):
    assert report_reader.read(tmp_path / "none.json") is None and report_reader.read_or_none(tmp_path / "none.json") is None


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "page.html"
    atomic_write(path, "old")
    with pytest.raises(RuntimeError):
        with replacing(path) as f:
            f.write("half of the new")
            raise RuntimeError("the writer failed")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["page.html"]
    atomic_write(path, b"\x00new")
    assert path.read_bytes() == b"\x00new"


def test_replacing_passes_open_arguments_through(tmp_path):
    path = tmp_path / "grades.csv"
    with replacing(path, "w", newline="") as f:
        f.write("a\r\nb\n")
    assert path.read_bytes() == b"a\r\nb\n"
