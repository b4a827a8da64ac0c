"""Real gradings with the worker's file system an allow-list: a copy of the reference left
world-readable elsewhere on the disk is of no use to `find_reference`, and the reference
itself still earns every point graded on the CPU."""
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from grader.sandbox import isolate

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "reference" / "l1_paged_kv_write.py"

pytestmark = pytest.mark.skipif(not isolate.available()[0], reason="this machine gives no namespaces")


def _grade(file: Path, report: Path) -> dict:
    run = subprocess.run([sys.executable, "-m", "grader", "grade", "--submission", str(file), "--report",
                          str(report), "--device", "cpu", "--seed", "7", "--quiet"], cwd=REPO,
                         capture_output=True, text=True, timeout=900)
    assert report.exists(), run.stdout[-2000:] + run.stderr[-2000:]
    return json.loads(report.read_text())


@pytest.fixture
def planted_reference():
    """A world-readable copy of the reference where a careless instructor might leave one."""
    for top in ("/srv", "/opt", "/var"):
        folder = Path(top) / f"grader-view-test-{uuid.uuid4().hex[:8]}"
        try:
            folder.mkdir(mode=0o755)
        except OSError:
            continue
        folder.chmod(0o755)
        copy = folder / REFERENCE.name
        shutil.copy(REFERENCE, copy)
        copy.chmod(0o644)
        yield copy
        shutil.rmtree(folder, ignore_errors=True)
        return
    pytest.skip("no folder outside the allow-list to plant a copy in")


@pytest.mark.slow
def test_find_reference_finds_nothing_it_can_use(planted_reference, tmp_path):
    report = _grade(REPO / "tests" / "corpus" / "adversarial" / "find_reference.py", tmp_path / "r.json")
    sandbox = report["extra_data"]["sandbox"]
    assert sandbox["file_system"]["view"] == "allow-list", sandbox["file_system"]
    assert report["score"] == 0, f"find_reference scored {report['score']} with a copy at {planted_reference}"
    log = report["extra_data"]["instructor"]["worker"]["log_tail"]
    assert "no reference found" in log and str(planted_reference) not in log


@pytest.mark.slow
def test_the_reference_earns_full_marks_inside_the_allow_list(corpus_matrix):
    """The kill matrix's grading of the reference (make test's, or one made now)."""
    report = corpus_matrix(["reference"]).report("reference")
    assert report["extra_data"]["sandbox"]["file_system"]["view"] == "allow-list"
    assert report["score"] == report["max_score"] > 0
    assert "log_tail" in report["extra_data"]["instructor"]["worker"]
