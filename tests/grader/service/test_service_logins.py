"""Log-ins: failed ones limited per source address (20 in a minute, then 429 for a minute, counted on
the instructor's page and said in the service's log); the pages' cookie holds a server-side
session, never the token: stored hashed, ended by log-out and by revoking the token, and living
until the student's deadline plus a week. On SQLite and on PostgreSQL where sessions are stored."""
import datetime
import http.client
import json
import subprocess
import sys
from urllib.parse import urlencode

import pytest
import sqlalchemy as sa

import service_server as svc
from grader.assignment import REPO
from grader.service import store as tables
from grader.service.tokens import digest


def from_address(server, source: str, method: str, path: str, body=None, headers=None):
    """A request from another loopback address (127.0.0.0/8 is all this machine's)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30, source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def test_21_wrong_log_ins_in_a_minute_from_one_address_get_429(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    toks = svc.tokens(course, "--add", "lia")
    toks.update(svc.tokens(course, "--instructor"))
    server = svc.start(course)
    try:
        instructor = server.login(toks["instructor"])          # a log-in made before the limit stays good
        for i in range(20):                                     # through the API and the page alike
            if i % 2:
                got = server.request("GET", "/api/me", f"wrong-token-{i}")
                assert got.status == 401 and "not known" in got.body["error"], got.body
            else:
                got = server.raw("POST", "/login", urlencode({"token": f"wrong-{i}"}).encode(),
                                 {"Content-Type": "application/x-www-form-urlencoded"})
                assert got.status == 401 and "not known here" in got.body
        limited = server.request("GET", "/api/me", "wrong-token-21")
        assert limited.status == 429, limited.body
        assert "too many failed log-ins from your address" in limited.body["error"]
        wait = int(limited.headers["retry-after"])
        assert 0 < wait <= 60 and limited.body["retry_after_seconds"] == wait
        # while limited, a right token is refused too: a guess learns nothing
        right = server.request("GET", "/api/me", toks["lia"])
        assert right.status == 429 and "too many failed log-ins" in right.body["error"]
        page = server.raw("POST", "/login", urlencode({"token": toks["lia"]}).encode(),
                          {"Content-Type": "application/x-www-form-urlencoded"})
        assert page.status == 429 and "too many failed log-ins" in page.body and "retry-after" in page.headers
        # another address is not limited
        status, body, _ = from_address(server, "127.0.0.2", "GET", "/api/me", headers={"Authorization": f"Bearer {toks['lia']}"})
        assert status == 200 and json.loads(body)["student"] == "lia"
        status, _, _ = from_address(server, "127.0.0.2", "GET", "/api/me", headers={"Authorization": "Bearer nope"})
        assert status == 401
        # the instructor's page counts them; the log has one line for the limit
        home = server.page("/", instructor)
        assert home.status == 200 and "Failed log-ins" in home.body, home.body[-2000:]
        row = home.body.split("<table class=failed-logins>")[1].split("</table>")[0]
        assert "<td>127.0.0.1</td><td class=num>20</td><td class=num>1 (now," in row, row
        assert "<td>127.0.0.2</td><td class=num>1</td><td class=num>0</td>" in row, row
        lines = [line for line in server.log_text().splitlines() if "limited for 60 s" in line]
        assert lines == ["grader serve: log-ins from 127.0.0.1 limited for 60 s: 20 failed log-ins within 60 s"], lines
    finally:
        server.stop()


def sessions(course, db):
    engine = sa.create_engine(db or tables.default_url(course))
    try:
        with engine.connect() as c:
            return [dict(r) for r in c.execute(sa.select(tables.sessions).order_by(tables.sessions.c.id)).mappings()]
    finally:
        engine.dispose()


def expire_all(course, db):
    engine = sa.create_engine(db or tables.default_url(course))
    try:
        with engine.begin() as c:
            c.execute(tables.sessions.update().values(expires_at=datetime.datetime(2000, 1, 1)))
    finally:
        engine.dispose()


def test_the_cookie_is_a_session_that_log_out_revocation_and_time_end(course_db):
    course, db = course_db
    toks = svc.tokens(course, "--add", "max", "ned", db=db)
    toks.update(svc.tokens(course, "--instructor", db=db))
    deadline = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=2)).replace(microsecond=0)
    server = svc.start(course, "--deadline", deadline.isoformat(), db=db)
    try:
        got = server.raw("POST", "/login", urlencode({"token": toks["max"]}).encode(),
                         {"Content-Type": "application/x-www-form-urlencoded"})
        [cookie] = got.headers["set-cookie-all"]
        name, value = cookie.split(";", 1)[0].split("=", 1)
        assert name == "grader_session" and value != toks["max"] and toks["max"] not in cookie
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        max_age = int(cookie.split("Max-Age=")[1].split(";")[0])
        week_after = (deadline + datetime.timedelta(days=7) - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        assert abs(max_age - week_after) < 120, (max_age, week_after)
        [row] = sessions(course, db)
        assert row["digest"] == digest(value) and value not in str(row) and row["student"] == "max"
        assert row["expires_at"] == (deadline + datetime.timedelta(days=7)).replace(tzinfo=None)
        mine = f"grader_session={value}"
        assert "Your submissions" in server.page("/", mine).body
        # the token itself in the cookie is no log-in
        assert "Your token" in server.page("/", f"grader_session={toks['max']}").body
        assert "Your token" in server.page("/", f"grader_token={toks['max']}").body
        # log-out ends it on the server: the same cookie, sent again, is no log-in
        assert server.page("/logout", mine, method="POST", form={}).status == 303
        assert "Your token" in server.page("/", mine).body and sessions(course, db)[0]["ended_at"] is not None
        # revoking the token ends its sessions
        again = server.login(toks["max"])
        other = server.login(toks["ned"])
        assert "Your submissions" in server.page("/", again).body
        out = subprocess.run([sys.executable, "-m", "grader", "tokens", "--course", str(course), "--revoke", "max"]
                             + (["--db", db] if db else []), cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "Your token" in server.page("/", again).body
        assert "Your submissions" in server.page("/", other).body          # ned's is untouched
        # past its time a session is no log-in either
        expire_all(course, db)
        assert "Your token" in server.page("/", other).body
    finally:
        server.stop()


def test_a_student_cannot_log_in_on_the_pages_a_week_after_the_deadline(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    toks = svc.tokens(course, "--add", "ola")
    toks.update(svc.tokens(course, "--instructor"))
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=8)
    server = svc.start(course, "--deadline", long_ago.isoformat())
    try:
        got = server.raw("POST", "/login", urlencode({"token": toks["ola"]}).encode(),
                         {"Content-Type": "application/x-www-form-urlencoded"})
        assert got.status == 403 and "closed a week after the deadline" in got.body
        assert "Students" in server.page("/", server.login(toks["instructor"])).body     # the instructor still can
        assert server.request("GET", "/api/me", toks["ola"]).status == 200                # and the API with the token
    finally:
        server.stop()


def test_the_guard_forgets_quiet_addresses_when_it_holds_too_many(monkeypatch):
    """Unit-level: many addresses failing once each must not grow the counts without bound, and a
    limited address is never forgotten while it is limited."""
    from grader.service import guard
    monkeypatch.setattr(guard, "MAX_SOURCES", 50)
    now = [1000.0]
    said = []
    g = guard.LoginGuard(say=said.append, clock=lambda: now[0])
    for _ in range(guard.FAILURES):
        g.failed("10.0.0.1")
    assert len(said) == 1
    now[0] += guard.BLOCK_S - 2                       # still limited
    for i in range(200):
        g.failed(f"10.1.{i // 250}.{i % 250}")
        now[0] += 0.001
    assert len(g.sources) <= 51 and "10.0.0.1" in g.sources
    with pytest.raises(guard.Blocked):
        g.check("10.0.0.1")
