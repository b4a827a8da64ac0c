"""tools/make_demo_class.py: a class built from the corpus, and its check."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "make_demo_class.py"


def test_demo_class_has_distinct_files_and_expectations_for_everyone(tmp_path):
    out = tmp_path / "class"
    subprocess.run([sys.executable, str(TOOL), "--out", str(out), "--reference-copies", "2"], check=True,
                   capture_output=True, text=True)
    assert out.stat().st_mode & 0o077 == 0, "the class holds solutions: it must be closed to others"
    expected = json.loads((out / "expected.json").read_text())
    kinds = [w["kind"] for w in expected.values()]
    assert kinds.count("reference") == 2 and kinds.count("missing") == 1
    assert kinds.count("wrong") >= 16 and kinds.count("adversarial") >= 12
    files = sorted((out / "submitted").glob("*/l1_paged_kv_write/l1_paged_kv_write.py"))
    assert len(files) == len(expected) - 1                      # the empty folder has none
    assert len({hashlib.sha256(f.read_bytes()).hexdigest() for f in files}) == len(files)
    assert all(w["fails"] for w in expected.values() if w["kind"] == "wrong")

    # Nothing graded yet: every student with a file differs from what is expected.
    check = subprocess.run([sys.executable, str(TOOL), "--check", str(out)], capture_output=True, text=True)
    assert check.returncode == 1
    assert f"{len(files)} students differ" in check.stdout


def test_demo_class_refuses_an_existing_course(tmp_path):
    (tmp_path / "submitted").mkdir()
    run = subprocess.run([sys.executable, str(TOOL), "--out", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode != 0 and "already exists" in run.stderr


def test_check_counts_the_areas_a_wrong_file_fails_only_on_this_device(tmp_path):
    """layout_dims_misread also fails policy on the CPU (its kernel crashes the interpreter's
    worker there), as its `fails_on` says: graded so on the CPU, it is as expected; failing
    policy on the GPU is not."""
    sys.path.insert(0, str(REPO))
    import importlib.util

    from grader.assignment import Assignment
    from grader.course.folder import StudentRow
    spec = importlib.util.spec_from_file_location("make_demo_class", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assignment = Assignment.find(None)
    expected = tool.build(tmp_path / "class", assignment, 0)
    what = expected["wrong_layout_dims_misread"]
    assert "policy" in what["fails_on"]["cpu"] and "policy" not in what["fails"], what

    class Graded:
        def __init__(self, device):
            self.assignment = assignment
            self.device = device

        def rows(self):
            failed = set(what["fails"]) | set(what["fails_on"]["cpu"])
            areas = {name: {"graded": area.applies_on(self.device), "points": area.points,
                            "score": 0.0 if name in failed else area.points}
                     for name, area in assignment.areas.items()}
            report = {"score": 0.0, "max_score": 100.0,
                      "extra_data": {"environment": {"device": self.device}, "areas": areas}}
            return [StudentRow("wrong_layout_dims_misread", "graded", 0.0, 100.0, report=report)]

    only = {"wrong_layout_dims_misread": what}
    assert tool.check(Graded("cpu"), only) == []
    extra = [a for a in what["fails_on"]["cpu"] if a not in what["fails"]]
    assert tool.check(Graded("cuda"), only) == ["wrong_layout_dims_misread: passes [] it must fail, "
                                                f"fails {extra} it must pass"]


def test_the_check_fails_a_cheat_that_scored_and_warns_where_weak_isolation_let_it(load_tool, capsys):
    """find_reference at 85/85 (a world-readable copy of the solution found on the disk) fails the
    check where its workers had a uid of their own; where they had not, it is allowed, but said."""
    from grader.assignment import Assignment
    from grader.course.folder import StudentRow
    tool = load_tool("make_demo_class")

    def graded(drop: bool) -> StudentRow:
        report = {"score": 85.0, "max_score": 85.0,
                  "extra_data": {"environment": {"device": "cpu"}, "areas": {},
                                 "sandbox": {"privilege_drop": drop, "why_not": None if drop else "not root"}}}
        return StudentRow("adv_find_reference", "graded", 85.0, 85.0, report=report)

    class Course:
        assignment = Assignment.find(None)

        def __init__(self, drop):
            self.drop = drop

        def rows(self):
            return [graded(self.drop)]

    expected = {"adv_find_reference": {"kind": "adversarial", "deserves": 0.0, "deserves_without_drop": None}}
    assert tool.check(Course(True), expected) == ["adv_find_reference: 85 points, deserves at most 0"]
    assert tool.check(Course(False), expected) == []
    assert "WARNING adv_find_reference: 85 points, deserves 0" in capsys.readouterr().err
