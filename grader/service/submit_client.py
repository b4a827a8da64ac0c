"""Send a submission to the course's grading service and show what it says.

    python submit.py submit FILE [--hand-in] [--report OUT]   a check (default) or the hand-in
    python submit.py status                                   who you are, checks left, the deadline
    python submit.py history [ID]                             your submissions; with ID, that report
    python submit.py download ID [-o FILE]                    exactly the bytes the service filed as #ID
    python submit.py regrade "REASON"                         ask for a regrade of your hand-in that counts
    python submit.py regrade                                  your regrade requests and their answers

The server and your token come from --server/--token, else from the environment
(GRADER_SERVER, GRADER_TOKEN), else from a file `.grader` in this folder or in your
home folder holding lines `server = https://...` and `token = ...`.

Exit status: 0 once a report came back; 1 the server refused the submission, could
not be reached or the grading failed; 2 a problem on this side (settings, the file);
3 over the hourly quota of checks; 4 gave up waiting for the report.

Only Python's standard library is used, so this one file can be copied anywhere Python 3 runs.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

SERVER_ENV = "GRADER_SERVER"
TOKEN_ENV = "GRADER_TOKEN"
DOTFILE = ".grader"
MAX_BYTES = 1024 * 1024             # the server's limit: refusing here spares the student a round trip
REQUEST_TIMEOUT = 30.0              # seconds for one HTTP exchange
POLL_SECONDS = 1.0
# A service restarting (or a proxy blinking) while we wait is not the end of the submission,
# which the server keeps; only an outage this long is reported as one.
OUTAGE_SECONDS = 120.0
TERMINAL = ("done", "error")
RETRYABLE_STATUS = (502, 503, 504)

EXIT_OK, EXIT_REFUSED, EXIT_LOCAL, EXIT_QUOTA, EXIT_GAVE_UP = 0, 1, 2, 3, 4


class ClientError(Exception):
    """One sentence for the student, and the exit status that goes with it."""

    def __init__(self, message: str, code: int = EXIT_REFUSED):
        super().__init__(message)
        self.code = code


class Unreachable(ClientError):
    """The server gave no HTTP answer at all (or a gateway said it is down)."""

    def __init__(self, message: str, maybe_arrived: bool = False):
        super().__init__(message)
        self.maybe_arrived = maybe_arrived      # the request went out whole; only its answer is missing


# ---------------------------------------------------------------- settings

def read_dotfile(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientError(f"cannot read {path}: {_reason(exc)}", EXIT_LOCAL) from None
    found = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        key = key.strip().lower()
        # A misspelt key would otherwise surface later as "no token", far from its cause.
        if not eq or key not in ("server", "token"):
            raise ClientError(f"{path} line {number}: expected `server = URL` or `token = TOKEN`, "
                              f"found {line[:60]!r}", EXIT_LOCAL)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1].strip()
        found[key] = value
    return found


def settings(args) -> tuple[str, str]:
    """The server and token: command line over environment over ./.grader over ~/.grader."""
    dot: dict[str, str] = {}
    for folder in (Path.home(), Path.cwd()):            # the later one wins, key by key
        dot.update(read_dotfile(folder / DOTFILE))
    chosen = {}
    for key, flag, env in (("server", args.server, SERVER_ENV), ("token", args.token, TOKEN_ENV)):
        value = next((v.strip() for v in (flag, os.environ.get(env), dot.get(key)) if v and v.strip()), None)
        if value is None:
            example = "https://grader.example.edu" if key == "server" else "THE-TOKEN-YOU-WERE-GIVEN"
            raise ClientError(f"no {key} given: pass --{key} {example}, set {env}, or put a line "
                              f"`{key} = {example}` in {DOTFILE} in this folder or in your home folder",
                              EXIT_LOCAL)
        chosen[key] = value
    token = chosen["token"]
    # A token pasted through a word processor gains curly quotes or spaces, which no header can carry.
    if not all(33 <= ord(c) < 127 for c in token):
        raise ClientError("the token holds spaces or characters that no token has: copy it again exactly "
                          "as your instructor gave it", EXIT_LOCAL)
    server = chosen["server"].rstrip("/")
    parts = urllib.parse.urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClientError(f"the server {server!r} is not an address like https://grader.example.edu "
                          f"(it must start with http:// or https://)", EXIT_LOCAL)
    return server, token


# ---------------------------------------------------------------- HTTP

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # Following one would turn the POST into a GET and carry the token to wherever it points.
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(reason)


class Api:
    def __init__(self, server: str, token: str):
        self.server = server
        self.token = token

    def call(self, method: str, path: str, body: bytes | None = None, as_json: bool = True,
             content_type: str = "text/x-python") -> tuple[object, bytes]:
        """The answer's JSON (None with as_json=False) and its raw bytes; any failure becomes one ClientError."""
        url = self.server + path
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with _OPENER.open(request, timeout=REQUEST_TIMEOUT) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc) from None
        except urllib.error.URLError as exc:
            raise self._unreachable(exc.reason) from None
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from None
        except UnicodeError:            # a server name that is not a valid host name
            raise ClientError(f"the server {self.server!r} is not a valid address", EXIT_LOCAL) from None
        if not as_json:
            return None, raw
        try:
            return json.loads(raw.decode("utf-8")), raw
        except (UnicodeDecodeError, ValueError):
            raise ClientError(f"{self.server} answered {path} with something that is not JSON: "
                              f"is this the grading service's address?") from None

    def _unreachable(self, reason) -> Unreachable:
        host = urllib.parse.urlsplit(self.server).netloc
        timed_out = isinstance(reason, (TimeoutError, socket.timeout)) or "timed out" in str(reason)
        hung_up = isinstance(reason, http.client.RemoteDisconnected)
        if isinstance(reason, socket.gaierror):
            why = f"the name {urllib.parse.urlsplit(self.server).hostname!r} is not known (check the address)"
        elif isinstance(reason, ConnectionRefusedError):
            why = "nothing is listening there (is the service running, and is the port right?)"
        elif isinstance(reason, (BrokenPipeError, ConnectionResetError)):
            why = "it closed the connection without answering"
        elif timed_out:
            why = f"no answer within {REQUEST_TIMEOUT:g} s"
        else:
            why = _reason(reason)
        return Unreachable(f"could not reach the grading service at {host}: {why}", timed_out or hung_up)

    def _refusal(self, exc: urllib.error.HTTPError) -> ClientError:
        try:
            payload = json.loads(exc.read().decode("utf-8"))
        except (OSError, http.client.HTTPException, UnicodeDecodeError, ValueError):
            payload = None
        said = payload.get("error") if isinstance(payload, dict) else None
        said = said.strip().rstrip(".") if isinstance(said, str) and said.strip() else None
        status = exc.code
        if 300 <= status < 400:
            where = exc.headers.get("Location", "another address")
            return ClientError(f"the server redirects to {where}: set the server to that address "
                               f"(often the https:// one)")
        if status == 401:
            return ClientError(f"the server does not accept this token: {said}" if said else
                               "the server does not accept this token: check the token your instructor gave you")
        if status == 403:
            # 403 is both a revoked token and a check after the deadline: the server's sentence says which.
            return ClientError(f"refused: {said}" if said else
                               "refused (HTTP 403): this token has been revoked or may not do this; "
                               "ask your instructor")
        if status == 429:
            wait = exc.headers.get("Retry-After")
            if wait is None and isinstance(payload, dict):
                wait = payload.get("retry_after_seconds")
            after = f" (retry after {wait} s)" if wait is not None else ""
            return ClientError(f"{said or 'too many checks this hour'}{after}", EXIT_QUOTA)
        if status in RETRYABLE_STATUS:
            return Unreachable(f"the grading service is not available right now (HTTP {status}"
                               f"{': ' + said if said else ''})")
        return ClientError(said or f"the server answered HTTP {status} ({exc.reason}) without saying why")


