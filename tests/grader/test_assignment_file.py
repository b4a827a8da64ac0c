"""assignment.toml as Assignment.load reads it: every key known, paths from the file's own folder,
and the one assignment found when --assignment is not given."""
import re

import pytest

from grader import assignment as assignment_mod
from grader.assignment import REPO, Assignment, AssignmentError

TOY = REPO / "tests/grader/toy"
MINIMAL = '''[assignment]
id = "a"
submission = "a.py"
functions = ["f"]
reference = "ref/a.py"
hidden_tests = "suite"
{assignment}
[rubric.one]
points = 1
{area}
{rest}'''


def write(folder, assignment="", area="", rest=""):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "assignment.toml"
    path.write_text(MINIMAL.format(assignment=assignment, area=area, rest=rest))
    return path


def test_paths_are_read_from_the_files_own_folder(tmp_path):
    write(tmp_path / "course" / "a", 'template = "../../tpl/a.py"\npublic_tests = "pub"\ncorpus = "corpus"\n'
          'protect = ["../secrets"]\n')
    a = Assignment.load(tmp_path / "course" / "a")
    assert a.reference == tmp_path / "course" / "a" / "ref" / "a.py"
    assert a.hidden_tests == tmp_path / "course" / "a" / "suite"
    assert a.template == tmp_path / "tpl" / "a.py"
    assert (a.public_tests, a.corpus) == (tmp_path / "course/a/pub", tmp_path / "course/a/corpus")
    assert a.protected_paths()[-2:] == [tmp_path / "course/a/corpus", tmp_path / "course/secrets"]


def test_optional_paths_are_none_when_not_given(tmp_path):
    write(tmp_path)
    a = Assignment.load(tmp_path)
    assert (a.template, a.public_tests, a.corpus) == (None, None, None)


def test_the_l1_paths_point_where_they_did_from_the_repository_root():
    a = Assignment.load(REPO / "assignment/l1_paged_kv_write")
    assert a.reference == REPO / "reference/l1_paged_kv_write.py" and a.reference.is_file()
    assert a.hidden_tests == REPO / "tests/hidden/l1_paged_kv_write" and a.hidden_tests.is_dir()
    assert a.template.is_file() and a.public_tests.is_dir() and a.corpus.is_dir()
    assert a.corpus in a.protected_paths()


@pytest.mark.parametrize("where, text, says", [
    ("assignment", 'gpu_memory = 40', "unknown key [assignment] 'gpu_memory'"),
    ("area", 'pionts = 3', "unknown key [rubric.one] 'pionts'"),
    ("rest", '[slurm]\npartition = "gpu"', "unknown key 'slurm'"),
    ("rest", '[leaderboard]\nenabled = false\ncolour = "red"', "unknown key [leaderboard] 'colour'"),
    ("rest", '[leaderboard]\nenabled = true\ncolumns = [{ name = "x", test = "t", figure = "f", sort = "asc" }]',
     "unknown key [leaderboard] column 1: 'sort'"),
    ("rest", '[rubric]\ntwo = 3', "[rubric.two] must be a table"),
])
def test_an_unknown_key_is_an_error_naming_it_and_the_file(tmp_path, where, text, says):
    path = write(tmp_path, **{where: text})
    with pytest.raises(AssignmentError, match=re.escape(says)) as exc:
        Assignment.load(tmp_path)
    assert str(path) in str(exc.value)


def test_a_disabled_leaderboard_is_still_checked(tmp_path):
    write(tmp_path, rest='[leaderboard]\nenabled = false\ncolumns = [{ name = "x", test = "t", figure = "f", by = 1 }]')
    with pytest.raises(AssignmentError, match="'by'"):
        Assignment.load(tmp_path)


def test_a_call_timeout_is_one_for_every_device_or_one_per_device(tmp_path):
    write(tmp_path, "call_timeout_s = 45")
    a = Assignment.load(tmp_path)
    assert (a.call_timeout_on("cpu"), a.call_timeout_on("cuda")) == (45.0, 45.0)
    write(tmp_path, "call_timeout_s = { cpu = 30, cuda = 60 }")
    a = Assignment.load(tmp_path)
    assert (a.call_timeout_on("cpu"), a.call_timeout_on("cuda")) == (30.0, 60.0)
    l1 = Assignment.load(REPO / "assignment/l1_paged_kv_write")
    assert l1.call_timeout_on("cpu") < l1.call_timeout_on("cuda")


@pytest.mark.parametrize("value", ["{ cpu = 30 }", "{ cpu = 30, cuda = 60, tpu = 9 }", "{ cpu = 0, cuda = 60 }",
                                   '"60"', "true"])
def test_a_call_timeout_missing_a_device_or_not_seconds_is_refused(tmp_path, value):
    write(tmp_path, f"call_timeout_s = {value}")
    with pytest.raises(AssignmentError, match=r"call_timeout_s must be positive seconds, or a table of them for every"):
        Assignment.load(tmp_path)


def test_a_missing_key_is_still_named(tmp_path):
    path = write(tmp_path)
    path.write_text(path.read_text().replace('hidden_tests = "suite"\n', ""))
    with pytest.raises(AssignmentError, match="missing key 'hidden_tests'"):
        Assignment.load(tmp_path)


def test_find_takes_the_folder_given():
    assert Assignment.find(TOY).id == "toy_add"


def test_find_takes_the_only_assignment_there_is(tmp_path, monkeypatch):
    write(tmp_path / "only")
    monkeypatch.setattr(assignment_mod, "ASSIGNMENTS", tmp_path)
    assert Assignment.find().folder == tmp_path / "only"


@pytest.mark.parametrize("folders, says", [((), r"0 assignments .*\(none\)"), (("l1", "l2"), "2 assignments")])
def test_find_without_a_folder_says_which_to_pick(tmp_path, monkeypatch, folders, says):
    for name in folders:
        write(tmp_path / name)
    (tmp_path / "notes").mkdir()            # a folder without assignment.toml is no assignment
    monkeypatch.setattr(assignment_mod, "ASSIGNMENTS", tmp_path)
    monkeypatch.setattr(assignment_mod, "REPO", tmp_path)
    with pytest.raises(AssignmentError, match=says) as exc:
        Assignment.find()
    assert "give --assignment" in str(exc.value)
    for name in folders:
        assert name in str(exc.value)
