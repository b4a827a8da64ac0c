"""Hand-ins are kept, never overwritten, on SQLite and on PostgreSQL: each with its receipt
(sha256, size, time) and its bytes to download; the newest counts (the copy in submitted/ with its
own timestamp.txt) unless the instructor chose another (`grader hand-ins --activate`, the page);
after the deadline a hand-in needs an explicit --late, and is refused with a sentence naming the
hand-in it would replace without it. Messages then say nothing of checks, and times are in the
course's zone."""
import datetime
import hashlib
import shutil
import subprocess
import sys

import pytest

import service_server as svc
from browser import CHROMIUM, Browser
from grader.assignment import REPO

GOOD = (svc.TOY / "submissions/good.py").read_bytes()
NO_ECHO = (svc.TOY / "submissions/no_echo.py").read_bytes()


def hand_ins(course, *args, db=None):
    cmd = [sys.executable, "-m", "grader", "hand-ins", "--course", str(course), "--assignment", str(svc.TOY), *args]
    return subprocess.run(cmd + (["--db", db] if db else []), cwd=REPO, capture_output=True, text=True, timeout=60)


def folder_state(course):
    from nbgrader.utils import parse_utc
    folder = course / "submitted/ivy/toy_add"
    assert sorted(p.name for p in folder.iterdir()) == ["timestamp.txt", "toy.py"]
    assert sorted(p.name for p in folder.parent.iterdir()) == ["toy_add"]      # nothing left from a swap
    stamp = parse_utc((folder / "timestamp.txt").read_text().strip()).replace(tzinfo=datetime.timezone.utc)
    return (folder / "toy.py").read_bytes(), stamp.isoformat(timespec="seconds")


def utc(answer_body) -> str:
    return datetime.datetime.fromisoformat(answer_body["submitted_at"]).isoformat(timespec="seconds")


@pytest.mark.slow          # it grades for real (the service's checks and hand-ins)
def test_hand_ins_are_kept_one_counts_and_a_late_one_asks_first(course_db):
    course, db = course_db
    toks = svc.tokens(course, "--add", "ivy", "jon", db=db)
    none_yet = hand_ins(course, "--list", db=db)
    assert none_yet.returncode == 0 and none_yet.stdout == "no hand-ins yet\n", none_yet.stderr
    toks.update(svc.tokens(course, "--instructor", db=db))
    ahead = datetime.datetime.now(datetime.timezone(datetime.timedelta(hours=2))) + datetime.timedelta(hours=1)
    # quota 1: the first hand-in is graded, the rest are filed (no grading to wait for)
    server = svc.start(course, "--checks-per-hour", "1", "--deadline", ahead.isoformat(), db=db)
    try:
        sent = {}
        for name, data in (("a", svc.unique(NO_ECHO, "a")), ("b", svc.unique(GOOD, "b"))):
            answer = server.submit(toks["ivy"], data, kind="hand-in")
            assert answer.status == 202, answer.body
            sent[name] = (answer.body, data)
            # the receipt: which bytes, how many, when (UTC, and in the course's zone: the deadline's +02:00)
            assert answer.body["sha256"] == hashlib.sha256(data).hexdigest() and answer.body["size"] == len(data)
            assert answer.body["submitted_at"].endswith("+00:00") and answer.body["submitted_at_local"].endswith("+02:00")
            assert answer.body["counts"] is True and answer.body["file_url"] == f"/api/submissions/{answer.body['id']}/file"
        a, b = sent["a"][0], sent["b"][0]
        assert a["replaces"] is None and b["replaces"]["id"] == a["id"] and b["replaces"]["late"] is False
        assert folder_state(course) == (sent["b"][1], utc(b))
        # what was filed, byte for byte, to its owner (and the instructor) only
        for token in (toks["ivy"], toks["instructor"]):
            got = svc_raw(server, f"/api/submissions/{a['id']}/file", token)
            assert got == (200, sent["a"][1]), got[0]
        assert server.request("GET", f"/api/submissions/{a['id']}/file", toks["jon"]).body == \
            {"error": "no such submission"}
        listed = {s["id"]: s for s in server.request("GET", "/api/submissions", toks["ivy"]).body}
        assert listed[a["id"]]["counts"] is False and listed[b["id"]]["counts"] is True
        assert listed[a["id"]]["sha256"] == a["sha256"] and listed[a["id"]]["size"] == a["size"]

        # the instructor chooses the first: the course folder holds it, with its own time
        out = hand_ins(course, "--list", "ivy", db=db)
        assert out.returncode == 0 and len(out.stdout.splitlines()) == 2, out.stderr
        assert out.stdout.splitlines()[1].endswith("COUNTS") and a["sha256"] in out.stdout.splitlines()[0]
        out = hand_ins(course, "--activate", "ivy", str(a["id"]), db=db)
        assert out.returncode == 0 and out.stdout.strip().endswith("COUNTS") and f"#{a['id']}" in out.stdout, out.stderr
        assert folder_state(course) == (sent["a"][1], utc(a))
        assert server.request("GET", f"/api/submissions/{a['id']}", toks["ivy"]).body["counts"] is True
        for args, words in ((["--activate", "ivy", "999999"], "is not a hand-in of ivy's"),
                            (["--activate", "jon", str(a["id"])], "is not a hand-in of jon's"),
                            (["--activate", "ivy", "first"], "is not a submission number"),
                            (["--list", "nobody"], "no hand-in from 'nobody'")):
            bad = hand_ins(course, *args, db=db)
            assert bad.returncode == 2 and words in bad.stderr and "Traceback" not in bad.stderr, (args, bad.stderr)
        assert folder_state(course) == (sent["a"][1], utc(a)), "a refused --activate changed the folder"
        # a new hand-in counts again
        c_data = svc.unique(GOOD, "c")
        c = server.submit(toks["ivy"], c_data, kind="hand-in").body
        assert c["replaces"]["id"] == a["id"] and folder_state(course) == (c_data, utc(c))
    finally:
        server.stop()

    # The same course after the deadline, in a zone of its own (--timezone beats the deadline's offset).
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)
    server = svc.start(course, "--checks-per-hour", "1", "--deadline", past.isoformat(), "--timezone=-05:00", db=db)
    try:
        me = server.request("GET", "/api/me", toks["ivy"]).body
        assert me["past_deadline"] is True and me["checks_left_this_hour"] is None
        assert me["deadline_local"].endswith("-05:00") and me["deadline"].endswith("+00:00")
        closed = server.submit(toks["ivy"], GOOD)
        assert closed.status == 403 and "checks are closed" in closed.body["error"]
        late_data = svc.unique(GOOD, "late")
        asked = server.submit(toks["ivy"], late_data, kind="hand-in")
        assert asked.status == 409, asked.body
        sentence = asked.body["error"]
        assert f"replace your on-time hand-in #{c['id']}" in sentence and "--late" in sentence, sentence
        assert "-05:00" in sentence or "UTC-0500" in sentence, sentence
        assert folder_state(course) == (c_data, utc(c)), "an unconfirmed late hand-in changed the folder"
        assert len(server.request("GET", "/api/submissions", toks["ivy"]).body) == 3, "an unconfirmed one was kept"
        nothing = server.submit(toks["jon"], GOOD, kind="hand-in")
        assert nothing.status == 409 and "you have no hand-in yet" in nothing.body["error"]
        late = server.request("POST", "/api/submissions?kind=hand-in&late=yes", toks["ivy"], late_data,
                              {"Content-Type": "text/x-python"})
        assert late.status == 202 and late.body["late"] is True and late.body["replaces"]["id"] == c["id"], late.body
        assert late.body["submitted_at_local"].endswith("-05:00")
        assert folder_state(course) == (late_data, utc(late.body))
        # filed, not graded (the hour's one grading went to the first hand-in): no word of checks or the hour
        shown = server.wait(toks["ivy"], late.body["id"])
        assert shown["status"] == "done" and shown["late"] is True and "grade-all grades it" in shown["feedback"]
        assert "check" not in shown["feedback"] and "hour" not in shown["feedback"], shown["feedback"]
        every = [s["id"] for s in server.request("GET", "/api/submissions", toks["ivy"]).body]
        assert every == [late.body["id"], c["id"], b["id"], a["id"]]        # nothing was overwritten
        for sub_id, data in ((a["id"], sent["a"][1]), (b["id"], sent["b"][1]), (c["id"], c_data)):
            assert svc_raw(server, f"/api/submissions/{sub_id}/file", toks["ivy"]) == (200, data)
    finally:
        server.stop()


