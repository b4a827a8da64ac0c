"""What survives a `kill -9` of the service, on SQLite and on PostgreSQL: every accepted
submission is graded exactly once, the one in flight is queued again, tokens and reports are
still there; and a grading that fails in the grader is tried once more, then shown as an error."""
import shutil
import time

import pytest
import sqlalchemy as sa

import service_server as svc
from grader.service import store as tables

GOOD = (svc.TOY / "submissions/good.py").read_bytes()
NO_ECHO = (svc.TOY / "submissions/no_echo.py").read_bytes()


@pytest.fixture(params=svc.DATABASES)
def database(request, tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    if request.param == "sqlite":
        yield course, None
        return
    url = svc.postgres_database()
    try:
        yield course, url
    finally:
        svc.drop_database(url)


def read(url: str, table) -> list[dict]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return [dict(r) for r in c.execute(sa.select(table).order_by(table.c[table.primary_key.columns.keys()[0]]))
                    .mappings()]
    finally:
        engine.dispose()


@pytest.mark.slow
def test_kill_9_loses_nothing_and_grades_each_submission_once(database):
    course, db = database
    url = db or tables.default_url(course)
    toks = svc.tokens(course, "--add", "p1", "p2", "p3", db=db)
    toks.update(svc.tokens(course, "--instructor", db=db))
    server = svc.start(course, "--jobs", "1", "--checks-per-hour", "0", db=db)
    expected = {}
    try:
        for student in ("p1", "p2", "p3"):
            for i, data in enumerate((GOOD, NO_ECHO)):
                answer = server.submit(toks[student], svc.unique(data, f"{student} {i}"))
                assert answer.status == 202, answer.body
                expected[answer.body["id"]] = (student, 90.0 if data is GOOD else 60.0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            queue = server.request("GET", "/api/queue", toks["instructor"]).body
            if any(q["status"] == "grading" for q in queue):
                break
            time.sleep(0.05)
        in_flight = [q["id"] for q in queue if q["status"] == "grading"]
        assert len(in_flight) == 1, queue
    finally:
        server.kill()
    assert {r["id"]: r["status"] for r in read(url, tables.submissions)}[in_flight[0]] == "grading"

    again = svc.start(course, "--jobs", "1", "--checks-per-hour", "0", db=db)
    try:
        for sub_id, (student, score) in expected.items():
            got = again.wait(toks[student], sub_id, timeout=180)
            assert got["status"] == "done" and got["score"] == score and got["student"] == student, got
        assert "queued again" in again.log_text()
        listed = again.request("GET", "/api/submissions", toks["instructor"]).body
    finally:
        again.stop()
    assert sorted(s["id"] for s in listed) == sorted(expected)
    runs = read(url, tables.gradings)
    for sub_id in expected:
        outcomes = [g["outcome"] for g in runs if g["submission_id"] == sub_id]
        assert outcomes.count("report") == 1, (sub_id, outcomes)
        assert outcomes == (["interrupted", "report"] if sub_id == in_flight[0] else ["report"]), (sub_id, outcomes)


@pytest.mark.slow
def test_a_grading_the_grader_fails_is_tried_twice_then_shown_as_an_error(database, tmp_path):
    course, db = database
    assignment = tmp_path / "toy"
    shutil.copytree(svc.TOY, assignment)
    toks = svc.tokens(course, "--add", "q1", db=db)
    toks.update(svc.tokens(course, "--instructor", db=db))
    server = svc.start(course, "--jobs", "1", "--cold", assignment=assignment, db=db)
    try:
        # The instructor's assignment file goes missing under a running service: every grading
        # of it ends without a report, whatever the student sent.
        toml = assignment / "assignment.toml"
        saved = toml.read_text()
        toml.unlink()
        broken = server.submit(toks["q1"], svc.unique(GOOD, "q1 broken")).body["id"]
        student_view = server.wait(toks["q1"], broken, timeout=120)
        assert student_view["status"] == "error" and student_view["score"] is None
        assert "not because of your code" in student_view["error"]
        instructor_view = server.request("GET", f"/api/submissions/{broken}", toks["instructor"]).body
        assert "exited with status 2" in instructor_view["error"] and "no assignment file" in instructor_view["error"]
        toml.write_text(saved)
        fine = server.submit(toks["q1"], svc.unique(GOOD, "q1 fine")).body["id"]
        assert server.wait(toks["q1"], fine)["score"] == 90.0
    finally:
        server.stop()
    url = db or tables.default_url(course)
    outcomes = [g["outcome"] for g in read(url, tables.gradings) if g["submission_id"] == broken]
    assert outcomes == ["failed", "failed"]
