"""A real `python -m grader serve` on loopback for the service's tests, and plain-urllib
requests to it (the student client uses only the standard library too)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.assignment import REPO

TOY = REPO / "tests/grader/toy"
START_S = 60


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tokens(course: Path, *args: str, db: str | None = None) -> dict[str, str]:
    cmd = [sys.executable, "-m", "grader", "tokens", "--course", str(course), *args] + (["--db", db] if db else [])
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.strip())


@dataclass
class Answer:
    status: int
    body: object
    headers: dict = field(default_factory=dict)


@dataclass
class Server:
    course: Path
    port: int
    proc: subprocess.Popen
    log: Path
    db: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, token: str | None = None, data: bytes | None = None,
                headers: dict | None = None, timeout: float = 30) -> Answer:
        headers = dict(headers or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, raw, got = resp.status, resp.read(), {k.lower(): v for k, v in resp.headers.items()}
        except urllib.error.HTTPError as exc:
            status, raw, got = exc.code, exc.read(), {k.lower(): v for k, v in exc.headers.items()}
        kind = got.get("content-type", "")
        return Answer(status, json.loads(raw) if kind.startswith("application/json") else raw.decode(), got)

    def raw(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> Answer:
        """One request that follows no redirect (a log-in's 303 carries the cookie)."""
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            raw, got = resp.read(), {k.lower(): v for k, v in resp.getheaders()}
            cookies = [v for k, v in resp.getheaders() if k.lower() == "set-cookie"]
        finally:
            conn.close()
        kind = got.get("content-type", "")
        answer = Answer(resp.status, json.loads(raw) if kind.startswith("application/json") else raw.decode(), got)
        answer.headers["set-cookie-all"] = cookies
        return answer

    def login(self, token: str) -> str:
        """Log in through the page's form; the Cookie header that carries the log-in."""
        from urllib.parse import urlencode
        got = self.raw("POST", "/login", urlencode({"token": token}).encode(),
                       {"Content-Type": "application/x-www-form-urlencoded"})
        assert got.status == 303, got.body
        return "; ".join(c.split(";", 1)[0] for c in got.headers["set-cookie-all"])

    def page(self, path: str, cookie: str, method: str = "GET", form: dict | None = None) -> Answer:
        from urllib.parse import urlencode
        headers = {"Cookie": cookie}
        body = None
        if form is not None:
            body = urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        return self.raw(method, path, body, headers)

    def submit(self, token: str, data: bytes, kind: str = "check") -> Answer:
        return self.request("POST", f"/api/submissions?kind={kind}", token, data,
                            {"Content-Type": "text/x-python"})

    def wait(self, token: str, sub_id: int, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.request("GET", f"/api/submissions/{sub_id}", token)
            assert got.status == 200, got.body
            if got.body["status"] in ("done", "error"):
                return got.body
            time.sleep(0.3)
        raise AssertionError(f"submission {sub_id} not graded within {timeout} s:\n{self.log_text()[-3000:]}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """kill -9 of the service alone: its gradings are in sessions of their own, and find their
        parent gone."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(course: Path, *args: str, assignment: Path = TOY, db: str | None = None, port: int | None = None) -> Server:
    port = port or free_port()
    log = course.parent / f"serve-{course.name}-{port}.log"
    cmd = [sys.executable, "-m", "grader", "serve", "--course", str(course), "--assignment", str(assignment),
           "--device", "cpu", "--port", str(port), *args] + (["--db", db] if db else [])
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    server = Server(course, port, proc, log, db)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the service exited with {proc.returncode}:\n{server.log_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise AssertionError(f"the service did not listen within {START_S} s:\n{server.log_text()[-3000:]}")


def unique(source: bytes, tag: str) -> bytes:
    """The same program with a comment of its own: a file only this submission has."""
    return source + f"\n# {tag} {uuid.uuid4().hex}\n".encode()


# -- PostgreSQL -----------------------------------------------------------------------------
PG_ENV = "GRADER_TEST_PG_URL"


# The databases a service test runs on. Only the PostgreSQL runs share a group (one xdist worker):
# they use the one server that test_daemon_scripts stops and starts; the SQLite runs go anywhere.
DATABASES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.xdist_group("postgres"))]


def postgres_database() -> str:
    """A fresh database on the server GRADER_TEST_PG_URL names (tools/postgres_local.sh starts one),
    dropped by `drop_database`. CI must have it; elsewhere its tests skip."""
    url = os.environ.get(PG_ENV)
    if not url:
        if in_ci():
            pytest.fail(f"CI must test the service on PostgreSQL: {PG_ENV} is not set (.ci/run sets it from "
                        "tools/postgres_local.sh)")
        pytest.skip(f"no PostgreSQL here: set {PG_ENV} (as root: export {PG_ENV}=$(bash tools/postgres_local.sh))")
    import sqlalchemy as sa
    try:
        sa.make_url(url)
    except sa.exc.ArgumentError:
        pytest.fail(f"{PG_ENV} is not a database URL: {url!r} (tools/postgres_local.sh prints one on its last line)")
    name = f"grader_svc_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(sa.text(f"CREATE DATABASE {name}"))
    finally:
        admin.dispose()
    return sa.make_url(url).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    import sqlalchemy as sa
    target = sa.make_url(url)
    admin = sa.create_engine(target.set(database=sa.make_url(os.environ[PG_ENV]).database), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(sa.text(f"DROP DATABASE IF EXISTS {target.database} WITH (FORCE)"))
    finally:
        admin.dispose()
