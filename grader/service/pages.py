"""The web pages: the same service as the API, as server-rendered HTML with plain forms (no
script at all). A token typed into the login form starts a session (tokens.log_in): the cookie holds
the session's random id, never the token, HttpOnly and SameSite=Strict (Secure behind TLS), so no
page script could read it and no other site's form can post with it. Log-out ends the session, as
revoking the token does; it ends by itself a week after the student's deadline.

    /                   student: upload, checks left, place in the queue, history
                        instructor: every student's latest check and hand-in, the queue, links
    /submissions/<id>   one submission and its report (refreshes itself while it waits)
    /leaderboard        each student's best check, under a pseudonym (when [leaderboard] is enabled)
    /course/...         the instructor's: the class summary and what it links to, from the course folder
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import html
import json
import os
import stat
from pathlib import Path
from urllib.parse import urlsplit

import mistune
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartParser
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ..course.folder import SUMMARY
from . import counting, guard, intake, regrades, roster, tokens, views
from .intake import Service, filed_feedback
from .store import FILED
from .store import now
from .tokens import Identity, Refused

COOKIE = "grader_session"
FORM_OVERHEAD = 64 * 1024          # the multipart envelope around the file
COURSE_FOLDERS = (SUMMARY, "autograded", "feedback")
_markdown = mistune.create_markdown(escape=True, plugins=["table"])

CSS = """
body { font: 15px/1.5 system-ui, sans-serif; margin: 24px auto; max-width: 980px; color: #222; padding: 0 12px; }
header { display: flex; justify-content: space-between; align-items: baseline; border-bottom: 1px solid #ddd; }
h1 { font-size: 21px; margin: 0 0 8px; } h2 { font-size: 17px; margin-top: 26px; }
table { border-collapse: collapse; margin: 8px 0; } td, th { padding: 4px 10px; border-bottom: 1px solid #eee; text-align: left; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.box { border: 1px solid #ddd; border-radius: 6px; padding: 12px 16px; margin: 14px 0; background: #fafafa; }
.error { border-color: #d88; background: #fff4f4; color: #822; } .ok { color: #1a6b1a; }
.late { color: #a33; font-weight: 600; } .muted { color: #666; font-size: 13px; }
.status-error { color: #a33; } .status-done { color: #1a6b1a; } .status-queued, .status-grading { color: #946200; }
.feedback { border: 1px solid #ddd; padding: 4px 18px; border-radius: 6px; }
button { font: inherit; padding: 4px 14px; } input[type=password] { width: 26em; font: inherit; }
"""


# -- rendering ------------------------------------------------------------------------------
def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def layout(service: Service, title: str, body: str, who: Identity | None = None, status: int = 200,
           refresh: int | None = None) -> HTMLResponse:
    user = ""
    if who is not None:
        user = (f"<form method=post action=/logout><span class=muted>{_e(who.student or 'instructor')}</span> "
                "<button>Log out</button></form>")
    meta = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    page = (f"<!doctype html><html lang=en><head><meta charset=utf-8>{meta}<title>{_e(title)}</title>"
            f"<style>{CSS}</style></head><body><header><h1><a href=/ style='color:inherit;text-decoration:none'>"
            f"{_e(service.assignment.title)}</a></h1>{user}</header>{body}</body></html>")
    return HTMLResponse(page, status_code=status)


def plain_error(status: int, message: str) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><html><body><h1>{status}</h1><p>{_e(message)}</p>"
                        "<p><a href=/>Back</a></p></body></html>", status_code=status)


def _status(row: dict) -> str:
    if row["status"] == "queued" and row.get("position"):
        return f"<span class=status-queued>queued, position {row['position']}</span>"
    if row["status"] == "done":
        return f"<span class=status-done>{row['score']:.2f} / {row['max_score']:.2f}</span>"
    return f"<span class=status-{_e(row['status'])}>{_e(row['status'])}</span>"


def _late(row: dict) -> str:
    counts = " <span class=ok>counts</span>" if row.get("counts") else ""
    return (" <span class=late>late</span>" if row["late"] else "") + counts


def _history(service: Service, rows: list[dict], with_student: bool = False) -> str:
    if not rows:
        return "<p class=muted>Nothing submitted yet.</p>"
    head = "<th>#</th>" + ("<th>student</th>" if with_student else "") + "<th>kind</th><th>sent</th><th>result</th>"
    body = "".join(
        f"<tr><td><a href=/submissions/{r['id']}>{r['id']}</a></td>"
        + (f"<td>{_e(r['student'])}</td>" if with_student else "")
        + f"<td>{_e(r['kind'])}{_late(r)}</td><td>{_e(service.when(r['submitted_at']))}</td><td>{_status(r)}</td></tr>"
        for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _info(service: Service, who: Identity) -> str:
    parts = [f"Hand in <code>{_e(service.assignment.submission)}</code>."]
    deadline = service.deadline_for(who.student)
    closed = service.past_deadline(student=who.student)
    if deadline is not None:
        own = who.student is not None and deadline != service.deadline
        parts.append(("Your own deadline (an extension)" if own else "Deadline")
                     + f": <b>{_e(service.when(deadline))}</b>" + (
            " (passed: checks are closed; a hand-in now is late, and asks you to confirm)" if closed and who.student
            else " (passed)" if closed else "") + ".")
    if who.student is not None and service.checks_per_hour is not None and not closed:
        left, free_at = service.store.checks_left(who.student, service.checks_per_hour)
        parts.append(f"Checks left this hour: <b>{left}</b> of {service.checks_per_hour}"
                     + (f" (the next frees up at {_e(service.when(free_at))})" if free_at else "") + ".")
    return "<p>" + " ".join(parts) + "</p>"


def _upload_form(service: Service, who: Identity) -> str:
    closed = service.past_deadline(student=who.student)
    if closed:
        counted = service.store.counted(who.student)
        replaces = ("no hand-in of yours yet: this one would count" if counted is None else
                    f"it replaces your {'late' if counted['late'] else 'on-time'} hand-in #{counted['id']} of "
                    f"{service.when(counted['submitted_at'])} as the one that counts; that one stays kept")
        return ("<div class=box><form method=post action=/upload enctype=multipart/form-data>"
                "<p><input type=file name=file accept=.py required> <input type=hidden name=kind value=hand-in>"
                f"<label><input type=checkbox name=late value=yes> I hand this in late ({_e(replaces)})</label> "
                "<button>Hand in late</button></p><p class=muted>The deadline has passed: checks are closed, and a "
                "hand-in is marked late.</p></form></div>")
    return ("<div class=box><form method=post action=/upload enctype=multipart/form-data>"
            f"<p><input type=file name=file accept=.py required> "
            "<label><input type=radio name=kind value=check checked> check</label> "
            "<label><input type=radio name=kind value=hand-in> hand-in</label> "
            "<button>Send</button></p><p class=muted>A check grades your file with the hidden tests and changes "
            "nothing; a hand-in is what the course grades (every hand-in is kept; the latest counts). The file's "
            f"name does not matter: it is graded as <code>{_e(service.assignment.submission)}</code>.</p></form></div>")


def student_home(service: Service, who: Identity, message: str = "", status: int = 200) -> HTMLResponse:
    rows = service.store.listed(who.student)
    counted = service.store.counted(who.student)
    for r in rows:
        r["counts"] = counted is not None and r["id"] == counted["id"]
    waiting = [r for r in rows if r["status"] in ("queued", "grading")]
    queue = ""
    if waiting:
        queue = "<h2>In the queue</h2><ul>" + "".join(
            f"<li><a href=/submissions/{r['id']}>#{r['id']}</a> {_e(r['kind'])}: {_status(r)}</li>"
            for r in waiting) + "</ul>"
    links = "<p><a href=/leaderboard>Leaderboard</a></p>" if service.assignment.leaderboard else ""
    note = f"<div class='box error'>{_e(message)}</div>" if message else ""
    body = (note + _info(service, who) + _upload_form(service, who) + queue + "<h2>Your submissions</h2>"
            + _history(service, rows) + _student_regrades(service, who, counted) + links)
    return layout(service, "Submissions", body, who, status=status, refresh=5 if waiting else None)


def _student_regrades(service: Service, who: Identity, counted: dict | None) -> str:
    mine = service.store.regrades(who.student)
    if counted is None and not mine:
        return ""
    out = "<h2>Regrade requests</h2>"
    if counted is not None:
        out += (f"<form method=post action=/regrade class=box><p>Ask for a regrade of your hand-in that counts "
                f"(<a href=/submissions/{counted['id']}>#{counted['id']}</a>): say what you think was graded wrong."
                f"</p><p><textarea name=reason rows=3 cols=80 maxlength={regrades.MAX_TEXT} required></textarea></p>"
                "<p><button>Ask for a regrade</button></p></form>")
    for r in mine:
        answer = (f"<p><b>Answer</b> ({_e(service.when(r['answered_at']))}): {_e(r['answer'])}</p>" if r["answered_at"]
                  else "<p class=muted>Not answered yet.</p>")
        out += (f"<div class='box regrade'><p>Request #{r['id']} about hand-in #{r['submission_id']}, "
                f"{_e(service.when(r['asked_at']))}: {_e(r['reason'])}</p>{answer}</div>")
    return out


def _instructor_regrades(service: Service) -> str:
    rows = service.store.regrades()
    if not rows:
        return "<h2>Regrade requests</h2><p class=muted>None.</p>"
    out = "<h2>Regrade requests</h2>"
    for r in rows:
        report = service.course.read_report(r["student"])
        graded = "<span class=muted>no grade-all report yet</span>"
        if report is not None:
            sha = ((report.get("extra_data") or {}).get("submission") or {}).get("sha256")
            row = service.store.get(r["submission_id"])
            which = "of this hand-in" if row is not None and sha == row["sha256"] else "of another file"
            graded = f"grade-all's report {which}: {float(report.get('score', 0)):.2f} / {float(report.get('max_score', 0)):.2f}"
        head = (f"<p><b>#{r['id']}</b> {_e(r['student'])} about <a href=/submissions/{r['submission_id']}>hand-in "
                f"#{r['submission_id']}</a>, {_e(service.when(r['asked_at']))}: {_e(r['reason'])}</p>"
                f"<p class=muted>Regrade: <code>{_e(regrades.command(service, r['student']))}</code> · {graded}</p>")
        if r["answered_at"]:
            tail = f"<p><b>Answered</b> ({_e(service.when(r['answered_at']))}): {_e(r['answer'])}</p>"
        else:
            tail = (f"<form method=post action=/regrades/{r['id']}/answer><p><textarea name=answer rows=2 cols=80 "
                    f"maxlength={regrades.MAX_TEXT} required></textarea></p><p><button>Answer</button></p></form>")
        out += f"<div class='box regrade'>{head}{tail}</div>"
    return out


def _latest(row: dict | None) -> str:
    if row is None:
        return "<span class=muted>none</span>"
    return f"<a href=/submissions/{row['id']}>#{row['id']}</a> {_status(row)}{_late(row)}"


def class_roster(service: Service) -> list[dict]:
    return roster.rows(service.store, service.deadline, roster.gradebook_students(service.course.root))


def instructor_home(service: Service, who: Identity) -> HTMLResponse:
    order = service.store.queue()
    cells = []
    for r in class_roster(service):
        hand_in = r["hand_in"]
        counted = "<span class=muted>none</span>" if hand_in is None else (
            f"<a href=/submissions/{hand_in['id']}>#{hand_in['id']}</a> {_e(service.when(hand_in['submitted_at']))} "
            + ("<span class=late>late</span>" if hand_in["late"] else "on time") + f" · {_status(hand_in)}")
        token = {"yes": "", "revoked": " <span class=muted>(token revoked)</span>",
                 "no": " <span class=muted>(no token)</span>"}[r["token"]]
        deadline = _e(service.when(r["deadline"])) if r["deadline"] else "–"
        cells.append(f"<tr class=roster-row><td>{_e(r['student'])}{token}</td><td>{deadline}"
                     + (" <b>(extension)</b>" if r["extension"] else "") + f"</td><td>{_e(r['state'])}</td>"
                     f"<td>{_latest(r['check'])}</td><td>{counted}</td></tr>")
    students = ("<p><a href=/roster.csv>Download as CSV</a></p><table class=roster><tr><th>student</th>"
                "<th>deadline</th><th>state</th><th>latest check</th><th>hand-in that counts</th></tr>"
                + "".join(cells) + "</table>") if cells else "<p class=muted>No student has a token yet.</p>"
    queue = _history(service, order, with_student=True) if order else "<p class=muted>The queue is empty.</p>"
    summary = service.course.root / SUMMARY / "index.html"
    links = ("<p><a href=/course/summary/index.html>Class summary</a> (of the last grade-all)</p>" if summary.is_file()
             else "<p class=muted>No class summary yet: after grade-all, run <code>python -m grader summary --course "
                  "COURSE</code>; it is then linked here.</p>")
    if service.assignment.leaderboard:
        links += "<p><a href=/leaderboard>Leaderboard</a></p>"
    body = (_info(service, who) + links + "<h2>Students</h2>" + students + _instructor_regrades(service)
            + "<h2>Queue</h2>" + queue + _failed_logins(service))
    return layout(service, "Instructor", body, who, refresh=10 if order else None)


def _failed_logins(service: Service) -> str:
    rows = service.guard.counts()
    if not rows:
        return "<h2>Failed log-ins</h2><p class=muted>None since the service started.</p>"
    return ("<h2>Failed log-ins</h2><p class=muted>Since the service started, by source address; "
            f"{guard.FAILURES} within a minute limit an address for a minute.</p><table class=failed-logins><tr>"
            "<th>address</th><th>failed</th><th>limited</th><th>refused while limited</th><th>last failure</th></tr>"
            + "".join(f"<tr><td>{_e(r['address'])}</td><td class=num>{r['failures']}</td><td class=num>{r['limited']}"
                      + (f" (now, {r['blocked_s']} s left)" if r["blocked_s"] else "") + f"</td><td class=num>"
                      f"{r['refused']}</td><td>{_e(service.when(_utc_naive(r['last_failure'])))}</td></tr>"
                      for r in rows) + "</table>")


def _utc_naive(epoch: float | None) -> datetime.datetime | None:
    return None if epoch is None else datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).replace(tzinfo=None)


def submission_page(service: Service, who: Identity, sub_id: int) -> HTMLResponse:
    row = service.store.get(sub_id)
    if row is None or (who.student is not None and row["student"] != who.student):
        return layout(service, "Not found", "<p>No such submission.</p>", who, status=404)
    counted = service.store.counted(row["student"]) if row["kind"] == "hand-in" else None
    row["counts"] = counted is not None and counted["id"] == row["id"]
    facts = (f"<p>#{row['id']} · {_e(row['student'])} · {_e(row['kind'])}{_late(row)} · sent "
             f"{_e(service.when(row['submitted_at']))} · {_status(row)}</p>")
    body = facts + _receipt(service, row)
    if row["kind"] == "hand-in" and who.student is None and not row["counts"]:
        body += (f"<form method=post action=/submissions/{row['id']}/activate><p>This is not the hand-in that counts"
                 + (f" (#{counted['id']} is)" if counted else "") + ". <button>Make this the hand-in that counts"
                 "</button></p></form>")
    if row["status"] == "done":
        report = service.store.report(sub_id)
        text = views.shown(report, row["student"], service.assignment.visibility,
                           service.past_deadline(student=row["student"]))
        body += f"<div class=feedback>{_markdown(text)}</div>"
    elif row["status"] == "error":
        body += ("<div class='box error'>The grader failed on this submission twice, not because of the code in it. "
                 + ("What it said:</div><pre>" + _e((row["error"] or "")[-4000:]) + "</pre>" if who.student is None
                    else "Your instructor can see why. Sending it again later is safe.</div>"))
    elif row["status"] == FILED:
        body += f"<div class=box>{_e(filed_feedback(service, row))}</div>"
    else:
        body += "<p class=muted>This page refreshes itself until the report is in.</p>"
    if who.student is None and row["status"] == "done":
        body += _details(service.store.report(sub_id))
    if who.student is None:
        tried = service.store.gradings_of(sub_id)
        body += "<h2>Gradings</h2><table><tr><th>started</th><th>ended</th><th>outcome</th></tr>" + "".join(
            f"<tr><td>{_e(service.when(g['started_at']))}</td>"
            f"<td>{_e(service.when(g['ended_at']) if g['ended_at'] else '')}</td><td>{_e(g['outcome'] or 'running')}"
            "</td></tr>" for g in tried) + "</table>"
    waiting = row["status"] in ("queued", "grading")
    return layout(service, f"Submission {sub_id}", body, who, refresh=3 if waiting else None)


def _receipt(service: Service, row: dict) -> str:
    return (f"<p class=receipt>Receipt: sha256 <code>{_e(row['sha256'])}</code> · {row['size']} bytes · received "
            f"{_e(service.when(row['submitted_at']))} · <a href=/submissions/{row['id']}/file download>"
            "download exactly what was filed</a></p>")


def _details(report: dict | None) -> str:
    """What the hidden tests recorded for the instructor (record_property("detail", ...))."""
    instructor = ((report or {}).get("extra_data") or {}).get("instructor") or {}
    details, tests = instructor.get("details") or {}, instructor.get("tests") or {}
    if not details:
        return ""
    return ("<h2>What the hidden tests recorded</h2><p class=muted>For the instructor only: a student's page never "
            "shows it.</p><table><tr><th>#</th><th>test</th><th>detail</th></tr>" + "".join(
                f"<tr><td>{_e(n)}</td><td>{_e(tests.get(n, ''))}</td><td>{_e(d)}</td></tr>"
                for n, d in sorted(details.items())) + "</table>")


def pseudonym(secret: str, student: str) -> str:
    return "anon-" + hmac.new(secret.encode(), student.encode(), hashlib.sha256).hexdigest()[:6]


def board(service: Service) -> list[dict]:
    """Each student's best check (score first, then the first leaderboard column), best first."""
    columns = service.assignment.leaderboard
    first = columns[0] if columns else None
    best: dict[str, tuple] = {}
    for row in service.store.done_checks():
        values = {e.get("name"): e.get("value") for e in (json.loads(row["report"]).get("leaderboard") or [])}
        lead = values.get(first.name) if first else None
        key = (row["score"] or 0.0,
               float("-inf") if not isinstance(lead, (int, float)) else lead if first.order == "desc" else -lead)
        if row["student"] not in best or key > best[row["student"]][0]:
            best[row["student"]] = (key, row, values)
    ranked = sorted(best.values(), key=lambda b: b[0], reverse=True)
    return [{"student": r["student"], "score": r["score"], "max_score": r["max_score"], "values": v}
            for _, r, v in ranked]


def leaderboard_page(service: Service, who: Identity) -> HTMLResponse:
    if not service.assignment.leaderboard:
        return layout(service, "Leaderboard", "<p>This assignment has no leaderboard.</p>", who, status=404)
    secret = service.store.secret("leaderboard")
    cols = service.assignment.leaderboard
    head = "<th>rank</th><th>who</th><th>score</th>" + "".join(f"<th>{_e(c.name)}</th>" for c in cols)
    rows = []
    for rank, entry in enumerate(board(service), start=1):
        name = pseudonym(secret, entry["student"])
        if entry["student"] == who.student:
            name += " (you)"
        elif who.student is None:
            name += f" · {entry['student']}"
        vals = "".join(f"<td class=num>{_e(entry['values'].get(c.name, '–'))}</td>" for c in cols)
        rows.append(f"<tr><td class=num>{rank}</td><td>{_e(name)}</td>"
                    f"<td class=num>{entry['score']:.2f} / {entry['max_score']:.2f}</td>{vals}</tr>")
    table = f"<table><tr>{head}</tr>{''.join(rows)}</table>" if rows else "<p class=muted>No check graded yet.</p>"
    return layout(service, "Leaderboard", "<h2>Best check of each student</h2>" + table, who)


def login_page(service: Service, message: str = "", status: int = 200) -> HTMLResponse:
    note = f"<div class='box error'>{_e(message)}</div>" if message else ""
    body = (note + "<div class=box><form method=post action=/login><p>Your token (from your instructor):</p>"
            "<p><input type=password name=token autocomplete=off required> <button>Log in</button></p></form></div>")
    return layout(service, "Log in", body, status=status)


# -- handlers -------------------------------------------------------------------------------
def _service(request: Request) -> Service:
    return request.app.state.service


def _cookie_who(request: Request) -> Identity | None:
    return tokens.session_identity(_service(request).store, request.cookies.get(COOKIE))


def _same_origin(request: Request) -> bool:
    """A form posted from another site: the SameSite cookie already stays behind; this says so."""
    origin = request.headers.get("origin")
    return origin is None or origin == "null" or urlsplit(origin).netloc == request.headers.get("host")


def home(request: Request) -> Response:
    who = _cookie_who(request)
    if who is None:
        return login_page(_service(request))
    return student_home(_service(request), who) if who.student else instructor_home(_service(request), who)


async def login(request: Request) -> Response:
    service = _service(request)
    if not _same_origin(request):
        return plain_error(403, "a form from another site cannot log in here")
    form = await request.form(max_files=0, max_fields=2, max_part_size=4096)
    token = str(form.get("token") or "").strip()
    source = request.client.host if request.client else "unknown"

    def start() -> tuple[str, datetime.datetime]:
        who = service.identify(token, source)       # counts a failure, refuses a limited address
        expires = service.session_expiry(who.student)
        return tokens.log_in(service.store, token, expires)[1], expires
    try:
        session, expires = await run_in_threadpool(start)
    except Refused as exc:
        response = login_page(service, exc.message, status=exc.status)
        if isinstance(exc, intake.QuotaRefused):
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(COOKIE, session, httponly=True, samesite="strict", secure=request.url.scheme == "https",
                        max_age=max(60, int((expires - now()).total_seconds())))
    return response


async def logout(request: Request) -> Response:
    await run_in_threadpool(tokens.log_out, _service(request).store, request.cookies.get(COOKIE))
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(COOKIE, httponly=True, samesite="strict")
    return response


async def upload(request: Request) -> Response:
    service = _service(request)
    who = await run_in_threadpool(_cookie_who, request)
    if who is None:
        return login_page(service, "log in with your token first", status=401)
    if not _same_origin(request):
        return plain_error(403, "a form from another site cannot submit here")
    try:
        kind, data, late_ok = await _form_file(request)
        row = await run_in_threadpool(intake.submit, service, who, kind, data, late_ok)
    except Refused as exc:
        if who.student is None:
            return plain_error(exc.status, exc.message)
        return await run_in_threadpool(student_home, service, who, exc.message, exc.status)
    return RedirectResponse(f"/submissions/{row['id']}", status_code=303)


async def _form_file(request: Request) -> tuple[str | None, bytes, bool]:
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise Refused(400, "send the file from the page's form (multipart/form-data)")
    body = await intake.read_body(request, intake.MAX_UPLOAD + FORM_OVERHEAD)

    async def stream():
        yield body
    try:
        form = await MultiPartParser(request.headers, stream(), max_files=1, max_fields=4,
                                     max_part_size=4096).parse()
    except Exception:          # python-multipart's and Starlette's parse errors have no common base
        raise Refused(400, "the form could not be read: send it again from the page") from None
    file = form.get("file")
    if not isinstance(file, UploadFile):
        raise Refused(400, "no file was chosen")
    data = await file.read(intake.MAX_UPLOAD + 1)
    if len(data) > intake.MAX_UPLOAD:
        raise intake.too_large()
    kind, late = form.get("kind"), form.get("late")
    return (kind if isinstance(kind, str) else None), data, isinstance(late, str) and late.lower() in intake.YES


def submission(request: Request) -> Response:
    who = _cookie_who(request)
    if who is None:
        return login_page(_service(request), "log in with your token first", status=401)
    try:
        sub_id = int(request.path_params["id"])
    except ValueError:
        return plain_error(404, "no such submission")
    return submission_page(_service(request), who, sub_id)


async def _posted(request: Request, name: str) -> tuple[Identity, str]:
    who = await run_in_threadpool(_cookie_who, request)
    if who is None:
        raise Refused(401, "log in with your token first")
    if not _same_origin(request):
        raise Refused(403, "a form from another site cannot post here")
    try:
        form = await request.form(max_files=0, max_fields=2, max_part_size=8 * regrades.MAX_TEXT)
    except Exception:          # python-multipart's and Starlette's parse errors have no common base
        raise Refused(400, "the form could not be read: send it again from the page") from None
    value = form.get(name)
    return who, value if isinstance(value, str) else ""


async def ask_regrade(request: Request) -> Response:
    service = _service(request)
    try:
        who, reason = await _posted(request, "reason")
        await run_in_threadpool(regrades.ask, service, who, reason)
    except Refused as exc:
        who = await run_in_threadpool(_cookie_who, request)
        if who is None or who.student is None:
            return plain_error(exc.status, exc.message)
        return await run_in_threadpool(student_home, service, who, exc.message, exc.status)
    return RedirectResponse("/", status_code=303)


async def answer_regrade(request: Request) -> Response:
    service = _service(request)
    try:
        req_id = int(request.path_params["id"])
        who, text = await _posted(request, "answer")
        await run_in_threadpool(regrades.answer, service, who, req_id, text)
    except ValueError:
        return plain_error(404, "no such regrade request")
    except Refused as exc:
        return plain_error(exc.status, exc.message)
    return RedirectResponse("/", status_code=303)


def roster_csv(request: Request) -> Response:
    who = _cookie_who(request)
    if who is None or who.student is not None:
        return plain_error(403, "only the instructor sees the class")
    service = _service(request)
    text = roster.to_csv(class_roster(service), service.local)
    return Response(text, media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="roster-{service.assignment.id}.csv"'})


def submission_file(request: Request) -> Response:
    """What was filed, byte for byte: the student's own, or any for the instructor."""
    who = _cookie_who(request)
    if who is None:
        return login_page(_service(request), "log in with your token first", status=401)
    service = _service(request)
    try:
        row = service.store.get(int(request.path_params["id"]))
    except ValueError:
        row = None
    if row is None or (who.student is not None and row["student"] != who.student):
        return plain_error(404, "no such submission")
    return views.file_response(service, row)


async def activate(request: Request) -> Response:
    """The instructor makes this hand-in the one that counts (grade-all grades it)."""
    service = _service(request)
    who = await run_in_threadpool(_cookie_who, request)
    if who is None or who.student is not None:
        return plain_error(403, "only the instructor chooses which hand-in counts")
    if not _same_origin(request):
        return plain_error(403, "a form from another site cannot change this")
    try:
        sub_id = int(request.path_params["id"])
    except ValueError:
        return plain_error(404, "no such submission")
    row = await run_in_threadpool(service.store.get, sub_id)
    if row is None:
        return plain_error(404, "no such submission")
    try:
        await run_in_threadpool(counting.activate, service.course, service.store, row["student"], sub_id)
    except ValueError as exc:
        return plain_error(400, str(exc))
    return RedirectResponse(f"/submissions/{sub_id}", status_code=303)


def leaderboard(request: Request) -> Response:
    who = _cookie_who(request)
    if who is None:
        return login_page(_service(request), "log in with your token first", status=401)
    return leaderboard_page(_service(request), who)


def course_file(request: Request) -> Response:
    """A file of the course's summary/, autograded/ or feedback/ folder, for the instructor: the
    class summary's page links to reports and feedback by relative paths into the course."""
    who = _cookie_who(request)
    if who is None or who.student is not None:
        return plain_error(403, "only the instructor sees the course's files")
    root = _service(request).course.root.resolve()
    rel = request.path_params["path"]
    parts = Path(rel).parts
    if not parts or parts[0] not in COURSE_FOLDERS or any(p in ("..", ".") or p.startswith(".") for p in parts):
        return plain_error(404, "no such file")
    path = root.joinpath(*parts)
    try:
        # Nothing in the way may be a link: a student's folder could hold one pointing anywhere.
        for i in range(1, len(parts) + 1):
            if stat.S_ISLNK(os.lstat(root.joinpath(*parts[:i])).st_mode):
                return plain_error(404, "no such file")
        if not path.is_file():
            return plain_error(404, "no such file")
    except OSError:
        return plain_error(404, "no such file")
    media = {".md": "text/plain; charset=utf-8", ".json": "application/json", ".log": "text/plain; charset=utf-8"}
    return FileResponse(path, media_type=media.get(path.suffix))


def routes() -> list[Route]:
    return [
        Route("/", home, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/upload", upload, methods=["POST"]),
        Route("/submissions/{id}", submission, methods=["GET"]),
        Route("/submissions/{id}/file", submission_file, methods=["GET"]),
        Route("/submissions/{id}/activate", activate, methods=["POST"]),
        Route("/leaderboard", leaderboard, methods=["GET"]),
        Route("/roster.csv", roster_csv, methods=["GET"]),
        Route("/regrade", ask_regrade, methods=["POST"]),
        Route("/regrades/{id}/answer", answer_regrade, methods=["POST"]),
        Route("/course/{path:path}", course_file, methods=["GET"]),
    ]
