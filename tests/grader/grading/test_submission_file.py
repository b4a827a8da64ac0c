"""What a submission is (grader/grading/submission_file.py), and `python -m grader grade` holding to it."""
import json
import os
import subprocess
import sys

import pytest

from grader.course import feedback
from grader.grading import submission_file
from grader.assignment import REPO
from grader.grading.submission_file import Accepted, Refused

REFERENCE = REPO / "reference/l1_paged_kv_write.py"
NAME = "l1_paged_kv_write.py"


def test_a_link_is_refused_without_reading_its_target(tmp_path):
    secret = tmp_path / "classmate.py"
    secret.write_text("def slot_mapping(): pass\n")
    (tmp_path / NAME).symlink_to(secret)
    got = submission_file.read(tmp_path / NAME)
    assert isinstance(got, Refused) and "symbolic link" in got.reason and got.data == b""
    # grade-all's record of the refusal names the link, not the classmate's bytes
    assert got.sha256 != Accepted("x", secret.read_bytes(), "").sha256


@pytest.mark.parametrize("kind", ["folder", "device", "pipe"])
def test_what_is_not_a_regular_file_is_refused(tmp_path, kind):
    path = tmp_path / NAME
    if kind == "folder":
        path.mkdir()
    elif kind == "device":
        path = "/dev/zero"
    else:
        os.mkfifo(path)       # opening a pipe for reading would block: it must not be opened
    got = submission_file.read(path)
    assert isinstance(got, Refused) and f"a {kind}" in got.reason


def test_a_bom_and_crlf_are_read_as_python_reads_them(tmp_path):
    path = tmp_path / NAME
    path.write_bytes(b"\xef\xbb\xbfdef f():\r\n    return 1\r\n")
    got = submission_file.read(path)
    assert isinstance(got, Accepted) and got.source == "def f():\n    return 1\n"
    assert got.data == path.read_bytes(), "the report's sha256 is of the file as handed in"


@pytest.mark.parametrize("data,why", [(b"\x7fELF\x00\x01", "binary"), (b"x = '\xff'\n", "not UTF-8")])
def test_what_is_not_utf8_source_is_refused(tmp_path, data, why):
    (tmp_path / NAME).write_bytes(data)
    got = submission_file.read(tmp_path / NAME)
    assert isinstance(got, Refused) and why in got.reason


def _folder(tmp_path, *names):
    folder = tmp_path / "hand-in"
    folder.mkdir()
    for name in names:
        (folder / name).write_text("x = 1\n")
    return folder


@pytest.mark.parametrize("names,says", [
    (["L1_Paged_KV_Write.py"], f"rename L1_Paged_KV_Write.py to {NAME}"),
    (["my_solution.py", "notes.txt"], f"rename my_solution.py to {NAME}"),
    (["a.py", "b.py"], f"no {NAME} among the files handed in (found a.py, b.py)"),
    (["notes.txt"], f"no {NAME} among the files handed in (found notes.txt)"),
])
def test_a_hand_in_without_the_exact_name_says_what_to_rename(tmp_path, names, says):
    got = submission_file.find(_folder(tmp_path, *names), NAME)
    assert isinstance(got, Refused) and says in got.reason and not got.empty


def test_the_exact_name_is_graded_beside_other_files(tmp_path):
    got = submission_file.find(_folder(tmp_path, NAME, "Notes.py", "timestamp.txt"), NAME)
    assert isinstance(got, Accepted) and got.name == NAME


def test_nothing_handed_in_is_empty(tmp_path):
    got = submission_file.find(_folder(tmp_path, "timestamp.txt"), NAME)
    assert isinstance(got, Refused) and got.empty


def test_a_folder_under_the_right_name_is_refused_as_a_folder(tmp_path):
    folder = _folder(tmp_path)
    (folder / NAME).mkdir()
    got = submission_file.find(folder, NAME)
    assert isinstance(got, Refused) and f"{NAME} is a folder" in got.reason and "found" not in got.reason


def test_a_linked_hand_in_folder_is_refused(tmp_path):
    real = _folder(tmp_path, NAME)
    (tmp_path / "link").symlink_to(real)
    assert isinstance(submission_file.find(tmp_path / "link", NAME), Refused)


def _grade(tmp_path, submission) -> dict:
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", "--submission", str(submission),
                           "--report", str(report), "--device", "cpu", "--quiet"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    return json.loads(report.read_text())


@pytest.mark.slow
def test_grade_refuses_a_link_to_the_reference(tmp_path):
    (tmp_path / NAME).symlink_to(REFERENCE)
    report = _grade(tmp_path, tmp_path / NAME)
    assert report["score"] == 0 and "symbolic link" in report["extra_data"]["problem"]
    assert report["extra_data"]["submission"]["bytes"] == 0
    text = feedback.markdown(report, "s1")
    assert "symbolic link" in text and text.count("symbolic link") == 1, "the reason is said once"


@pytest.mark.slow
def test_a_bom_and_crlf_copy_of_the_reference_gets_full_marks(tmp_path):
    data = REFERENCE.read_bytes()
    (tmp_path / NAME).write_bytes(b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n"))
    report = _grade(tmp_path, tmp_path / NAME)
    assert report["score"] == report["max_score"] > 0, report["extra_data"].get("problem")
    assert (tmp_path / NAME).read_bytes().startswith(b"\xef\xbb\xbf"), "the student's file is left as it was"
