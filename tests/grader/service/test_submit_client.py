"""The grading service's client (grader/service/submit_client.py), through its real `main(argv)`, against
the real service: `python -m grader serve` of the toy assignment on loopback
(tests/grader/service_server.py), with tokens made by `python -m grader tokens`.

Three services, one each per module (per pytest-xdist worker), shared by the tests that need
them. Each test takes students of its own from the service's pool (`Service.student()`), so
that no test sees another's submissions or spends another's checks:

- `served` grades for real, one grading at a time, one grading per student an hour, with a
  deadline two days ahead;
- `closed` has a deadline that has passed: checks are refused, hand-ins are kept and marked late;
- `failing` is one whose every grading fails in the grader (its assignment file is removed
  once it has started), within a second or two; tests that only need the hour's grading spent
  spend it there.

What the real service never sends is answered by `BrokenServer`, a stand-in `http.server` with
canned answers, in these tests only, each about an answer that comes from something in front of
the service or from a service in trouble:

- test_a_refusal_without_a_sentence_is_still_one_sentence: a 401 or 403 with no body, a 429
  without Retry-After, a 500 page, a redirect (the service always answers with its sentence,
  its Retry-After, and never redirects the API: these are what a proxy says);
- test_a_submission_that_vanishes_while_waiting: the service never forgets what it accepted;
- test_an_answer_that_is_not_json: a 200 that is not JSON (a web page at the address);
- test_a_server_that_hangs_up: the connection closed with no answer at all;
- test_an_upload_with_no_answer_may_have_arrived: an answer slower than the client's timeout;
- test_a_short_outage_while_waiting_is_ridden_out and
  test_a_long_outage_while_waiting_says_the_submission_is_kept: a gateway's 503 and 502.
"""
from __future__ import annotations

import datetime
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path

import pytest
import sqlalchemy as sa

import service_server as svc
from grader import cli
from grader.service import submit_client
from grader.service import store as tables
from grader.service.submit_client import main

REPO = Path(__file__).resolve().parents[3]
CLIENT = REPO / "grader" / "service" / "submit_client.py"
GOOD = (svc.TOY / "submissions/good.py").read_bytes()           # 90 / 90 on the CPU
NO_ECHO = (svc.TOY / "submissions/no_echo.py").read_bytes()     # 60 / 90
PASSED = "2020-01-01T00:00:00+00:00"                            # the `closed` service's deadline
WAIT_S = 120                                                    # for any grading, on a loaded machine


# ---------------------------------------------------------------- the real service

