"""The roster and per-student extensions, on SQLite and on PostgreSQL: every student with a token
or in nbgrader's gradebook is listed, with the latest check, the hand-in that counts (late or not)
or nothing yet, the same on the instructor's page, its CSV, /api/roster and `grader summary`; a
student's own deadline (`grader extend`) closes their checks, asks before their late hand-in,
opens their reports and shows on their page, while the others keep the course's."""
import csv
import datetime
import io
import os
import shutil
import subprocess
import sys

import pytest

import service_server as svc
from browser import CHROMIUM, Browser
from grader.assignment import REPO

NO_ECHO = (svc.TOY / "submissions/no_echo.py").read_bytes()
GOOD = (svc.TOY / "submissions/good.py").read_bytes()


def grader(*args, db=None):
    return subprocess.run([sys.executable, "-m", "grader", *args] + (["--db", db] if db else []), cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow          # it grades for real (the service's checks and hand-ins)
def test_roster_and_extensions(course_db, tmp_path, monkeypatch):
    from pathlib import Path
    from nbgrader.api import Gradebook
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")   # its alembic
    course, db = course_db
    assignment = tmp_path / "toy"
    shutil.copytree(svc.TOY, assignment)
    with open(assignment / "assignment.toml", "a") as f:
        f.write('\n[service]\nvisibility = "areas"\n')
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in ("pia", "rex"):
            gb.add_student(student)
    toks = svc.tokens(course, "--add", "rex", "sam", "tia", db=db)
    toks.update(svc.tokens(course, "--instructor", db=db))
    svc.tokens(course, "--revoke", "sam", db=db)
    sam = svc.tokens(course, "--add", "sam", db=db)["sam"]
    ahead = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).replace(microsecond=0)
    past = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)).replace(microsecond=0)
    for args, words in ((["tia", "--until", "tomorrow"], "--until 'tomorrow' is not an ISO-8601 time"),
                        (["nobody", "--until", past.isoformat()], "'nobody' has no token, no submission"),
                        (["../x", "--until", past.isoformat()], "is not a student id")):
        bad = grader("extend", "--course", str(course), *args, db=db)
        assert bad.returncode == 2 and words in bad.stderr and "Traceback" not in bad.stderr, (args, bad.stderr)
    out = grader("extend", "--course", str(course), "tia", "--until", past.isoformat(), db=db)
    assert out.returncode == 0 and out.stdout.strip() == f"tia: deadline {past.isoformat()} (own)", out.stderr
    server = svc.start(course, "--deadline", ahead.isoformat(), "--checks-per-hour", "5", assignment=assignment, db=db)
    try:
        # tia's own deadline has passed: her checks are closed, her hand-in asks first, her reports show all
        me = server.request("GET", "/api/me", toks["tia"]).body
        assert me["deadline"] == past.isoformat() and me["past_deadline"] is True and me["checks_left_this_hour"] is None
        closed = server.submit(toks["tia"], NO_ECHO)
        assert closed.status == 403 and past.strftime("%Y-%m-%d %H:%M:%S UTC") in closed.body["error"]
        assert server.submit(toks["tia"], NO_ECHO, kind="hand-in").status == 409
        late = server.request("POST", "/api/submissions?kind=hand-in&late=yes", toks["tia"], NO_ECHO,
                              {"Content-Type": "text/x-python"})
        assert late.status == 202 and late.body["late"] is True
        # rex keeps the course's deadline: a check, its report cut to the areas
        me = server.request("GET", "/api/me", toks["rex"]).body
        assert me["deadline"] == ahead.isoformat() and me["past_deadline"] is False and me["checks_left_this_hour"] == 5
        check = server.submit(toks["rex"], NO_ECHO).body
        sam_hand_in = server.submit(sam, GOOD, kind="hand-in").body
        assert "shows the areas only" in server.wait(toks["rex"], check["id"])["feedback"]
        assert "no function named 'echo'" in server.wait(toks["tia"], late.body["id"])["feedback"]
        server.wait(sam, sam_hand_in["id"])

        # the roster, four ways
        expect = {"pia": ("no", "yes", "nothing yet", "", ""), "rex": ("yes", "yes", "checks only", f"#{check['id']}", ""),
                  "sam": ("yes", "no", "handed in", "", f"#{sam_hand_in['id']}"),
                  "tia": ("yes", "no", "handed in late", "", f"#{late.body['id']}")}
        api = {r["student"]: r for r in server.request("GET", "/api/roster", toks["instructor"]).body}
        assert server.request("GET", "/api/roster", toks["rex"]).status == 403
        cookie = server.login(toks["instructor"])
        got = server.page("/roster.csv", cookie)
        assert got.status == 200 and got.headers["content-type"].startswith("text/csv")
        page_csv = {r["student"]: r for r in csv.DictReader(io.StringIO(got.body))}
        assert server.page("/roster.csv", server.login(toks["rex"])).status == 403
        summary = grader("summary", "--course", str(course), "--assignment", str(assignment), db=db)
        assert summary.returncode == 0, summary.stderr
        summary_csv = {r["student"]: r for r in csv.DictReader(io.StringIO((course / "summary/roster.csv").read_text()))}
        for table in (api, page_csv, summary_csv):
            assert sorted(table) == sorted(expect), table
            for student, (token, gradebook, state, check_id, hand_in_id) in expect.items():
                row = table[student]
                assert (row["token"], row["gradebook"], row["state"], row["latest_check"], row["counted_hand_in"]) == \
                    (token, gradebook, state, check_id, hand_in_id), (student, row)
            assert table["tia"]["extension"] == "yes" and table["tia"]["deadline"] == past.isoformat()
            assert table["rex"]["extension"] == "no" and table["rex"]["deadline"] == ahead.isoformat()
            assert table["tia"]["counted_late"] == "late" and table["sam"]["counted_late"] == "on time"
            assert table["rex"]["latest_check_score"] == "60/90"
        assert page_csv == summary_csv
        lines = {line.split()[0]: line for line in summary.stdout.splitlines()[2:]}
        assert "nothing yet" in lines["pia"] and "handed in late" in lines["tia"] and f"#{check['id']}" in lines["rex"]
        assert "The grading service's roster" in (course / "summary/index.html").read_text()
        home = server.page("/", cookie).body
        assert home.count("<tr class=roster-row>") == 4 and "(extension)" in home and "nothing yet" in home
        # the extension lifted: tia is back on the course's deadline, checks open again
        assert grader("extend", "--course", str(course), "tia", "--remove", db=db).returncode == 0
        assert server.request("GET", "/api/me", toks["tia"]).body["past_deadline"] is False
    finally:
        server.stop()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian package: chromium)")
