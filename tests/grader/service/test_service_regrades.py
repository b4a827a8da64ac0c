"""Regrade requests, on SQLite and on PostgreSQL: a student asks with a sentence about the hand-in
that counts; the instructor sees the request with the command that regrades
(`grade-all --only STUDENT`, which grades that hand-in again though its report is current),
runs it, and answers; the student reads the answer. Through the API, the pages' forms, and the
pages in headless Chromium."""
import datetime
import json
import subprocess
import sys

import pytest

import service_server as svc
from browser import CHROMIUM, Browser
from grader.assignment import REPO

GOOD = (svc.TOY / "submissions/good.py").read_bytes()
NO_ECHO = (svc.TOY / "submissions/no_echo.py").read_bytes()


def ask(server, token, reason):
    body = json.dumps({"reason": reason}).encode() if reason is not None else b"not json"
    return server.request("POST", "/api/regrade-requests", token, body, {"Content-Type": "application/json"})


def grade_all(course, *args):
    return subprocess.run([sys.executable, "-m", "grader", "grade-all", "--course", str(course), "--assignment",
                           str(svc.TOY), "--device", "cpu", "--jobs", "1", "--no-gradebook", "--no-progress", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.slow          # it grades for real (grade-all --only, twice)
def test_a_regrade_is_asked_regraded_and_answered(course_db):
    course, db = course_db
    course.chmod(0o755)        # the course folder's mode is the instructor's: no grading changes it
    toks = svc.tokens(course, "--add", "wes", "xan", db=db)
    toks.update(svc.tokens(course, "--instructor", db=db))
    server = svc.start(course, "--checks-per-hour", "1", db=db)
    try:
        nothing = ask(server, toks["wes"], "please look again")
        assert nothing.status == 409 and "no hand-in to regrade" in nothing.body["error"]
        hand_in = server.submit(toks["wes"], svc.unique(NO_ECHO, "wes"), kind="hand-in").body
        for reason, status, words in (("", 400, "needs a reason"), ("   ", 400, "needs a reason"),
                                      ("x" * 2001, 413, "longer than 2000"), (None, 400, "send JSON")):
            bad = ask(server, toks["wes"], reason)
            assert bad.status == status and words in bad.body["error"], bad.body
        assert ask(server, toks["instructor"], "me too").status == 403
        asked = ask(server, toks["wes"], "echo returns its argument in my file; test 2.3 says it does not")
        assert asked.status == 201 and asked.body["status"] == "open" and asked.body["submission_id"] == hand_in["id"]
        again = ask(server, toks["wes"], "and again")
        assert again.status == 409 and f"request #{asked.body['id']}" in again.body["error"]
        assert server.request("GET", "/api/regrade-requests", toks["xan"]).body == []          # not another's
        assert [r["id"] for r in server.request("GET", "/api/regrade-requests", toks["instructor"]).body] == \
            [asked.body["id"]]
        cookie = server.login(toks["instructor"])
        home = server.page("/", cookie).body
        assert "test 2.3 says it does not" in home and "--only wes" in home and "no grade-all report yet" in home
        # the regrade: grade-all of wes alone, twice (the second though the report is current)
        for _ in range(2):
            out = grade_all(course, "--only", "wes")
            assert out.returncode == 0, out.stderr[-3000:]
            assert "1 gradings run" in out.stdout and "0 unchanged" in out.stdout, out.stdout
        report = json.loads((course / "autograded/wes/toy_add/report.json").read_text())
        assert report["score"] == 60.0
        bad = grade_all(course, "--only", "nobody")
        assert bad.returncode == 2 and "no hand-in to regrade for 'nobody'" in bad.stderr
        home = server.page("/", cookie).body
        assert "grade-all's report of this hand-in: 60.00 / 90.00" in home, home[-3000:]
        # the answer, through the page's form; a student cannot answer
        assert server.page(f"/regrades/{asked.body['id']}/answer", server.login(toks["wes"]), method="POST",
                           form={"answer": "I say so"}).status == 403
        assert server.page(f"/regrades/{asked.body['id']}/answer", cookie, method="POST", form={"answer": ""}).status == 400
        done = server.page(f"/regrades/{asked.body['id']}/answer", cookie, method="POST",
                           form={"answer": "Regraded: 60 / 90 stands; echo is missing from the file you handed in."})
        assert done.status == 303
        mine = server.request("GET", "/api/regrade-requests", toks["wes"]).body
        assert mine[0]["status"] == "answered" and mine[0]["answer"].startswith("Regraded: 60 / 90 stands")
        assert "Regraded: 60 / 90 stands" in server.page("/", server.login(toks["wes"])).body
        # answered, the student may ask again
        assert ask(server, toks["wes"], "one more look, please").status == 201
        assert server.wait(toks["wes"], hand_in["id"])["score"] == 60.0        # the service graded it too
        assert (course.stat().st_mode & 0o7777) == 0o755, oct(course.stat().st_mode)
    finally:
        server.stop()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian package: chromium)")
def test_regrade_forms_in_a_browser(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    toks = svc.tokens(course, "--add", "yui")
    toks.update(svc.tokens(course, "--instructor"))
    server = svc.start(course, "--checks-per-hour", "1",
                       "--deadline", (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).isoformat())
    browser = Browser(tmp_path / "profile")
    try:
        server.submit(toks["yui"], svc.unique(GOOD, "yui"), kind="hand-in")
        browser.go(server.url + "/")
        browser.js(f"document.querySelector('input[name=token]').value = {toks['yui']!r}")
        browser.submit("form[action='/login']")
        browser.js("document.querySelector('textarea[name=reason]').value = 'the speed test ran on a busy machine'")
        browser.submit("form[action='/regrade']")
        assert "the speed test ran on a busy machine" in browser.text() and "Not answered yet." in browser.text()
        browser.submit("form[action='/logout']")
        browser.js(f"document.querySelector('input[name=token]').value = {toks['instructor']!r}")
        browser.submit("form[action='/login']")
        assert "the speed test ran on a busy machine" in browser.text() and "--only yui" in browser.text()
        browser.js("document.querySelector('textarea[name=answer]').value = 'Regraded on a quiet machine: 90 / 90.'")
        browser.submit("form[action$='/answer']")
        assert "Answered" in browser.text() and "quiet machine" in browser.text()
        browser.submit("form[action='/logout']")
        browser.js(f"document.querySelector('input[name=token]').value = {toks['yui']!r}")
        browser.submit("form[action='/login']")
        assert "Regraded on a quiet machine: 90 / 90." in browser.text()
    finally:
        browser.close()
        server.stop()