@dataclass
class Service:
    """A running `grader serve`, its instructor's token and a pool of students' tokens."""
    server: svc.Server
    instructor: str
    pool: list[tuple[str, str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def student(self) -> tuple[str, str]:
        """(name, token) of a student no other test uses."""
        assert self.pool, "this service's pool of students is spent: make it larger"
        return self.pool.pop(0)

    def kept(self, token: str) -> list[dict]:
        """The student's submissions as the service lists them, newest first."""
        answer = self.server.request("GET", "/api/submissions", token)
        assert answer.status == 200, answer.body
        return answer.body

    def wait(self, token: str, sub_id: int) -> dict:
        return self.server.wait(token, sub_id, timeout=WAIT_S)

    def wait_until(self, what, timeout: float = WAIT_S):
        """Poll what() until it gives something true; that."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = what()
            if got:
                return got
            time.sleep(0.05)
        raise AssertionError(f"still waiting after {timeout} s:\n{self.server.log_text()[-3000:]}")

    def stored(self, sub_id: int) -> bytes:
        """The bytes the service kept for a submission, read from its database."""
        engine = sa.create_engine(tables.default_url(self.server.course))
        try:
            with engine.connect() as c:
                return c.execute(sa.select(tables.submissions.c.data)
                                 .where(tables.submissions.c.id == sub_id)).scalar_one()
        finally:
            engine.dispose()

    def filed(self, name: str) -> Path:
        """Where a hand-in is filed for grade-all."""
        return self.server.course / "submitted" / name / "toy_add" / "toy.py"

    def spend_the_hour(self, token: str) -> None:
        """The student's one grading of the hour, as a check, ended."""
        answer = self.server.submit(token, svc.unique(GOOD, "spends the hour"))
        assert answer.status == 202, answer.body
        self.wait(token, answer.body["id"])


def serve(tmp_path_factory, name: str, *args: str, students: int, assignment: Path = svc.TOY) -> Service:
    course = tmp_path_factory.mktemp(name) / "course"
    course.mkdir()
    names = [f"{name}{i:02d}" for i in range(1, students + 1)]
    tokens = svc.tokens(course, "--add", *names)
    instructor = svc.tokens(course, "--instructor")["instructor"]
    server = svc.start(course, *args, assignment=assignment)
    return Service(server, instructor, [(n, tokens[n]) for n in names])


AHEAD = datetime.timedelta(days=2, hours=3, minutes=30)     # the `served` service's deadline, from its start


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    deadline = datetime.datetime.now(datetime.timezone.utc) + AHEAD
    service = serve(tmp_path_factory, "served", "--jobs", "1", "--checks-per-hour", "1",
                    "--deadline", deadline.isoformat(), students=48)
    yield service
    service.server.stop()


@pytest.fixture(scope="module")
def closed(tmp_path_factory):
    service = serve(tmp_path_factory, "closed", "--jobs", "1", "--checks-per-hour", "2", "--deadline", PASSED,
                    students=8)
    yield service
    service.server.stop()


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    assignment = tmp_path_factory.mktemp("failing-toy") / "toy"
    shutil.copytree(svc.TOY, assignment)
    # --cold: each grading reads the assignment afresh, and finds it gone (test_service_restart does the same).
    service = serve(tmp_path_factory, "failing", "--jobs", "1", "--cold", "--checks-per-hour", "1",
                    students=8, assignment=assignment)
    (assignment / "assignment.toml").unlink()
    yield service
    service.server.stop()


# ---------------------------------------------------------------- the student's side

@pytest.fixture(autouse=True)
def student_machine(tmp_path, monkeypatch):
    """A home and a working folder of their own, no settings in the environment, quick polling."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    for name in ("GRADER_SERVER", "GRADER_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # Every state of a grading lasts a second or more: a poll in 0.05 s sees each one.
    monkeypatch.setattr(submit_client, "POLL_SECONDS", 0.05)
    return home, work


@pytest.fixture
def file(student_machine):
    path = student_machine[1] / "toy.py"
    path.write_bytes(GOOD)
    return path


def run(capsys, *argv, entry=main):
    rc = entry([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_sentence(err: str) -> str:
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def accepted_line(out: str) -> tuple[str, int]:
    """The kind and id of the client's first line, `check #12 of toy.py accepted...`."""
    found = re.match(r"(check|hand-in) #(\d+) of ", out)
    assert found, out
    return found[1], int(found[2])


# ---------------------------------------------------------------- the happy path

@pytest.mark.slow
def test_check_waits_through_the_queue_and_ends_with_the_score(served, file, capsys):
    # The service grades one at a time: with one check being graded and another queued, this
    # one is second in line, then first, then graded.
    served.wait_until(lambda: served.server.request("GET", "/api/queue", served.instructor).body == [])
    (_, first), (_, second), (name, token) = served.student(), served.student(), served.student()
    ahead = served.server.submit(first, svc.unique(GOOD, "ahead")).body["id"]
    # Until it is claimed it is queued too, in the same turn as the other two.
    served.wait_until(lambda: served.server.request("GET", f"/api/submissions/{ahead}", first).body["status"] != "queued")
    served.server.submit(second, svc.unique(GOOD, "second"))
    rc, out, err = run(capsys, "submit", file, "--server", served.url, "--token", token)
    assert rc == 0, err
    assert err == ""
    _, sub_id = accepted_line(out)
    lines = out.splitlines()
    # Each state once, in order, however many polls saw it.
    kept = served.kept(token)[0]
    assert lines[:6] == [f"check #{sub_id} of toy.py accepted",
                         f"receipt: sha256 {kept['sha256']}, {kept['size']} bytes, received {kept['submitted_at']}",
                         "queued, position 2", "queued, position 1", "grading", "done"], out
    assert f"# Feedback for {name}\n" in out and "Every graded test passed." in out
    assert lines[-1] == "score: 90 / 90"
    # The upload as sent: the file's bytes, as a check, under this student's token. Its
    # Content-Type is not a form's either: the service refuses those (urllib's default) with 415.
    assert [(s["id"], s["kind"]) for s in served.kept(token)] == [(sub_id, "check")]
    assert served.stored(sub_id) == GOOD


@pytest.mark.parametrize("score, max_score, line", [(97.5, 100.0, "score: 97.5 / 100"),
                                                     (85.0, 100.0, "score: 85 / 100"),
                                                     (0, 15, "score: 0 / 15"),
                                                     (12.25, 37.5, "score: 12.25 / 37.5"),
                                                     (None, None, "score: not graded yet")])
def test_score_line(score, max_score, line):
    # The toy gives 90 / 90 and 60 / 90 only (those are in the tests against the service); a
    # score of None is test_a_hand_in_not_graded_now_still_ends_with_a_score_line's.
    assert submit_client.format_score({"score": score, "max_score": max_score}) == line


@pytest.mark.slow
def test_a_hand_in_not_graded_now_still_ends_with_a_score_line(failing, file, capsys):
    # Over the hour's gradings a hand-in is filed, not graded: done, with no score.
    name, token = failing.student()
    failing.spend_the_hour(token)
    rc, out, err = run(capsys, "submit", file, "--hand-in", "--server", failing.url, "--token", token)
    assert rc == 0, err
    assert "it was not graded now" in out
    assert out.splitlines()[-1] == "score: not graded yet"
    assert failing.filed(name).read_bytes() == GOOD


@pytest.mark.slow
def test_late_hand_in_says_it_was_marked_late(closed, file, capsys):
    name, token = closed.student()
    # Without --late the service asks first: nothing is kept, and the client says so in its words.
    rc, out, err = run(capsys, "submit", file, "--hand-in", "--server", closed.url, "--token", token)
    assert rc == 1 and "this hand-in would be late: you have no hand-in yet" in err and "--late" in err, err
    assert closed.kept(token) == [] and not closed.filed(name).exists()
    rc, out, err = run(capsys, "submit", file, "--hand-in", "--late", "--server", closed.url, "--token", token)
    assert rc == 0, err
    _, sub_id = accepted_line(out)
    lines = out.splitlines()
    assert lines[0] == f"hand-in #{sub_id} of toy.py accepted (after the deadline: marked late)"
    assert lines[-2] == "note: this hand-in was made after the deadline and is marked late"
    assert lines[-1] == "score: 90 / 90"
    # ... and `history` marks it late too.
    rc, out, _ = run(capsys, "history", "--server", closed.url, "--token", token)
    assert rc == 0
    assert out.splitlines() == [f"#{sub_id}  hand-in  {closed.kept(token)[0]['submitted_at']}  90 / 90  late  counts"]


@pytest.mark.slow
def test_on_time_hand_in_says_nothing_of_lateness(served, file, capsys):
    name, token = served.student()
    rc, out, err = run(capsys, "submit", file, "--hand-in", "--server", served.url, "--token", token)
    assert rc == 0, err
    _, sub_id = accepted_line(out)
    assert out.splitlines()[0] == f"hand-in #{sub_id} of toy.py accepted"
    kept = served.kept(token)[0]
    assert out.splitlines()[1] == (f"receipt: sha256 {kept['sha256']}, {len(GOOD)} bytes, received "
                                   f"{kept['submitted_at']}")
    assert "marked late" not in out and "after the deadline" not in out
    assert out.splitlines()[-1] == "score: 90 / 90"
    assert [s["kind"] for s in served.kept(token)] == ["hand-in"]
    assert served.filed(name).read_bytes() == GOOD


def test_regrade_is_asked_and_its_answer_listed(served, capsys):
    _, token = served.student()
    rc, out, err = run(capsys, "regrade", "please", "--server", served.url, "--token", token)
    assert rc == 1 and "no hand-in to regrade" in one_sentence(err)
    hand_in = served.server.submit(token, GOOD, kind="hand-in").body["id"]
    rc, out, err = run(capsys, "regrade", "the", "echo", "test", "is", "wrong", "--server", served.url, "--token", token)
    assert rc == 0, err
    req = served.server.request("GET", "/api/regrade-requests", token).body[0]
    assert out == f"regrade request #{req['id']} about hand-in #{hand_in} sent; its answer will show in `regrade`\n"
    assert req["reason"] == "the echo test is wrong"
    answered = served.server.request("POST", f"/api/regrade-requests/{req['id']}/answer", served.instructor,
                                     json.dumps({"answer": "It is right: see test 2.1."}).encode(),
                                     {"Content-Type": "application/json"})
    assert answered.status == 200, answered.body
    rc, out, err = run(capsys, "regrade", "--server", served.url, "--token", token)
    assert rc == 0 and out.splitlines() == [
        f"#{req['id']}  hand-in #{hand_in}  {req['asked_at_local']}  answered: the echo test is wrong",
        "    answer: It is right: see test 2.1."], out


def test_download_gives_back_exactly_what_was_filed(served, capsys, tmp_path):
    _, token = served.student()
    data = svc.unique(NO_ECHO, "download me")
    sub_id = served.server.submit(token, data).body["id"]
    rc, out, err = run(capsys, "download", sub_id, "-o", tmp_path / "back.py", "--server", served.url, "--token", token)
    assert rc == 0, err
    assert (tmp_path / "back.py").read_bytes() == data and f"{len(data)} bytes" in err and out == ""
    rc, out, err = run(capsys, "download", sub_id, "--server", served.url, "--token", served.student()[1])
    assert rc == 1 and "no such submission" in err and out == ""


@pytest.mark.slow
def test_report_is_the_servers_final_answer(served, file, capsys, tmp_path):
    _, token = served.student()
    out_file = tmp_path / "report.json"
    rc, out, err = run(capsys, "submit", file, "--report", out_file, "--server", served.url, "--token", token)
    assert rc == 0, err
    _, sub_id = accepted_line(out)
    # The service's answer now, byte for byte: a finished report no longer changes.
    request = urllib.request.Request(f"{served.url}/api/submissions/{sub_id}",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        final = answer.read()
    assert out_file.read_bytes() == final
    assert json.loads(final)["status"] == "done"


def test_report_into_a_missing_folder_is_refused_before_sending(served, file, capsys, tmp_path):
    _, token = served.student()
    rc, _, err = run(capsys, "submit", file, "--report", tmp_path / "nowhere" / "r.json",
                     "--server", served.url, "--token", token)
    assert rc == 2
    assert "does not exist" in one_sentence(err)
    assert served.kept(token) == []


# ---------------------------------------------------------------- settings

def test_settings_flag_over_env_over_local_dotfile_over_home_dotfile(served, capsys, student_machine,
                                                                     monkeypatch):
    home, work = student_machine
    (home_name, home_token), (local_name, local_token), (env_name, env_token), (flag_name, flag_token) = \
        [served.student() for _ in range(4)]

    def signed_in_as(*flags):
        rc, out, err = run(capsys, "status", *flags)
        assert rc == 0, err
        return out.splitlines()[0].removeprefix("signed in as: ").removesuffix(" (student)")

    (home / ".grader").write_text(f"# from the instructor\nserver = {served.url}\ntoken = {home_token}\n")
    assert signed_in_as() == home_name
    (work / ".grader").write_text(f"token = '{local_token}'\n")     # the server still comes from home
    assert signed_in_as() == local_name
    monkeypatch.setenv("GRADER_TOKEN", env_token)
    assert signed_in_as() == env_name
    assert signed_in_as("--token", flag_token) == flag_name


def test_server_from_the_environment_beats_a_stale_dotfile(served, capsys, student_machine, monkeypatch):
    name, token = served.student()
    (student_machine[0] / ".grader").write_text(f"server = http://127.0.0.1:9\ntoken = {token}\n")
    # The service answers //api/me with its 404 page: an answer shows the slash made no //api.
    monkeypatch.setenv("GRADER_SERVER", served.url + "/")
    rc, out, err = run(capsys, "status")
    assert rc == 0, err
    assert out.splitlines()[0] == f"signed in as: {name} (student)"


@pytest.mark.parametrize("missing, present", [("server", "token"), ("token", "server")])
def test_a_missing_setting_says_where_to_put_it(served, file, capsys, student_machine, missing, present):
    _, token = served.student()
    (student_machine[0] / ".grader").write_text(f"{present} = {served.url if present == 'server' else token}\n")
    rc, _, err = run(capsys, "submit", file)
    assert rc == 2
    sentence = one_sentence(err)
    assert f"no {missing} given" in sentence
    assert f"--{missing}" in sentence and f"GRADER_{missing.upper()}" in sentence and ".grader" in sentence
    assert served.kept(token) == []


def test_a_misspelt_dotfile_key_is_named_with_its_line(file, capsys, student_machine):
    (student_machine[1] / ".grader").write_text("server = http://127.0.0.1:9\ntokn = abc\n")
    rc, _, err = run(capsys, "submit", file)
    assert rc == 2
    assert ".grader line 2" in one_sentence(err) and "tokn" in err


def test_a_server_without_a_scheme_is_refused(file, capsys):
    rc, _, err = run(capsys, "submit", file, "--server", "grader.example.edu:8000", "--token", "t")
    assert rc == 2
    assert "http://" in one_sentence(err)


@pytest.mark.parametrize("token", ["\u201cabc\u201d", "abc def"])
def test_a_mangled_token_is_refused_locally(served, file, capsys, student_machine, token):
    # Sent, the service would refuse it with 401 (exit status 1), or urllib fail on the quotes.
    (student_machine[1] / ".grader").write_text(f"server = {served.url}\ntoken = {token}\n", encoding="utf-8")
    rc, _, err = run(capsys, "submit", file)
    assert rc == 2
    assert "copy it again" in one_sentence(err)


# ---------------------------------------------------------------- the file, refused before sending

@pytest.mark.parametrize("case, expect", [
    ("missing", "no file at"),
    ("folder", "is a folder"),
    ("oversize", "is 1,048,577 bytes; the service takes files up to 1 MiB (1,048,576 bytes)"),
    ("empty", "is empty"),
    ("latin-1", "not UTF-8 text"),
])
def test_a_bad_file_is_refused_locally(served, capsys, student_machine, case, expect):
    _, token = served.student()
    path = student_machine[1] / "toy.py"
    if case == "folder":
        path.mkdir()
    elif case == "oversize":
        path.write_bytes(b"#" * (1024 * 1024) + b"\n")
    elif case == "empty":
        path.write_bytes(b"\n  \n")
    elif case == "latin-1":
        path.write_bytes("# café\n".encode("latin-1"))
    rc, _, err = run(capsys, "submit", path, "--server", served.url, "--token", token)
    assert rc == 2
    assert expect in one_sentence(err)
    assert served.kept(token) == []


@pytest.mark.slow
def test_exactly_one_mib_is_sent(served, capsys, student_machine):
    _, token = served.student()
    path = student_machine[1] / "big.py"
    path.write_bytes(b"#" * (1024 * 1024 - 1) + b"\n")
    rc, out, err = run(capsys, "submit", path, "--server", served.url, "--token", token)
    assert rc == 0, err
    assert len(served.stored(accepted_line(out)[1])) == 1024 * 1024


def test_an_unreadable_file_is_refused(served, capsys, student_machine):
    _, token = served.student()
    # A link to nothing: unreadable for root too, which a chmod is not.
    link = student_machine[1] / "toy.py"
    link.symlink_to(student_machine[1] / "moved_away.py")
    rc, _, err = run(capsys, "submit", link, "--server", served.url, "--token", token)
    assert rc == 2
    assert "cannot read" in one_sentence(err)
    assert served.kept(token) == []


# ---------------------------------------------------------------- what the service refuses, in its words

def refused(capsys, service: Service, *argv) -> tuple[int, str]:
    """Exit status and the one sentence of a refused `submit`, which printed nothing else."""
    rc, out, err = run(capsys, "submit", *argv, "--server", service.url)
    assert out == ""
    return rc, one_sentence(err)


def test_an_unknown_token_is_refused_in_the_services_words(served, file, capsys):
    rc, err = refused(capsys, served, file, "--token", "not-a-token-of-this-course")
    assert rc == 1
    assert "does not accept this token: this token is not known here: check that you copied it whole" in err


def test_a_revoked_token_is_refused_in_the_services_words(served, file, capsys):
    name, token = served.student()
    svc.tokens(served.server.course, "--revoke", name)
    rc, err = refused(capsys, served, file, "--token", token)
    assert rc == 1
    assert "refused: this token was revoked: ask your instructor for a new one" in err


def test_a_check_after_the_deadline_is_refused_in_the_services_words(closed, file, capsys):
    _, token = closed.student()
    rc, err = refused(capsys, closed, file, "--token", token)
    assert rc == 1
    assert "refused: the deadline (2020-01-01 00:00:00 UTC) has passed: checks are closed" in err
    assert "A hand-in is still accepted, marked late, once you confirm it (--late)\n" in err
    assert closed.kept(token) == []


def test_an_upload_the_service_finds_too_large(served, capsys, student_machine, monkeypatch):
    # A client that believes the limit higher than it is: the service's own refusal reaches the student.
    monkeypatch.setattr(submit_client, "MAX_BYTES", 2 * 1024 * 1024)
    _, token = served.student()
    path = student_machine[1] / "toy.py"
    path.write_bytes(b"#" * (1024 * 1024) + b"\n")
    rc, err = refused(capsys, served, path, "--token", token)
    assert rc == 1
    assert "error: the upload is larger than 1 MiB, which no kernel file needs" in err
    assert served.kept(token) == []


def test_a_file_the_service_finds_binary(served, capsys, student_machine):
    # UTF-8, so the client sends it; a NUL byte makes it no Python source for the service.
    _, token = served.student()
    path = student_machine[1] / "toy.py"
    path.write_bytes(GOOD + b"\0\n")
    rc, err = refused(capsys, served, path, "--token", token)
    assert rc == 1
    assert "error: the submission is not a Python source file (it contains binary data)" in err
    assert served.kept(token) == []


@pytest.mark.slow
def test_over_the_hourly_quota_exits_3_and_says_when(failing, file, capsys):
    _, token = failing.student()
    failing.spend_the_hour(token)
    rc, err = refused(capsys, failing, file, "--token", token)
    assert rc == 3
    assert "error: you have used all 1 checks of this hour; the next one can be sent at " in err
    wait = re.search(r"\(retry after (\d+) s\)\n$", err)          # from Retry-After
    assert wait and 3500 < int(wait[1]) <= 3600, err
    assert len(failing.kept(token)) == 1


@pytest.mark.slow
def test_a_grading_that_failed_in_the_grader(failing, file, capsys, tmp_path):
    _, token = failing.student()
    report = tmp_path / "r.json"
    rc, out, err = run(capsys, "submit", file, "--report", report, "--server", failing.url, "--token", token)
    assert rc == 1
    _, sub_id = accepted_line(out)
    # The service's sentence says whose failure it was; the client adds no second one.
    assert one_sentence(err).startswith(f"error: the grading of check #{sub_id} failed: the grader failed on "
                                        "this submission twice, not because of your code; your instructor")
    assert "not in your code" not in err
    assert "score:" not in out
    assert json.loads(report.read_text())["status"] == "error"


def test_a_grader_failure_without_a_reason_says_whose_it_was():
    # The service always gives its sentence; an answer without one still names the grader.
    failure = submit_client.grader_failed({"id": 7, "kind": "check", "status": "error", "error": None})
    assert str(failure) == ("the grading of check #7 failed in the grader, not in your code; "
                            "your instructor sees it too")


# ---------------------------------------------------------------- no answer at all

def test_nothing_listening(file, capsys):
    rc, _, err = run(capsys, "submit", file, "--server", f"http://127.0.0.1:{svc.free_port()}", "--token", "t")
    assert rc == 1
    assert "could not reach the grading service" in one_sentence(err) and "nothing is listening" in err


def test_an_unknown_host_name(file, capsys, monkeypatch):
    # The machine running the tests may have no resolver at all; the failure is injected where
    # the standard library would meet it.
    def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    rc, _, err = run(capsys, "submit", file, "--server", "https://grader.nowhere.invalid", "--token", "t")
    assert rc == 1
    assert "'grader.nowhere.invalid' is not known" in one_sentence(err)


@pytest.mark.slow
def test_gives_up_waiting_after_the_timeout_and_history_shows_the_report_later(served, file, capsys):
    name, token = served.student()
    started = time.monotonic()
    rc, out, err = run(capsys, "submit", file, "--timeout", "0.3", "--server", served.url, "--token", token)
    assert time.monotonic() - started < 5
    assert rc == 4
    _, sub_id = accepted_line(out)
    # A grading takes seconds: after 0.3 s it waits or runs.
    assert re.search(rf"gave up waiting after 0\.3 s; check #{sub_id} is still (queued, position \d+|grading): "
                     rf"see it later with `history {sub_id}`\n$", one_sentence(err)), err
    assert "score:" not in out
    served.wait(token, sub_id)
    rc, out, err = run(capsys, "history", sub_id, "--server", served.url, "--token", token)
    assert rc == 0, err
    assert out.startswith(f"check #{sub_id}: done\n# Feedback for {name}\n")
    assert out.splitlines()[-1] == "score: 90 / 90"


# ---------------------------------------------------------------- status and history

def test_status_after_the_deadline(closed, capsys):
    name, token = closed.student()
    rc, out, err = run(capsys, "status", "--server", closed.url, "--token", token)
    assert rc == 0, err
    assert out.splitlines() == [f"signed in as: {name} (student)", "assignment: toy_add",
                                "checks: closed (the deadline has passed; a hand-in needs --late)",
                                f"deadline: {PASSED} (passed)"]


def in_words(deadline: str) -> str:
    """What is left until `deadline`, as the client says it."""
    left = int((datetime.datetime.fromisoformat(deadline) - datetime.datetime.now(datetime.timezone.utc))
               .total_seconds())
    return f"(in {left // 86400} d {left % 86400 // 3600} h {left % 3600 // 60} min)"


def test_status_of_the_instructor_with_a_deadline_ahead(served, capsys):
    deadline = served.server.request("GET", "/api/me", served.instructor).body["deadline"]
    before = in_words(deadline)
    rc, out, err = run(capsys, "status", "--server", served.url, "--token", served.instructor)
    after = in_words(deadline)          # a minute may turn while it runs
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[:3] == ["signed in as: (no student) (instructor)", "assignment: toy_add",
                         "checks left this hour: no limit"]
    assert lines[3] in (f"deadline: {deadline} {before}", f"deadline: {deadline} {after}")
    assert lines[3].startswith(f"deadline: {deadline} (in 2 d ")


@pytest.mark.slow
def test_history_lists_newest_first_as_the_server_gave(served, capsys):
    _, token = served.student()
    check = served.server.submit(token, NO_ECHO).body["id"]
    served.wait(token, check)
    hand_in = served.server.submit(token, GOOD, kind="hand-in").body["id"]   # over the hour's one grading: filed
    rc, out, err = run(capsys, "history", "--server", served.url, "--token", token)
    assert rc == 0, err
    when = {s["id"]: s["submitted_at"] for s in served.kept(token)}
    assert out.splitlines() == [f"#{hand_in}  hand-in  {when[hand_in]}  not graded yet  counts",
                                f"#{check}  check    {when[check]}  60 / 90"]


@pytest.mark.slow
def test_history_of_an_instructor_names_the_students(failing, capsys):
    ours = [failing.student() for _ in range(2)]
    for _, token in ours:
        failing.wait(token, failing.server.submit(token, GOOD).body["id"])
    rc, out, err = run(capsys, "history", "--server", failing.url, "--token", failing.instructor)
    assert rc == 0, err
    listing = failing.kept(failing.instructor)
    lines = out.splitlines()
    assert len(lines) == len(listing)
    for line, item in zip(lines, listing):
        assert line.startswith(f"#{item['id']}  ") and line.endswith(f"  {item['student']}"), (line, item)
    assert {name for name, _ in ours} <= {item["student"] for item in listing}


def test_empty_history(served, capsys):
    _, token = served.student()
    rc, out, _ = run(capsys, "history", "--server", served.url, "--token", token)
    assert rc == 0 and out == "no submissions yet\n"


# ---------------------------------------------------------------- the progress line on a terminal

class Terminal(StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_rewrites_one_line():
    screen = Terminal()
    progress = submit_client.Progress(screen)
    for text in ("queued, position 2", "queued, position 2", "queued, position 1", "grading", "done"):
        progress.show(text)
    progress.end()
    assert screen.getvalue() == ("\rqueued, position 2\rqueued, position 1"
                                 "\rgrading           \rdone   \n")


# ---------------------------------------------------------------- the same client elsewhere

@pytest.mark.slow
def test_the_projects_cli_runs_the_same_client(served, file, capsys):
    _, token = served.student()
    rc, out, err = run(capsys, "submit", file, "--server", served.url, "--token", token, entry=cli.main)
    assert rc == 0, err
    assert out.splitlines()[-1] == "score: 90 / 90"
    rc, out, _ = run(capsys, "submit-status", "--server", served.url, "--token", token, entry=cli.main)
    assert rc == 0 and "checks left this hour: 0" in out
    rc, _, err = run(capsys, "submit", "nothing.py", "--server", served.url, "--token", token, entry=cli.main)
    assert rc == 2 and "no file at nothing.py" in one_sentence(err)


def test_the_script_needs_only_the_standard_library(served, tmp_path):
    # -S: no site-packages, -I: nothing of the project on the path; what a student's bare Python has.
    _, token = served.student()
    proc = subprocess.run([sys.executable, "-I", "-S", str(CLIENT), "status", "--server", served.url,
                           "--token", token], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "checks left this hour: 1" in proc.stdout


def load_make_release():
    spec = importlib.util.spec_from_file_location("tool_make_release", REPO / "tools" / "make_release.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("make") or not shutil.which("python3"), reason="needs make and python3")
@pytest.mark.parametrize("target, kind", [("submit", "hand-in"), ("check", "check")])
def test_a_new_student_runs_make_in_the_release_bundle(served, tmp_path, target, kind):
    """The bundle as a student unpacks it: the token the instructor gave in .grader, then
    `make submit` / `make check` with the system's python3. The course behind it is the toy one,
    whose gradings take seconds (the service files any upload as its own toy.py);
    test_service_client.py runs the L1 bundle against an L1 service."""
    name, token = served.student()
    bundle = load_make_release().build(REPO / "assignment" / "l1_paged_kv_write", tmp_path / "release")
    (bundle / ".grader").write_text(f"server = {served.url}\ntoken = {token}\n")
    (bundle / "l1_paged_kv_write.py").write_bytes(GOOD)       # the student's finished file, for the toy
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADER_", "PYTHON", "MAKE"))}
    env["HOME"] = str(tmp_path)
    proc = subprocess.run(["make", "-s", target], cwd=bundle, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, sub_id = accepted_line(proc.stdout)
    assert proc.stdout.startswith(f"{kind} #{sub_id} of l1_paged_kv_write.py accepted\n")
    assert f"# Feedback for {name}\n" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "score: 90 / 90"
    assert [(s["id"], s["kind"]) for s in served.kept(token)] == [(sub_id, kind)]
    assert served.stored(sub_id) == GOOD
    if kind == "hand-in":
        assert served.filed(name).read_bytes() == GOOD


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("make") or not shutil.which("python3"), reason="needs make and python3")
def test_make_submit_after_the_deadline_asks_for_late(closed, tmp_path):
    """After the deadline `make submit` is answered with the sentence that asks for the student's
    confirmation, and `make submit LATE=1` hands in, marked late."""
    name, token = closed.student()
    bundle = load_make_release().build(REPO / "assignment" / "l1_paged_kv_write", tmp_path / "release")
    (bundle / ".grader").write_text(f"server = {closed.url}\ntoken = {token}\n")
    (bundle / "l1_paged_kv_write.py").write_bytes(GOOD)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADER_", "PYTHON", "MAKE"))}
    env["HOME"] = str(tmp_path)
    asked = subprocess.run(["make", "-s", "submit"], cwd=bundle, env=env, capture_output=True, text=True, timeout=240)
    assert asked.returncode != 0 and "would be late" in asked.stderr and "make submit LATE=1" in asked.stderr, asked
    assert closed.kept(token) == []
    late = subprocess.run(["make", "-s", "submit", "LATE=1"], cwd=bundle, env=env, capture_output=True, text=True,
                          timeout=240)
    assert late.returncode == 0, late.stdout + late.stderr
    assert "accepted (after the deadline: marked late)" in late.stdout.splitlines()[0]
    assert late.stdout.splitlines()[1].startswith("receipt: sha256 ")
    assert closed.filed(name).read_bytes() == GOOD


# ---------------------------------------------------------------- what only a stand-in says

def submission(id=7, status="queued", **fields):
    base = {"id": id, "student": "alice", "kind": "check", "status": status,
            "position": None, "late": False, "submitted_at": "2026-03-01T10:00:00+00:00",
            "finished_at": None, "score": None, "max_score": None, "feedback": None, "error": None}
    return {**base, **fields}


def done(id=7):
    return submission(id, "done", score=85.0, max_score=100.0, feedback="## Write\n- 85 / 100: all cases right\n",
                      finished_at="2026-03-01T10:01:00+00:00")


def accepted(id=7):
    return {"id": id, "kind": "check", "status": "queued", "position": 2, "late": False}


HOLD = object()          # BrokenServer: answer only once the test is over


class BrokenServer:
    """Stand-in for what the real service never sends (the module docstring lists its tests): a
    loopback `http.server` that answers each route with canned answers given in turn, the last
    repeated, and records each request. An answer is (status, body, headers), body a JSON value or
    raw bytes, optionally preceded by HOLD: (HOLD, status, body, headers) answers only once the
    test has ended; a status of None closes the connection with no answer."""

    def __init__(self):
        self.routes: dict[tuple[str, str], list] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.released = threading.Event()       # set by close(): a held answer goes out then
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                stand_in._handle(self)

            def do_POST(self):
                stand_in._handle(self)

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass        # a client that timed out on purpose closes its end; that is the test

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def answer(self, method: str, path: str, *answers) -> None:
        self.routes[(method, path)] = list(answers)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        if length:
            handler.rfile.read(length)
        route = handler.path.split("?")[0]
        with self.lock:
            self.requests.append((handler.command, handler.path))
            queue = self.routes.get((handler.command, route))
            if not queue:
                reply = (404, {"error": f"no canned answer for {handler.command} {route}"}, {})
            else:
                reply = queue.pop(0) if len(queue) > 1 else queue[0]
        if reply[0] is HOLD:
            self.released.wait(timeout=60)
            reply = reply[1:]
        status, payload, headers = reply
        if status is None:          # hang up without a word, as a crashing server does
            handler.close_connection = True
            return
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/octet-stream" if isinstance(payload, bytes)
                            else "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def broken():
    stand_in = BrokenServer()
    yield stand_in
    stand_in.close()


@pytest.mark.parametrize("status, body, headers, code, expect", [
    (401, b"", {}, 1, "does not accept this token: check the token your instructor gave you"),
    (403, b"", {}, 1, "refused (HTTP 403): this token has been revoked or may not do this"),
    (429, {"error": "Over the hourly quota.", "retry_after_seconds": 60}, {}, 3, "(retry after 60 s)"),
    (500, b"<html>Internal Server Error</html>", {}, 1, "HTTP 500"),
    (302, b"", {"Location": "https://grader.example.edu/api/submissions"}, 1,
     "redirects to https://grader.example.edu/api/submissions"),
])
def test_a_refusal_without_a_sentence_is_still_one_sentence(broken, file, capsys, status, body, headers, code,
                                                            expect):
    broken.answer("POST", "/api/submissions", (status, body, headers))
    rc, out, err = run(capsys, "submit", file, "--server", broken.url, "--token", "t")
    assert rc == code
    assert expect in one_sentence(err)
    assert out == ""
    assert len(broken.requests) == 1            # no retry of an upload, no redirect followed


def test_a_submission_that_vanishes_while_waiting(broken, file, capsys):
    broken.answer("POST", "/api/submissions", (202, accepted(), {}))
    broken.answer("GET", "/api/submissions/7", (404, {"error": "No submission 7."}, {}))
    rc, _, err = run(capsys, "submit", file, "--server", broken.url, "--token", "t")
    assert rc == 1
    assert "No submission 7" in one_sentence(err)


def test_an_answer_that_is_not_json(broken, file, capsys):
    broken.answer("POST", "/api/submissions", (200, b"<html>welcome</html>", {}))
    rc, _, err = run(capsys, "submit", file, "--server", broken.url, "--token", "t")
    assert rc == 1
    assert "not JSON" in one_sentence(err)


def test_a_server_that_hangs_up(broken, file, capsys):
    broken.answer("POST", "/api/submissions", (None, b"", {}))
    rc, _, err = run(capsys, "submit", file, "--server", broken.url, "--token", "t")
    assert rc == 1
    assert "closed the connection without answering" in one_sentence(err)
    assert "may or may not have been accepted" in err      # it went out whole: it may be stored


def test_an_upload_with_no_answer_may_have_arrived(broken, file, capsys, monkeypatch):
    monkeypatch.setattr(submit_client, "REQUEST_TIMEOUT", 0.3)
    broken.answer("POST", "/api/submissions", (HOLD, 202, accepted(), {}))
    rc, _, err = run(capsys, "submit", file, "--server", broken.url, "--token", "t")
    assert rc == 1
    assert "no answer within 0.3 s" in one_sentence(err)
    assert "may or may not have been accepted: run `history`" in err


def test_a_short_outage_while_waiting_is_ridden_out(broken, file, capsys):
    broken.answer("POST", "/api/submissions", (202, accepted(), {}))
    broken.answer("GET", "/api/submissions/7", (200, submission(status="grading"), {}),
                  (503, b"Service Unavailable", {}), (503, b"Service Unavailable", {}), (200, done(), {}))
    rc, out, err = run(capsys, "submit", file, "--server", broken.url, "--token", "t")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines.count("grading (lost contact with the server; still trying)") == 1
    assert lines[-1] == "score: 85 / 100"


def test_a_long_outage_while_waiting_says_the_submission_is_kept(broken, file, capsys, monkeypatch):
    monkeypatch.setattr(submit_client, "OUTAGE_SECONDS", 0.2)
    broken.answer("POST", "/api/submissions", (202, accepted(), {}))
    broken.answer("GET", "/api/submissions/7", (200, submission(status="grading"), {}), (502, b"", {}))
    rc, _, err = run(capsys, "submit", file, "--server", broken.url, "--token", "t")
    assert rc == 1
    assert "HTTP 502" in one_sentence(err) and "check #7 was accepted and is kept" in err
