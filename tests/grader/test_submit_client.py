"""The grading service's client (grader/submit_client.py), through its real `main(argv)`.

The server side here is FakeService, a test double: a loopback `http.server` that answers
each route with canned responses shaped as the HTTP contract says, and records what the
client sent. It stands in for the real service, which is tested against this client once
both are in one tree; nothing here grades anything."""
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path

import pytest

from grader import cli, submit_client
from grader.submit_client import main

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "grader" / "submit_client.py"
TOKEN = "tok-student-a"
SOURCE = b"import triton\n\ndef reshape_and_cache(*args):\n    return None\n"


def submission(id=7, status="queued", **fields):
    base = {"id": id, "student": "alice", "kind": "check", "status": status,
            "position": None, "late": False, "submitted_at": "2026-03-01T10:00:00+00:00",
            "finished_at": None, "score": None, "max_score": None, "feedback": None, "error": None}
    return {**base, **fields}


def done(id=7, score=85.0, max_score=100.0, feedback="## Write\n- 85 / 100: all cases right\n", **fields):
    return submission(id, "done", score=score, max_score=max_score, feedback=feedback,
                      finished_at="2026-03-01T10:01:00+00:00", **fields)


def accepted(id=7, kind="check", position=2, late=False):
    return {"id": id, "kind": kind, "status": "queued", "position": position, "late": late}