# ---------------------------------------------------------------- output

def format_score(submission: dict) -> str:
    score, top = submission.get("score"), submission.get("max_score")
    if isinstance(score, (int, float)) and isinstance(top, (int, float)):
        return f"score: {score:g} / {top:g}"
    # The service gives no score only for a hand-in filed over the hour's gradings: graded after
    # the deadline, as its feedback says.
    return "score: not graded yet"


def describe(state: dict) -> str:
    status = state.get("status")
    if status == "queued":
        position = state.get("position")
        return f"queued, position {position}" if isinstance(position, int) else "queued"
    return str(status)


class Progress:
    """One line per change of state; on a terminal the line is rewritten in place."""

    def __init__(self, stream):
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.shown = None
        self.width = 0

    def show(self, text: str) -> None:
        if text == self.shown:
            return
        self.shown = text
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def end(self) -> None:
        if self.tty and self.shown is not None:
            self.stream.write("\n")
            self.stream.flush()
        self.shown, self.width = None, 0


def print_report(submission: dict, out) -> None:
    feedback = submission.get("feedback")
    if isinstance(feedback, str) and feedback.strip():
        out.write(feedback.rstrip("\n") + "\n\n")
    if submission.get("late"):
        out.write("note: this hand-in was made after the deadline and is marked late\n")
    out.write(format_score(submission) + "\n")


