"""A second assignment beside L1, as L2 will be: the toy (tests/grader/toy) with its own rubric,
suite, reference and corpus validates through the same command, the engine unchanged."""
import json
import subprocess
import sys

import pytest

from grader.assignment import REPO, Assignment
from grader.validate.corpus import load_corpus

TOY = REPO / "tests/grader/toy"


def test_the_toy_corpus_is_its_own(tmp_path):
    entries = load_corpus(Assignment.load(TOY), mutants=tmp_path)
    assert [e.label for e in entries] == ["reference", "wrong/echo_stringifies", "right/out_of_place_copy"]
    assert entries[0].file == TOY / "submissions/good.py"


@pytest.mark.slow
def test_the_toy_validates_on_the_cpu(tmp_path):
    out = tmp_path / "matrix.json"
    run = subprocess.run([sys.executable, "-m", "grader", "validate", "--assignment", str(TOY), "--device", "cpu",
                          "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    matrix = json.loads(out.read_text())
    assert (matrix["assignment"], matrix["columns"], matrix["ok"]) == ("toy_add", ["add", "echo"], True)
    cells = {row["name"]: row["cells"] for row in matrix["rows"]}
    assert cells == {"reference": {"add": "ok", "echo": "ok"},
                     "echo_stringifies": {"add": "ok", "echo": "killed"},
                     "out_of_place_copy": {"add": "ok", "echo": "ok"}}
