"""`grade-all --seeds FILE`: earlier gradings made again with their inputs, so that two reports of
the same bytes can be compared test by test (bench/service_burst.py compares the service's reports
with one grade-all of the same files this way)."""
import hashlib
import json

import pytest

import toy_class
from grader.grading import report_reader
from grader.assignment import REPO
from grader.cli import main
from grader.course.folder import Course


def _hand_in(course, student: str, name: str) -> bytes:
    data = (toy_class.SUBMISSIONS / name).read_bytes() + f"\n# {student}\n".encode()
    path = course / "submitted" / student / toy_class.TOY.id / toy_class.TOY.submission
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return data


@pytest.mark.slow
def test_a_listed_file_is_graded_with_its_seed_and_the_others_with_a_fresh_one(tmp_path):
    ann = _hand_in(tmp_path, "ann", "good.py")
    _hand_in(tmp_path, "bob", "good.py")
    seeds = tmp_path / "seeds.json"
    seeds.write_text(json.dumps({hashlib.sha256(ann).hexdigest(): 123456789}))
    code = main(["grade-all", "--course", str(tmp_path), "--assignment", str(REPO / "tests/grader/toy"),
                 "--device", "cpu", "--no-progress", "--no-gradebook", "--seeds", str(seeds)])
    assert code == 0
    course = Course(tmp_path, toy_class.TOY)
    seed_of = {s: report_reader.read(course.report_path(s))["extra_data"]["instructor"]["seed"] for s in ("ann", "bob")}
    assert seed_of["ann"] == 123456789, "the listed file was not graded with its seed"
    assert seed_of["bob"] != 123456789, "a file not listed took another file's seed"


@pytest.mark.parametrize("content, says", [
    (None, "cannot read the seeds file"),
    ("[1, 2]", "must hold one object"),
    ("{not json", "is not JSON"),
    ('{"abc": 1}', "each key must be a file's sha256"),
    ('{"' + "a" * 64 + '": "7"}', "a non-negative integer seed"),
])
def test_a_seeds_file_that_cannot_be_used_is_one_line_before_any_grading(tmp_path, capsys, content, says):
    _hand_in(tmp_path, "ann", "good.py")
    seeds = tmp_path / "seeds.json"
    if content is not None:
        seeds.write_text(content)
    code = main(["grade-all", "--course", str(tmp_path), "--assignment", str(REPO / "tests/grader/toy"),
                 "--device", "cpu", "--no-progress", "--seeds", str(seeds)])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "autograded").exists(), "graded before refusing"