def test_the_pages_show_a_students_own_deadline_and_the_roster(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    toks = svc.tokens(course, "--add", "uli", "vea")
    toks.update(svc.tokens(course, "--instructor"))
    ahead = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    later = (ahead + datetime.timedelta(days=3)).replace(microsecond=0)
    assert grader("extend", "--course", str(course), "uli", "--until", later.isoformat()).returncode == 0
    server = svc.start(course, "--deadline", ahead.isoformat())
    browser = Browser(tmp_path / "profile")
    try:
        browser.go(server.url + "/")
        browser.js(f"document.querySelector('input[name=token]').value = {toks['uli']!r}")
        browser.submit("form[action='/login']")
        assert f"Your own deadline (an extension): {later.strftime('%Y-%m-%d %H:%M:%S UTC')}" in browser.text()
        browser.submit("form[action='/logout']")
        browser.js(f"document.querySelector('input[name=token]').value = {toks['instructor']!r}")
        browser.submit("form[action='/login']")
        rows = browser.js("[...document.querySelectorAll('tr.roster-row')].map(r => r.innerText)")
        assert len(rows) == 2 and "uli" in rows[0] and "(extension)" in rows[0] and "nothing yet" in rows[1], rows
        browser.screenshot_of_docs(tmp_path / "roster.png", "GRADER_ROSTER_SCREENSHOT")      # docs/img/ is made this way
        text = browser.js("fetch('/roster.csv').then(r => r.text())")
        assert text.splitlines()[0].startswith("student,token,gradebook,deadline,extension,state")
    finally:
        browser.close()
        server.stop()