def svc_raw(server, path, token):
    import urllib.request
    req = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Disposition"] == 'attachment; filename="toy.py"'
        return resp.status, resp.read()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian package: chromium)")
def test_the_page_asks_before_a_late_hand_in_shows_receipts_and_lets_the_instructor_choose(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    toks = svc.tokens(course, "--add", "kai")
    toks.update(svc.tokens(course, "--instructor"))
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)
    server = svc.start(course, "--checks-per-hour", "1", "--deadline", past.isoformat(), "--timezone", "Asia/Tokyo")
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_bytes(svc.unique(NO_ECHO, "first"))
    second.write_bytes(svc.unique(GOOD, "second"))
    browser = Browser(tmp_path / "profile")
    try:
        browser.go(server.url + "/")
        browser.js(f"document.querySelector('input[name=token]').value = {toks['kai']!r}")
        browser.submit("form[action='/login']")
        home = browser.text()
        assert "Checks left" not in home and "check" not in home.split("Your submissions")[0].replace("checks are closed", "")
        assert "JST" in home and "no hand-in of yours yet" in home, home
        browser.set_file("input[type=file]", first)
        browser.submit("form[action='/upload']")                      # the box not ticked: asked, nothing kept
        assert "would be late" in browser.text() and "Nothing was kept" in browser.text()
        assert not (course / "submitted").exists()
        for path in (first, second):
            browser.go(server.url + "/")
            browser.set_file("input[type=file]", path)
            browser.js("document.querySelector('input[name=late]').checked = true")
            browser.submit("form[action='/upload']")
            page = browser.text()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            assert f"sha256 {digest}" in page and f"{len(path.read_bytes())} bytes" in page and "JST" in page, page
            assert "counts" in page and "late" in page
            fetched = browser.js("fetch(document.querySelector('a[download]').href).then(r => r.text())")
            assert fetched == path.read_text()
        first_id = min(s["id"] for s in server.request("GET", "/api/submissions", toks["kai"]).body)
        assert (course / "submitted/kai/toy_add/toy.py").read_bytes() == second.read_bytes()
        browser.go(server.url + "/")
        browser.submit("form[action='/logout']")
        browser.js(f"document.querySelector('input[name=token]').value = {toks['instructor']!r}")
        browser.submit("form[action='/login']")
        browser.go(server.url + f"/submissions/{first_id}")
        assert "not the hand-in that counts" in browser.text()
        browser.submit(f"form[action='/submissions/{first_id}/activate']")
        assert "counts" in browser.text() and "not the hand-in that counts" not in browser.text()
        assert (course / "submitted/kai/toy_add/toy.py").read_bytes() == first.read_bytes()
    finally:
        browser.close()
        server.stop()
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