def _label(submission: dict) -> str:
    return f"{submission.get('kind', 'submission')} #{submission.get('id')}"


# ---------------------------------------------------------------- commands

def read_submission(path: Path) -> bytes:
    if not os.path.lexists(path):
        raise ClientError(f"no file at {path}", EXIT_LOCAL)
    if path.is_dir():
        raise ClientError(f"{path} is a folder: give the .py file to submit", EXIT_LOCAL)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ClientError(f"{path} is {size:,} bytes; the service takes files up to 1 MiB "
                              f"({MAX_BYTES:,} bytes)", EXIT_LOCAL)
        data = path.read_bytes()
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {_reason(exc)}", EXIT_LOCAL) from None
    if len(data) > MAX_BYTES:                           # it grew between stat and read
        raise ClientError(f"{path} is over 1 MiB; the service takes files up to 1 MiB", EXIT_LOCAL)
    if not data.strip():
        raise ClientError(f"{path} is empty", EXIT_LOCAL)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ClientError(f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8", EXIT_LOCAL) from None
    return data


def _check_report_path(report: Path | None) -> None:
    # Found out before a check is spent, not after the grading.
    if report is None:
        return
    if report.is_dir():
        raise ClientError(f"--report {report} is a folder; give a file path", EXIT_LOCAL)
    if not report.parent.is_dir():
        raise ClientError(f"--report {report}: the folder {report.parent} does not exist", EXIT_LOCAL)


def grader_failed(submission: dict) -> ClientError:
    # The service's sentence already tells a student it was the grader, not their code.
    why = submission.get("error")
    if isinstance(why, str) and why.strip():
        return ClientError(f"the grading of {_label(submission)} failed: {why.strip()}")
    return ClientError(f"the grading of {_label(submission)} failed in the grader, not in your code; "
                       "your instructor sees it too")


def _expect_submission(data, what: str) -> dict:
    if not isinstance(data, dict) or not isinstance(data.get("id"), int) or "status" not in data:
        raise ClientError(f"the server's answer to {what} is not a submission (no id or status)")
    return data


def wait_for(api: Api, first: tuple[dict, bytes], timeout: float, progress: Progress,
             hint: str = "history") -> tuple[dict, bytes]:
    """Poll until the grading ends; the last state and its raw JSON."""
    try:
        return _poll(api, first, timeout, progress, hint)
    finally:
        progress.end()          # an error sentence must not land at the end of the progress line


def _poll(api: Api, first: tuple[dict, bytes], timeout: float, progress: Progress, hint: str) -> tuple[dict, bytes]:
    state, raw = first
    deadline = time.monotonic() + timeout
    outage_since = None
    progress.show(describe(state))
    while state.get("status") not in TERMINAL:
        if time.monotonic() >= deadline:
            raise ClientError(f"gave up waiting after {timeout:g} s; {_label(state)} is still "
                              f"{describe(state)}: see it later with `{hint} {state['id']}`", EXIT_GAVE_UP)
        time.sleep(POLL_SECONDS)
        try:
            data, raw = api.call("GET", f"/api/submissions/{state['id']}")
        except Unreachable as exc:
            now = time.monotonic()
            outage_since = outage_since or now
            if now - outage_since >= OUTAGE_SECONDS or now >= deadline:
                raise ClientError(f"{exc}; {_label(state)} was accepted and is kept: see it later with "
                                  f"`{hint} {state['id']}`") from None
            progress.show(f"{describe(state)} (lost contact with the server; still trying)")
            continue
        outage_since = None
        state = _expect_submission(data, f"submission #{state['id']}")
        progress.show(describe(state))
    return state, raw


def cmd_submit(api: Api, args) -> int:
    path = Path(args.file)
    report = Path(args.report) if args.report else None
    _check_report_path(report)
    data = read_submission(path)
    kind = "hand-in" if args.hand_in else "check"
    if args.late and not args.hand_in:
        raise ClientError("--late goes with --hand-in: after the deadline only a hand-in is accepted", EXIT_LOCAL)
    try:
        accepted, raw = api.call("POST", f"/api/submissions?kind={kind}" + ("&late=yes" if args.late else ""), data)
    except Unreachable as exc:
        if exc.maybe_arrived:
            # The upload may have arrived: sending it again could spend a second check.
            raise ClientError(f"{exc}; the {kind} may or may not have been accepted: run `{args.history_hint}` "
                              f"before sending it again") from None
        raise
    accepted = _expect_submission(accepted, "the upload")
    late = " (after the deadline: marked late)" if accepted.get("late") else ""
    print(f"{_label(accepted)} of {path.name} accepted{late}", flush=True)
    if accepted.get("sha256"):
        print(receipt(accepted), flush=True)
    replaced = accepted.get("replaces")
    if isinstance(replaced, dict):
        print(f"it is now the hand-in that counts, in place of #{replaced.get('id')} of "
              f"{replaced.get('submitted_at_local') or replaced.get('submitted_at')} (kept)", flush=True)
    final, raw = wait_for(api, (accepted, raw), args.timeout, Progress(sys.stdout), args.history_hint)
    written = None
    if report is not None:
        try:
            report.write_bytes(raw)
            written = report
        except OSError as exc:
            written = exc
    if final.get("status") == "error":
        raise grader_failed(final)
    print_report(final, sys.stdout)
    if isinstance(written, OSError):
        raise ClientError(f"could not write the report to {report}: {_reason(written)}", EXIT_LOCAL)
    return EXIT_OK


def receipt(submission: dict) -> str:
    """The receipt the service gave: which bytes it filed, and when."""
    when = submission.get("submitted_at_local") or submission.get("submitted_at") or "?"
    utc = submission.get("submitted_at")
    beside = f" ({utc} UTC)" if utc and utc != when else ""
    return (f"receipt: sha256 {submission.get('sha256', '?')}, {submission.get('size', '?')} bytes, received "
            f"{when}{beside}")


def cmd_download(api: Api, args) -> int:
    one, _ = api.call("GET", f"/api/submissions/{args.id}")
    one = _expect_submission(one, f"submission #{args.id}")
    _, data = api.call("GET", f"/api/submissions/{args.id}/file", as_json=False)
    import hashlib
    digest = hashlib.sha256(data).hexdigest()
    if one.get("sha256") and digest != one.get("sha256"):
        raise ClientError(f"the bytes received for #{args.id} do not match its receipt's sha256: try again")
    out = Path(args.output) if args.output else None
    if out is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        try:
            out.write_bytes(data)
        except OSError as exc:
            raise ClientError(f"could not write {out}: {_reason(exc)}", EXIT_LOCAL) from None
        print(f"wrote {out}: {receipt(one)}", file=sys.stderr)
    return EXIT_OK


def cmd_regrade(api: Api, args) -> int:
    if args.reason:
        body = json.dumps({"reason": " ".join(args.reason)}).encode("utf-8")
        made, _ = api.call("POST", "/api/regrade-requests", body, content_type="application/json")
        if not isinstance(made, dict):
            raise ClientError("the server's answer to the regrade request is not what the grading service sends")
        print(f"regrade request #{made.get('id')} about hand-in #{made.get('submission_id')} sent; "
              f"its answer will show in `{args.history_hint.replace('history', 'regrade')}`")
        return EXIT_OK
    listing, _ = api.call("GET", "/api/regrade-requests")
    if not isinstance(listing, list):
        raise ClientError("the server's answer to /api/regrade-requests is not a list")
    if not listing:
        print("no regrade requests yet")
    for item in (i for i in listing if isinstance(i, dict)):
        print(f"#{item.get('id')}  hand-in #{item.get('submission_id')}  {item.get('asked_at_local') or item.get('asked_at')}"
              f"  {item.get('status')}: {item.get('reason')}")
        if item.get("answer"):
            print(f"    answer: {item.get('answer')}")
    return EXIT_OK


def _when(iso) -> str:
    if not isinstance(iso, str):
        return "none"
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    if moment.tzinfo is None:
        return iso
    left = (moment - datetime.now(timezone.utc)).total_seconds()
    if left <= 0:
        return f"{iso} (passed)"
    days, rest = divmod(int(left), 86400)
    return f"{iso} (in {f'{days} d ' if days else ''}{rest // 3600} h {rest % 3600 // 60} min)"


def cmd_status(api: Api, args) -> int:
    me, _ = api.call("GET", "/api/me")
    if not isinstance(me, dict):
        raise ClientError("the server's answer to /api/me is not what the grading service sends")
    who = me.get("student") or "(no student)"
    left = me.get("checks_left_this_hour")
    print(f"signed in as: {who} ({me.get('role', 'student')})")
    print(f"assignment: {me.get('assignment', '?')}")
    if me.get("past_deadline") and me.get("role") == "student":
        print("checks: closed (the deadline has passed; a hand-in needs --late)")
    else:
        print(f"checks left this hour: {left if left is not None else 'no limit'}")
    print(f"deadline: {_when(me.get('deadline_local') or me.get('deadline'))}")
    return EXIT_OK


def cmd_history(api: Api, args) -> int:
    if args.id is not None:
        data, raw = api.call("GET", f"/api/submissions/{args.id}")
        one = _expect_submission(data, f"submission #{args.id}")
        print(f"{_label(one)}: {describe(one)}")
        if one.get("status") == "error":
            raise grader_failed(one)
        if one.get("status") == "done":
            print_report(one, sys.stdout)
        return EXIT_OK
    listing, _ = api.call("GET", "/api/submissions")
    if not isinstance(listing, list):
        raise ClientError("the server's answer to /api/submissions is not a list")
    items = [item for item in listing if isinstance(item, dict)]
    if not items:
        print("no submissions yet")
    # An instructor's token lists every student's; only then is the name worth a column.
    several = len({item.get("student") for item in items}) > 1
    for item in items:
        score = format_score(item)[len("score: "):] if item.get("status") == "done" else describe(item)
        who = f"  {item.get('student')}" if several else ""
        late = ("  late" if item.get("late") else "") + ("  counts" if item.get("counts") else "")
        when = item.get("submitted_at_local") or item.get("submitted_at", "?")
        print(f"#{item.get('id')}  {item.get('kind', '?'):<7}  {when}  {score}{late}{who}")
    return EXIT_OK


# ---------------------------------------------------------------- entry points

def add_parsers(sub, prefix: str = "") -> None:
    """Register submit, status and history; the project's CLI names the last two with a prefix,
    as its own namespace has other commands."""
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--server", help=f"the service's address (default ${SERVER_ENV}, or {DOTFILE})")
    connection.add_argument("--token", help=f"your token (default ${TOKEN_ENV}, or {DOTFILE})")
    s = sub.add_parser("submit", parents=[connection], help="send a file as a check (or --hand-in) and "
                       "wait for its report")
    s.add_argument("file", help="the .py file to send")
    s.add_argument("--hand-in", action="store_true", help="the official hand-in (default: a check)")
    s.add_argument("--late", action="store_true", help="after the deadline: hand in anyway, marked late (it "
                   "replaces your on-time hand-in as the one that counts; the service says which)")
    s.add_argument("--report", help="also write the final submission, as JSON, to this file")
    s.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the report (default 1800)")
    s.set_defaults(run=cmd_submit, history_hint=prefix + "history")
    st = sub.add_parser(prefix + "status", parents=[connection],
                        help="who the token belongs to, checks left this hour, the deadline")
    st.set_defaults(run=cmd_status)
    h = sub.add_parser(prefix + "history", parents=[connection], help="your submissions, newest first")
    h.add_argument("id", nargs="?", type=int, help="show this submission's report")
    h.set_defaults(run=cmd_history)
    d = sub.add_parser(prefix + "download", parents=[connection], help="exactly what the service filed as one "
                       "submission (its receipt's sha256 is checked)")
    d.add_argument("id", type=int, help="the submission's number (see history)")
    d.add_argument("-o", "--output", help="write it to this file (default: standard output)")
    d.set_defaults(run=cmd_download)
    r = sub.add_parser(prefix + "regrade", parents=[connection], help="ask, with a sentence, for a regrade of your "
                       "hand-in that counts; without one, your requests and their answers")
    r.add_argument("reason", nargs="*", help="what you think was graded wrong, in a sentence")
    r.set_defaults(run=cmd_regrade, history_hint=prefix + "history")


def run(args) -> int:
    """Run a parsed command; every failure is one line on stderr."""
    try:
        server, token = settings(args)
        return args.run(Api(server, token), args)
    except ClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("\ninterrupted; anything accepted stays on the server: see `history`", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    # Feedback may hold characters a C-locale terminal cannot show; better a '?' than a traceback.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    ap = argparse.ArgumentParser(prog=Path(sys.argv[0]).name if __name__ == "__main__" else "submit.py",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_parsers(ap.add_subparsers(dest="command", required=True))
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
