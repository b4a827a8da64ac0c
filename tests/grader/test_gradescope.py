"""The Gradescope autograder zip: what it holds, and run_autograder in a folder laid out like /autograder."""
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.gpu import machines
from grader.assignment import REPO
from toy_class import validate_report

sys.path.insert(0, str(REPO / "tools"))
import make_gradescope  # noqa: E402

TOY = REPO / "tests/grader/toy"


def unpack(zip_path: Path, root: Path) -> Path:
    """As Gradescope does: the zip into ROOT/source, run_autograder copied to ROOT."""
    source = root / "source"
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(source)
        for info in zf.infolist():
            os.chmod(source / info.filename, (info.external_attr >> 16) & 0o777)
    (root / "run_autograder").write_bytes((source / "run_autograder").read_bytes())
    (root / "run_autograder").chmod(0o755)
    (root / "submission").mkdir()
    return root


def run_autograder(root: Path) -> dict:
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), PYTHON=sys.executable)
    proc = subprocess.run([str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((root / "results" / "results.json").read_text())


def test_l1_zip_holds_the_grader_and_hidden_tests_but_no_reference(tmp_path):
    first = make_gradescope.build(REPO / "assignment/l1_paged_kv_write", tmp_path / "a")
    again = make_gradescope.build(REPO / "assignment/l1_paged_kv_write", tmp_path / "b")
    assert first.name == "l1_paged_kv_write_autograder.zip"
    assert first.read_bytes() == again.read_bytes(), "the zip is not reproducible"
    with zipfile.ZipFile(first) as zf:
        names = set(zf.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
        reference = (REPO / "reference/l1_paged_kv_write.py").read_bytes()
        assert all(zf.read(name) != reference for name in names)
    assert {"setup.sh", "run_autograder", "grader/grading/grade_one.py", "grader/sandbox/worker.py",
            "assignment/l1_paged_kv_write/assignment.toml", "requirements/runtime.txt"} <= names
    assert any(n.startswith("tests/hidden/l1_paged_kv_write/test_") for n in names)
    assert not any(n.startswith(("reference/", "tests/public/", "tests/corpus/", "student_template/"))
                   or "__pycache__" in n for n in names)
    assert modes["run_autograder"] == modes["setup.sh"] == 0o755
    with_ref = make_gradescope.build(REPO / "assignment/l1_paged_kv_write", tmp_path / "c", with_reference=True)
    assert "reference/l1_paged_kv_write.py" in zipfile.ZipFile(with_ref).namelist()


def test_scripts_are_valid_bash(tmp_path):
    root = unpack(make_gradescope.build(TOY, tmp_path / "zip"), tmp_path / "autograder")
    for script in ("setup.sh", "run_autograder"):
        subprocess.run(["bash", "-n", str(root / "source" / script)], check=True)


@pytest.mark.slow
def test_run_autograder_grades_the_toy_without_its_reference(tmp_path):
    zip_path = make_gradescope.build(TOY, tmp_path / "zip")
    assert not any("submissions/" in n for n in zipfile.ZipFile(zip_path).namelist())
    root = unpack(zip_path, tmp_path / "autograder")
    (root / "submission" / "toy.py").write_bytes((TOY / "submissions/good.py").read_bytes())
    results = run_autograder(root)
    validate_report(results)
    assert results["score"] == results["max_score"] == 90.0
    assert results["extra_data"]["submission"]["file"] == "toy.py"
    if os.geteuid() == 0:
        assert results["extra_data"]["sandbox"]["privilege_drop"] is True


@pytest.mark.slow
def test_run_autograder_refuses_a_misnamed_file_as_grade_all_does(tmp_path):
    root = unpack(make_gradescope.build(TOY, tmp_path / "zip"), tmp_path / "autograder")
    (root / "submission" / "Toy.py").write_bytes((TOY / "submissions/good.py").read_bytes())
    results = run_autograder(root)
    validate_report(results)
    assert results["score"] == 0 and "rename Toy.py to toy.py" in results["output"]
    assert len(results["tests"]) == 11       # collected without the reference in the zip


@pytest.mark.slow
def test_run_autograder_refuses_a_link_and_never_reads_its_target(tmp_path):
    root = unpack(make_gradescope.build(TOY, tmp_path / "zip"), tmp_path / "autograder")
    classmate = tmp_path / "classmate.py"
    classmate.write_bytes((TOY / "submissions/good.py").read_bytes())
    (root / "submission" / "toy.py").symlink_to(classmate)
    results = run_autograder(root)
    validate_report(results)
    assert results["score"] == 0 and "toy.py is a symbolic link" in results["output"]
    assert results["extra_data"]["submission"]["sha256"] != hashlib.sha256(classmate.read_bytes()).hexdigest()


@pytest.mark.slow
def test_run_autograder_without_a_python_file(tmp_path):
    root = unpack(make_gradescope.build(TOY, tmp_path / "zip"), tmp_path / "autograder")
    (root / "submission" / "notes.txt").write_text("I ran out of time")
    results = run_autograder(root)
    assert results["score"] == 0 and "no toy.py among the files handed in (found notes.txt)" in results["output"]


def test_run_autograder_writes_a_zero_when_the_grader_fails(tmp_path):
    root = unpack(make_gradescope.build(TOY, tmp_path / "zip"), tmp_path / "autograder")
    (root / "submission" / "toy.py").write_bytes((TOY / "submissions/good.py").read_bytes())
    (root / "source/grader/grading/grade_one.py").write_text("raise ImportError('a broken image')\n")
    results = run_autograder(root)
    assert results["score"] == 0 and results["tests"] == []
    assert "The autograder failed before it could grade your file" in results["output"]
    assert "Traceback" not in results["output"]


def test_setup_installs_torch_from_the_cpu_index_at_the_pinned_version(tmp_path):
    root = unpack(make_gradescope.build(TOY, tmp_path / "zip"), tmp_path / "autograder")
    setup = (root / "source/setup.sh").read_text()
    pin = next(line for line in (REPO / "requirements/constraints.txt").read_text().splitlines()
               if line.startswith("torch=="))
    assert f'--index-url https://download.pytorch.org/whl/cpu "{pin}"' in setup


@pytest.mark.slow
def test_the_default_l1_zip_gives_the_reference_full_marks(tmp_path):
    """No reference in the zip: no test may need it on the CPU, or every correct file loses its points."""
    if machines.resolve_device("auto") == "cuda":
        pytest.skip("with a GPU the performance area is graded, and it needs --with-reference")
    zip_path = make_gradescope.build(REPO / "assignment/l1_paged_kv_write", tmp_path / "zip")
    root = unpack(zip_path, tmp_path / "autograder")
    (root / "submission" / "l1_paged_kv_write.py").write_bytes((REPO / "reference/l1_paged_kv_write.py").read_bytes())
    results = run_autograder(root)
    validate_report(results)
    assert not (root / "source/reference").exists()
    assert results["score"] == results["max_score"] == 85.0, [
        (t["name"], t["output"]) for t in results["tests"] if t["status"] != "passed"]