class FakeService:
    """Test double of the server: per route, a list of canned answers given in turn, the
    last repeated. An answer is (status, body, headers), body a JSON value or raw bytes,
    optionally preceded by a delay in seconds: (delay, status, body, headers); a status of
    None closes the connection with no answer."""

    def __init__(self):
        self.routes: dict[tuple[str, str], list] = {}
        self.requests: list[dict] = []
        self.sent: list[bytes] = []         # every body answered, as bytes on the wire
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                fake._handle(self)

            def do_POST(self):
                fake._handle(self)

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

    def paths(self, method: str | None = None) -> list[str]:
        return [r["path"] for r in self.requests if method is None or r["method"] == method]

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        route = handler.path.split("?")[0]
        with self.lock:
            self.requests.append({"method": handler.command, "path": handler.path, "body": body,
                                  "headers": dict(handler.headers)})
            queue = self.routes.get((handler.command, route))
            if not queue:
                reply = (404, {"error": f"no canned answer for {handler.command} {route}"}, {})
            else:
                reply = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(reply[0], float):
            time.sleep(reply[0])
            reply = reply[1:]
        status, payload, headers = reply
        if status is None:          # hang up without a word, as a crashing server does
            handler.close_connection = True
            return
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.sent.append(data)
        handler.send_response(status)
        handler.send_header("Content-Type", "application/octet-stream" if isinstance(payload, bytes)
                            else "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service():
    fake = FakeService()
    yield fake
    fake.close()


@pytest.fixture(autouse=True)
def student_machine(tmp_path, monkeypatch):
    """A home and a working folder of their own, no settings in the environment, fast polling."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    for name in ("GRADER_SERVER", "GRADER_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(submit_client, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(submit_client, "REQUEST_TIMEOUT", 2.0)
    return home, work


@pytest.fixture
def file(student_machine):
    path = student_machine[1] / "l1_paged_kv_write.py"
    path.write_bytes(SOURCE)
    return path


def run(capsys, *argv, entry=main):
    rc = entry([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_sentence(err: str) -> str:
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


# ---------------------------------------------------------------- the happy path

def test_check_waits_through_the_queue_and_ends_with_the_score(service, file, capsys):
    service.answer("POST", "/api/submissions", (202, accepted(position=2), {}))
    service.answer("GET", "/api/submissions/7",
                   (200, submission(position=2), {}), (200, submission(position=1), {}),
                   (200, submission(position=1), {}), (200, submission(status="grading"), {}),
                   (200, submission(status="grading"), {}), (200, done(), {}))
    rc, out, err = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN)
    assert rc == 0, err
    assert err == ""
    lines = out.splitlines()
    # Each state once, in order, however many polls saw it.
    assert lines[:5] == ["check #7 of l1_paged_kv_write.py accepted", "queued, position 2",
                         "queued, position 1", "grading", "done"]
    assert "## Write\n- 85 / 100: all cases right\n" in out
    assert lines[-1] == "score: 85 / 100"

    post = service.requests[0]
    assert post["method"] == "POST" and post["path"] == "/api/submissions?kind=check"
    assert post["body"] == SOURCE
    assert post["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert post["headers"]["Content-Type"] == "text/x-python"
    assert set(service.paths("GET")) == {"/api/submissions/7"}
    assert all(r["headers"]["Authorization"] == f"Bearer {TOKEN}" for r in service.requests)


@pytest.mark.parametrize("score, max_score, line", [(97.5, 100.0, "score: 97.5 / 100"),
                                                     (85.0, 100.0, "score: 85 / 100"),
                                                     (0, 15, "score: 0 / 15"),
                                                     (12.25, 37.5, "score: 12.25 / 37.5")])
def test_score_line(service, file, capsys, score, max_score, line):
    service.answer("POST", "/api/submissions", (202, accepted(), {}))
    service.answer("GET", "/api/submissions/7", (200, done(score=score, max_score=max_score), {}))
    rc, out, _ = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN)
    assert rc == 0
    assert out.splitlines()[-1] == line


def test_hidden_score_still_ends_with_a_score_line(service, file, capsys):
    service.answer("POST", "/api/submissions", (202, accepted(), {}))
    service.answer("GET", "/api/submissions/7", (200, done(score=None, max_score=None), {}))
    rc, out, _ = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN)
    assert rc == 0
    assert out.splitlines()[-1] == "score: not shown yet"


def test_late_hand_in_says_it_was_marked_late(service, file, capsys):
    service.answer("POST", "/api/submissions", (202, accepted(kind="hand-in", position=1, late=True), {}))
    service.answer("GET", "/api/submissions/7", (200, done(kind="hand-in", late=True), {}))
    rc, out, _ = run(capsys, "submit", file, "--hand-in", "--server", service.url, "--token", TOKEN)
    assert rc == 0
    assert service.paths("POST") == ["/api/submissions?kind=hand-in"]
    lines = out.splitlines()
    assert lines[0] == "hand-in #7 of l1_paged_kv_write.py accepted (after the deadline: marked late)"
    assert lines[-2] == "note: this hand-in was made after the deadline and is marked late"
    assert lines[-1] == "score: 85 / 100"


def test_on_time_hand_in_says_nothing_of_lateness(service, file, capsys):
    service.answer("POST", "/api/submissions", (202, accepted(kind="hand-in"), {}))
    service.answer("GET", "/api/submissions/7", (200, done(kind="hand-in"), {}))
    rc, out, _ = run(capsys, "submit", file, "--hand-in", "--server", service.url, "--token", TOKEN)
    assert rc == 0 and "late" not in out


def test_report_is_the_servers_final_answer(service, file, capsys, tmp_path):
    service.answer("POST", "/api/submissions", (202, accepted(), {}))
    service.answer("GET", "/api/submissions/7", (200, submission(status="grading"), {}), (200, done(), {}))
    out_file = tmp_path / "report.json"
    rc, _, err = run(capsys, "submit", file, "--report", out_file, "--server", service.url, "--token", TOKEN)
    assert rc == 0, err
    assert out_file.read_bytes() == service.sent[-1]
    assert json.loads(out_file.read_text()) == done()


def test_report_into_a_missing_folder_is_refused_before_sending(service, file, capsys, tmp_path):
    rc, _, err = run(capsys, "submit", file, "--report", tmp_path / "nowhere" / "r.json",
                     "--server", service.url, "--token", TOKEN)
    assert rc == 2
    assert "does not exist" in one_sentence(err)
    assert service.requests == []


# ---------------------------------------------------------------- settings

def test_settings_flag_over_env_over_local_dotfile_over_home_dotfile(service, capsys, student_machine,
                                                                     monkeypatch):
    home, work = student_machine
    service.answer("GET", "/api/me", (200, {"student": "alice", "role": "student", "checks_left_this_hour": 3,
                                            "deadline": None, "assignment": "l1_paged_kv_write"}, {}))

    def token_used(*flags):
        rc, _, err = run(capsys, "status", *flags)
        assert rc == 0, err
        return service.requests[-1]["headers"]["Authorization"].removeprefix("Bearer ")

    (home / ".grader").write_text(f"# from the instructor\nserver = {service.url}\ntoken = home-token\n")
    assert token_used() == "home-token"
    (work / ".grader").write_text("token = 'local-token'\n")     # the server still comes from home
    assert token_used() == "local-token"
    monkeypatch.setenv("GRADER_TOKEN", "env-token")
    assert token_used() == "env-token"
    assert token_used("--token", "flag-token") == "flag-token"


def test_server_from_the_environment_beats_a_stale_dotfile(service, capsys, student_machine, monkeypatch):
    home, _ = student_machine
    (home / ".grader").write_text("server = http://127.0.0.1:9\ntoken = t\n")
    monkeypatch.setenv("GRADER_SERVER", service.url + "/")
    service.answer("GET", "/api/me", (200, {"student": "alice", "role": "student", "checks_left_this_hour": 1,
                                            "deadline": None, "assignment": "l1"}, {}))
    rc, _, err = run(capsys, "status")
    assert rc == 0, err
    assert service.paths() == ["/api/me"]       # the trailing slash made no //api


@pytest.mark.parametrize("missing, present", [("server", "token"), ("token", "server")])
def test_a_missing_setting_says_where_to_put_it(service, file, capsys, student_machine, missing, present):
    (student_machine[0] / ".grader").write_text(f"{present} = {service.url if present == 'server' else 't'}\n")
    rc, _, err = run(capsys, "submit", file)
    assert rc == 2
    sentence = one_sentence(err)
    assert f"no {missing} given" in sentence
    assert f"--{missing}" in sentence and f"GRADER_{missing.upper()}" in sentence and ".grader" in sentence
    assert service.requests == []


def test_a_misspelt_dotfile_key_is_named_with_its_line(file, capsys, student_machine):
    (student_machine[1] / ".grader").write_text("server = http://127.0.0.1:9\ntokn = abc\n")
    rc, _, err = run(capsys, "submit", file)
    assert rc == 2
    assert ".grader line 2" in one_sentence(err) and "tokn" in err


def test_a_server_without_a_scheme_is_refused(file, capsys):
    rc, _, err = run(capsys, "submit", file, "--server", "grader.example.edu:8000", "--token", "t")
    assert rc == 2
    assert "http://" in one_sentence(err)


# ---------------------------------------------------------------- the file, refused before sending

@pytest.mark.parametrize("case, expect", [
    ("missing", "no file at"),
    ("folder", "is a folder"),
    ("oversize", "is 1,048,577 bytes; the service takes files up to 1 MiB (1,048,576 bytes)"),
    ("empty", "is empty"),
    ("latin-1", "not UTF-8 text"),
])
def test_a_bad_file_is_refused_locally(service, capsys, student_machine, case, expect):
    path = student_machine[1] / "l1_paged_kv_write.py"
    if case == "folder":
        path.mkdir()
    elif case == "oversize":
        path.write_bytes(b"#" * (1024 * 1024) + b"\n")
    elif case == "empty":
        path.write_bytes(b"\n  \n")
    elif case == "latin-1":
        path.write_bytes("# café\n".encode("latin-1"))
    rc, _, err = run(capsys, "submit", path, "--server", service.url, "--token", TOKEN)
    assert rc == 2
    assert expect in one_sentence(err)
    assert service.requests == []


def test_exactly_one_mib_is_sent(service, capsys, student_machine):
    path = student_machine[1] / "big.py"
    path.write_bytes(b"#" * (1024 * 1024 - 1) + b"\n")
    service.answer("POST", "/api/submissions", (202, accepted(), {}))
    service.answer("GET", "/api/submissions/7", (200, done(), {}))
    rc, _, err = run(capsys, "submit", path, "--server", service.url, "--token", TOKEN)
    assert rc == 0, err
    assert len(service.requests[0]["body"]) == 1024 * 1024


def test_an_unreadable_file_is_refused(service, capsys, student_machine):
    # A link to nothing: unreadable for root too, which a chmod is not.
    link = student_machine[1] / "l1_paged_kv_write.py"
    link.symlink_to(student_machine[1] / "moved_away.py")
    rc, _, err = run(capsys, "submit", link, "--server", service.url, "--token", TOKEN)
    assert rc == 2
    assert "cannot read" in one_sentence(err)


# ---------------------------------------------------------------- what the server refuses

@pytest.mark.parametrize("status, body, headers, code, expect", [
    (401, {"error": "This token is not known here."}, {}, 1, "does not accept this token: This token is not known here"),
    (401, b"", {}, 1, "does not accept this token: check the token your instructor gave you"),
    (403, {"error": "This token has been revoked."}, {}, 1, "refused: This token has been revoked"),
    (403, b"", {}, 1, "revoked"),
    (403, {"error": "Checks closed at the deadline, 2026-03-08T23:59:00Z; a hand-in is still accepted."}, {}, 1,
     "refused: Checks closed at the deadline"),
    (413, {"error": "The file is over 1 MiB."}, {}, 1, "The file is over 1 MiB"),
    (415, {"error": "The file is not UTF-8 text."}, {}, 1, "The file is not UTF-8 text"),
    (400, {"error": "kind must be check or hand-in."}, {}, 1, "kind must be check or hand-in"),
    (429, {"error": "You have used your 4 checks this hour; the next one is possible at 11:20.",
           "retry_after_seconds": 1200}, {"Retry-After": "1200"}, 3,
     "the next one is possible at 11:20 (retry after 1200 s)"),
    (429, {"error": "Over the hourly quota.", "retry_after_seconds": 60}, {}, 3, "(retry after 60 s)"),
    (500, b"<html>Internal Server Error</html>", {}, 1, "HTTP 500"),
    (302, b"", {"Location": "https://grader.example.edu/api/submissions"}, 1,
     "redirects to https://grader.example.edu/api/submissions"),
])
def test_each_refusal_is_one_sentence(service, file, capsys, status, body, headers, code, expect):
    service.answer("POST", "/api/submissions", (status, body, headers))
    rc, out, err = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN)
    assert rc == code
    assert expect in one_sentence(err)
    assert out == ""
    assert len(service.requests) == 1            # no retry of an upload, no redirect followed


def test_an_unknown_id_while_waiting(service, file, capsys):
    service.answer("POST", "/api/submissions", (202, accepted(), {}))
    service.answer("GET", "/api/submissions/7", (404, {"error": "No submission 7."}, {}))
    rc, _, err = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN)
    assert rc == 1
    assert "No submission 7" in one_sentence(err)


def test_a_grading_that_failed_in_the_grader(service, file, capsys, tmp_path):
    service.answer("POST", "/api/submissions", (202, accepted(), {}))
    failed = submission(status="error", error="the grading host died twice")
    service.answer("GET", "/api/submissions/7", (200, submission(status="grading"), {}), (200, failed, {}))
    report = tmp_path / "r.json"
    rc, out, err = run(capsys, "submit", file, "--report", report, "--server", service.url, "--token", TOKEN)
    assert rc == 1
    assert "failed in the grader, not in your code: the grading host died twice" in one_sentence(err)
    assert "score:" not in out
    assert json.loads(report.read_text())["status"] == "error"


def test_an_answer_that_is_not_json(service, file, capsys):
    service.answer("POST", "/api/submissions", (200, b"<html>welcome</html>", {}))
    rc, _, err = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN)
    assert rc == 1
    assert "not JSON" in one_sentence(err)


# ---------------------------------------------------------------- no answer at all

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_listening(file, capsys):
    rc, _, err = run(capsys, "submit", file, "--server", f"http://127.0.0.1:{free_port()}", "--token", "t")
    assert rc == 1
    assert "could not reach the grading service" in one_sentence(err) and "nothing is listening" in err


def test_a_server_that_hangs_up(service, file, capsys):
    service.answer("POST", "/api/submissions", (None, b"", {}))
    rc, _, err = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN)
    assert rc == 1
    assert "closed the connection without answering" in one_sentence(err)
    assert "may or may not have been accepted" in err      # it went out whole: it may be stored


@pytest.mark.parametrize("token", ["\u201cabc\u201d", "abc def"])
def test_a_mangled_token_is_refused_locally(service, file, capsys, student_machine, token):
    (student_machine[1] / ".grader").write_text(f"server = {service.url}\ntoken = {token}\n", encoding="utf-8")
    rc, _, err = run(capsys, "submit", file)
    assert rc == 2
    assert "copy it again" in one_sentence(err)
    assert service.requests == []


def test_an_unknown_host_name(file, capsys, monkeypatch):
    # The machine running the tests may have no resolver at all; the failure is injected where
    # the standard library would meet it.
    def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    rc, _, err = run(capsys, "submit", file, "--server", "https://grader.nowhere.invalid", "--token", "t")
    assert rc == 1
    assert "'grader.nowhere.invalid' is not known" in one_sentence(err)


def test_an_upload_with_no_answer_may_have_arrived(service, file, capsys, monkeypatch):
    monkeypatch.setattr(submit_client, "REQUEST_TIMEOUT", 0.3)
    service.answer("POST", "/api/submissions", (1.5, 202, accepted(), {}))
    rc, _, err = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN)
    assert rc == 1
    assert "no answer within 0.3 s" in one_sentence(err)
    assert "may or may not have been accepted: run `history`" in err


def test_gives_up_waiting_after_the_timeout(service, file, capsys):
    service.answer("POST", "/api/submissions", (202, accepted(), {}))
    service.answer("GET", "/api/submissions/7", (200, submission(position=3), {}))
    started = time.monotonic()
    rc, out, err = run(capsys, "submit", file, "--timeout", "0.3", "--server", service.url, "--token", TOKEN)
    assert time.monotonic() - started < 5
    assert rc == 4
    assert "gave up waiting after 0.3 s; check #7 is still queued, position 3" in one_sentence(err)
    assert "`history 7`" in err
    assert "score:" not in out


def test_a_short_outage_while_waiting_is_ridden_out(service, file, capsys):
    service.answer("POST", "/api/submissions", (202, accepted(), {}))
    service.answer("GET", "/api/submissions/7", (200, submission(status="grading"), {}),
                   (503, b"Service Unavailable", {}), (503, b"Service Unavailable", {}), (200, done(), {}))
    rc, out, err = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines.count("grading (lost contact with the server; still trying)") == 1
    assert lines[-1] == "score: 85 / 100"


def test_a_long_outage_while_waiting_says_the_submission_is_kept(service, file, capsys, monkeypatch):
    monkeypatch.setattr(submit_client, "OUTAGE_SECONDS", 0.2)
    service.answer("POST", "/api/submissions", (202, accepted(), {}))
    service.answer("GET", "/api/submissions/7", (200, submission(status="grading"), {}), (502, b"", {}))
    rc, _, err = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN)
    assert rc == 1
    assert "HTTP 502" in one_sentence(err) and "check #7 was accepted and is kept" in err


# ---------------------------------------------------------------- status and history

def test_status(service, capsys):
    service.answer("GET", "/api/me", (200, {"student": "alice", "role": "student", "checks_left_this_hour": 2,
                                            "deadline": "2020-01-01T00:00:00+00:00",
                                            "assignment": "l1_paged_kv_write"}, {}))
    rc, out, err = run(capsys, "status", "--server", service.url, "--token", TOKEN)
    assert rc == 0, err
    assert out.splitlines() == ["signed in as: alice (student)", "assignment: l1_paged_kv_write",
                                "checks left this hour: 2", "deadline: 2020-01-01T00:00:00+00:00 (passed)"]


def test_status_with_a_deadline_ahead(service, capsys):
    ahead = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2 * 86400 + 3 * 3600 + 90))
    service.answer("GET", "/api/me", (200, {"student": None, "role": "instructor", "checks_left_this_hour": None,
                                            "deadline": ahead, "assignment": "l1"}, {}))
    rc, out, _ = run(capsys, "status", "--server", service.url, "--token", TOKEN)
    assert rc == 0
    assert "checks left this hour: no limit" in out
    assert f"deadline: {ahead} (in 2 d 3 h 1 min)" in out


def test_history_lists_newest_first_as_the_server_gave(service, capsys):
    listing = [done(id=9, kind="hand-in", late=True), submission(id=8, status="grading"),
               done(id=3, score=40.0)]
    service.answer("GET", "/api/submissions", (200, listing, {}))
    rc, out, err = run(capsys, "history", "--server", service.url, "--token", TOKEN)
    assert rc == 0, err
    assert out.splitlines() == ["#9  hand-in  2026-03-01T10:00:00+00:00  85 / 100  late",
                                "#8  check    2026-03-01T10:00:00+00:00  grading",
                                "#3  check    2026-03-01T10:00:00+00:00  40 / 100"]


def test_history_of_an_instructor_names_the_students(service, capsys):
    service.answer("GET", "/api/submissions", (200, [done(id=2, student="bob"), done(id=1)], {}))
    rc, out, _ = run(capsys, "history", "--server", service.url, "--token", TOKEN)
    assert rc == 0
    assert out.splitlines()[0].endswith("85 / 100  bob") and out.splitlines()[1].endswith("alice")


def test_history_of_one_submission_shows_its_report(service, capsys):
    service.answer("GET", "/api/submissions/3", (200, done(id=3, score=97.5), {}))
    rc, out, _ = run(capsys, "history", "3", "--server", service.url, "--token", TOKEN)
    assert rc == 0
    assert out.startswith("check #3: done\n## Write\n")
    assert out.splitlines()[-1] == "score: 97.5 / 100"


def test_empty_history(service, capsys):
    service.answer("GET", "/api/submissions", (200, [], {}))
    rc, out, _ = run(capsys, "history", "--server", service.url, "--token", TOKEN)
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

def test_the_projects_cli_runs_the_same_client(service, file, capsys):
    service.answer("POST", "/api/submissions", (202, accepted(), {}))
    service.answer("GET", "/api/submissions/7", (200, done(score=97.5), {}))
    service.answer("GET", "/api/me", (200, {"student": "alice", "role": "student", "checks_left_this_hour": 0,
                                            "deadline": None, "assignment": "l1"}, {}))
    rc, out, _ = run(capsys, "submit", file, "--server", service.url, "--token", TOKEN, entry=cli.main)
    assert rc == 0
    assert out.splitlines()[-1] == "score: 97.5 / 100"
    rc, out, _ = run(capsys, "submit-status", "--server", service.url, "--token", TOKEN, entry=cli.main)
    assert rc == 0 and "checks left this hour: 0" in out
    rc, _, err = run(capsys, "submit", "nothing.py", "--server", service.url, "--token", TOKEN, entry=cli.main)
    assert rc == 2 and "no file at nothing.py" in one_sentence(err)


def test_the_script_needs_only_the_standard_library(service, tmp_path):
    # -S: no site-packages, -I: nothing of the project on the path; what a student's bare Python has.
    service.answer("GET", "/api/me", (200, {"student": "alice", "role": "student", "checks_left_this_hour": 4,
                                            "deadline": None, "assignment": "l1"}, {}))
    proc = subprocess.run([sys.executable, "-I", "-S", str(CLIENT), "status", "--server", service.url,
                           "--token", TOKEN], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "checks left this hour: 4" in proc.stdout


def load_make_release():
    spec = importlib.util.spec_from_file_location("tool_make_release", REPO / "tools" / "make_release.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("make") or not shutil.which("python3"), reason="needs make and python3")
@pytest.mark.parametrize("target, kind", [("submit", "hand-in"), ("check", "check")])
def test_a_new_student_runs_make_in_the_release_bundle(service, tmp_path, target, kind):
    """The bundle as a student unpacks it: the token the instructor gave in .grader, then
    `make submit` / `make check` with the system's python3."""
    bundle = load_make_release().build(REPO / "assignment" / "l1_paged_kv_write", tmp_path / "release")
    (bundle / ".grader").write_text(f"server = {service.url}\ntoken = {TOKEN}\n")
    service.answer("POST", "/api/submissions", (202, accepted(kind=kind, position=1), {}))
    service.answer("GET", "/api/submissions/7", (200, submission(kind=kind, status="grading"), {}),
                   (200, done(kind=kind, score=97.5), {}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADER_", "PYTHON", "MAKE"))}
    env["HOME"] = str(tmp_path)
    proc = subprocess.run(["make", "-s", target], cwd=bundle, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{kind} #7 of l1_paged_kv_write.py accepted" in proc.stdout
    assert "## Write\n- 85 / 100: all cases right" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "score: 97.5 / 100"
    post = service.requests[0]
    assert post["path"] == f"/api/submissions?kind={kind}"
    assert post["body"] == (bundle / "l1_paged_kv_write.py").read_bytes()
    assert post["headers"]["Authorization"] == f"Bearer {TOKEN}"
