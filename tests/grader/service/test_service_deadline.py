"""The deadline: a check before it shows what `[service] visibility` allows; after it checks are
refused, a hand-in is kept and marked late for both sides, and every report shows everything."""
import datetime
import shutil
import time

import pytest

import service_server as svc

NO_ECHO = (svc.TOY / "submissions/no_echo.py").read_bytes()
LEAD_S = 3          # the second server's start to its deadline: it passes while the server runs


@pytest.mark.slow
def test_deadline_late_hand_in_and_visibility(tmp_path):
    assignment = tmp_path / "toy"
    shutil.copytree(svc.TOY, assignment)
    with open(assignment / "assignment.toml", "a") as f:
        f.write('\n[service]\nvisibility = "areas"\n')
    course = tmp_path / "course"
    course.mkdir()
    toks = svc.tokens(course, "--add", "lena")
    toks.update(svc.tokens(course, "--instructor"))
    # Before the deadline: one far off, so that the check's grading, however slow the machine,
    # is seen before it.
    ahead = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    server = svc.start(course, "--deadline", ahead.isoformat(), assignment=assignment)
    try:
        me = server.request("GET", "/api/me", toks["lena"]).body
        assert me["deadline"] == ahead.replace(microsecond=0).isoformat()
        early = server.submit(toks["lena"], svc.unique(NO_ECHO, "lena early"))
        assert early.status == 202 and early.body["late"] is False
        shown = server.wait(toks["lena"], early.body["id"])["feedback"]
        assert "| echo | 0/5 | 0.00 / 30.00 |" in shown and "shows the areas only" in shown
        assert "no function named 'echo'" not in shown          # no test's hint before the deadline
    finally:
        server.stop()
    # The same course served with a deadline LEAD_S ahead, which passes while it runs.
    deadline = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=LEAD_S)
    server = svc.start(course, "--deadline", deadline.isoformat(), assignment=assignment)
    try:
        assert server.request("GET", "/api/me", toks["lena"]).body["deadline"] == \
            deadline.replace(microsecond=0).isoformat()
        time.sleep(max(0.0, (deadline - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) + 0.5)
        closed = server.submit(toks["lena"], NO_ECHO)
        assert closed.status == 403 and "deadline" in closed.body["error"] and "hand-in is still accepted" \
            in closed.body["error"]
        late_file = svc.unique(NO_ECHO, "lena late")
        asked = server.submit(toks["lena"], late_file, kind="hand-in")
        assert asked.status == 409 and "--late" in asked.body["error"], asked.body
        late = server.request("POST", "/api/submissions?kind=hand-in&late=yes", toks["lena"], late_file,
                              {"Content-Type": "text/x-python"})
        assert late.status == 202 and late.body["late"] is True
        assert (course / "submitted/lena/toy_add/toy.py").is_file()
        graded = server.wait(toks["lena"], late.body["id"])
        assert graded["late"] is True and graded["score"] == 60.0
        assert "no function named 'echo'" in graded["feedback"]       # after the deadline: everything
        assert "no function named 'echo'" in server.wait(toks["lena"], early.body["id"])["feedback"]
        seen = server.request("GET", f"/api/submissions/{late.body['id']}", toks["instructor"]).body
        assert seen["late"] is True
        assert [s["late"] for s in server.request("GET", "/api/submissions", toks["instructor"]).body] == [True, False]
    finally:
        server.stop()


def test_bad_settings_are_refused_with_a_sentence(tmp_path):
    import subprocess
    import sys
    from grader.assignment import REPO
    course = tmp_path / "course"
    course.mkdir()
    cases = [(["--deadline", "next friday"], "not an ISO-8601 time"), (["--jobs", "0"], "at least 1"),
             (["--checks-per-hour", "-1"], "0 (no limit) or more"), (["--port", "70000"], "not a port number")]
    for extra, words in cases:
        out = subprocess.run([sys.executable, "-m", "grader", "serve", "--course", str(course), "--assignment",
                              str(svc.TOY), "--device", "cpu", *extra], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_the_visibility_setting_is_read_and_checked(tmp_path):
    import pytest
    from grader.assignment import Assignment, AssignmentError
    toml = (svc.TOY / "assignment.toml").read_text()
    (tmp_path / "assignment.toml").write_text(toml)
    assert Assignment.load(tmp_path).visibility == "visible"
    for extra, words in (('visibility = "sometimes"', "must be one of"), ('shown = "all"', "unknown key [service]")):
        (tmp_path / "assignment.toml").write_text(toml + f"\n[service]\n{extra}\n")
        with pytest.raises(AssignmentError, match=words.replace("[", r"\[")):
            Assignment.load(tmp_path)


def test_score_only_shows_the_score_and_whole_file_problems(toy_report):
    from grader.service.views import shown
    report = toy_report("no_echo")
    text = shown(report, "sam", "hidden", past_deadline=False)
    assert "60.00 / 90.00" in text and "| echo |" not in text and "echo" not in text.split("Score")[1]
    assert "no function named" in shown(report, "sam", "hidden", past_deadline=True)
    broken = dict(report, extra_data=dict(report["extra_data"], problem="the submission does not parse as Python"))
    assert "does not parse" in shown(broken, "sam", "hidden", past_deadline=False)
