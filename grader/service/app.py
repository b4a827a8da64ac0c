"""The HTTP API (the contract the student client follows) and the Starlette application that
carries it beside the web pages (pages.py).

Every handler that touches the database is a plain function, which Starlette runs in its
thread pool: the event loop only reads requests and writes answers, so a status request never
waits behind another request's query or a grading being stored. Errors are JSON
{"error": sentence} with their status; nothing a client sends gets a traceback back.
"""
from __future__ import annotations

import contextlib
import json
import logging

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import intake, pages, regrades, roster, views
from .intake import QuotaRefused, Service, filed_feedback
from .limits import HEAD_TOO_LARGE, MAX_HEAD
from .store import FILED, iso
from .tokens import Identity, Refused, bearer

log = logging.getLogger("grader.service")


def error(status: int, message: str, headers: dict | None = None, **extra) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


def refused(exc: Refused) -> JSONResponse:
    if isinstance(exc, QuotaRefused):
        return error(429, exc.message, {"Retry-After": str(exc.retry_after_s)}, retry_after_seconds=exc.retry_after_s)
    return error(exc.status, exc.message)


def receipt(service: Service, row: dict) -> dict:
    """What was filed: enough to prove later which bytes were accepted, and when."""
    return {"sha256": row["sha256"], "size": row["size"], "submitted_at": iso(row["submitted_at"]),
            "submitted_at_local": service.local(row["submitted_at"]), "file_url": f"/api/submissions/{row['id']}/file"}


def public(service: Service, row: dict, who: Identity, report: dict | None) -> dict:
    """A submission as the API shows it to `who`."""
    out = {key: row[key] for key in ("id", "student", "kind", "status", "position", "late", "score", "max_score")}
    out.update(receipt(service, row))
    out["finished_at"] = iso(row["finished_at"])
    out["finished_at_local"] = service.local(row["finished_at"])
    if "counts" in row:
        out["counts"] = row["counts"]
    out["feedback"] = None
    out["error"] = None
    if row["status"] == FILED:
        # Done as far as the client is concerned: nothing more will come of it before grade-all.
        out["status"] = "done"
        out["feedback"] = filed_feedback(service, row)
    elif row["status"] == "done" and report is not None:
        out["feedback"] = views.shown(report, row["student"], service.assignment.visibility,
                                      service.past_deadline(student=row["student"]))
    elif row["status"] == "error":
        out["error"] = (row["error"] or "").strip()[-4000:] if who.student is None else (
            "the grader failed on this submission twice, not because of your code; your instructor can see why. "
            "Submitting again later is safe")
    return out


def address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _who(service: Service, request: Request) -> Identity:
    return service.identify(bearer(request.headers.get("authorization")), address(request))


def api(handler):
    """A JSON endpoint: Refused becomes its status and sentence."""
    async def endpoint(request: Request) -> Response:
        service: Service = request.app.state.service
        try:
            return await handler(service, request)
        except Refused as exc:
            return refused(exc)
    return endpoint


@api
async def post_submission(service: Service, request: Request) -> Response:
    who = await run_in_threadpool(_who, service, request)
    kind = request.query_params.get("kind")
    if kind not in intake.KINDS:
        raise Refused(400, intake.kind_refused(kind))
    data = await intake.read_body(request, intake.MAX_UPLOAD)
    wrapped = intake.not_the_file(service.assignment.submission, request.headers.get("content-type"), data)
    if wrapped is not None:
        raise wrapped
    late_ok = (request.query_params.get("late") or "").lower() in intake.YES
    row = await run_in_threadpool(intake.submit, service, who, kind, data, late_ok)
    answer = {"id": row["id"], "kind": row["kind"], "status": row["status"], "position": row["position"],
              "late": row["late"], **receipt(service, row)}
    if row["kind"] == "hand-in":
        answer["counts"] = True
        before = row["replaces"]
        answer["replaces"] = None if before is None else {
            "id": before["id"], "sha256": before["sha256"], "late": before["late"],
            "submitted_at": iso(before["submitted_at"]), "submitted_at_local": service.local(before["submitted_at"])}
    return JSONResponse(answer, status_code=202)


def _file(service: Service, request: Request) -> Response:
    """Exactly the bytes that were filed, under the assignment's file name."""
    who = _who(service, request)
    row = _owned(service, who, request)
    return views.file_response(service, row)


def _owned(service: Service, who: Identity, request: Request) -> dict:
    try:
        sub_id = int(request.path_params["id"])
    except ValueError:
        raise Refused(404, "no such submission") from None
    row = service.store.get(sub_id)
    # Another student's id answers as an unknown one: a student never learns it exists.
    if row is None or (who.student is not None and row["student"] != who.student):
        raise Refused(404, "no such submission")
    return row


def _one(service: Service, request: Request) -> Response:
    who = _who(service, request)
    row = _owned(service, who, request)
    if row["kind"] == "hand-in":
        row["counts"] = (service.store.counted(row["student"]) or {}).get("id") == row["id"]
    report = service.store.report(row["id"]) if row["status"] == "done" else None
    return JSONResponse(public(service, row, who, report))


def _mine(service: Service, request: Request) -> Response:
    who = _who(service, request)
    rows = service.store.listed(who.student)
    counts = {r["id"] for r in service.store.counted_all().values()}
    for r in rows:
        if r["kind"] == "hand-in":
            r["counts"] = r["id"] in counts
    reports = {r["id"]: service.store.report(r["id"]) for r in rows if r["status"] == "done"}
    return JSONResponse([public(service, r, who, reports.get(r["id"])) for r in rows])


def _me(service: Service, request: Request) -> Response:
    who = _who(service, request)
    closed = who.student is not None and service.past_deadline(student=who.student)
    left = service.store.checks_left(who.student, service.checks_per_hour)[0] if who.student and not closed else None
    deadline = service.deadline_for(who.student)
    return JSONResponse({"student": who.student, "role": who.role, "checks_left_this_hour": left,
                         "deadline": iso(deadline), "deadline_local": service.local(deadline),
                         "past_deadline": service.past_deadline(student=who.student),
                         "timezone": str(service.tz), "assignment": service.assignment.id})


def _queue(service: Service, request: Request) -> Response:
    who = _who(service, request)
    if who.student is not None:
        raise Refused(403, "only the instructor sees the whole queue; your own place is in /api/submissions")
    return JSONResponse([{k: r[k] for k in ("id", "student", "kind", "status", "position")}
                         for r in service.store.queue()])


def _roster(service: Service, request: Request) -> Response:
    who = _who(service, request)
    if who.student is not None:
        raise Refused(403, "only the instructor sees the class")
    from .pages import class_roster
    return JSONResponse([dict(roster.flat(r), deadline_local=service.local(r["deadline"]))
                         for r in class_roster(service)])


async def _json_field(request: Request, name: str):
    data = await intake.read_body(request, regrades.MAX_TEXT * 8)
    try:
        value = json.loads(data.decode("utf-8")).get(name)
    except (UnicodeDecodeError, ValueError, AttributeError):
        raise Refused(400, f'send JSON: {{"{name}": "one or a few sentences"}}') from None
    return value


@api
async def post_regrade(service: Service, request: Request) -> Response:
    who = await run_in_threadpool(_who, service, request)
    reason = await _json_field(request, "reason")
    row = await run_in_threadpool(regrades.ask, service, who, reason)
    return JSONResponse(regrades.public(service, row), status_code=201)


@api
async def post_regrade_answer(service: Service, request: Request) -> Response:
    who = await run_in_threadpool(_who, service, request)
    try:
        req_id = int(request.path_params["id"])
    except ValueError:
        raise Refused(404, "no such regrade request") from None
    text = await _json_field(request, "answer")
    row = await run_in_threadpool(regrades.answer, service, who, req_id, text)
    return JSONResponse(regrades.public(service, row))


def _regrades(service: Service, request: Request) -> Response:
    who = _who(service, request)
    return JSONResponse([regrades.public(service, r) for r in service.store.regrades(who.student)])


def threaded(fn):
    @api
    async def handler(service: Service, request: Request) -> Response:
        return await run_in_threadpool(fn, service, request)
    return handler


async def not_found(request: Request, exc: HTTPException) -> Response:
    if request.url.path.startswith("/api/"):
        return error(exc.status_code, "no such endpoint" if exc.status_code == 404 else
                     f"{request.method} is not accepted here" if exc.status_code == 405 else str(exc.detail))
    return pages.plain_error(exc.status_code, str(exc.detail))


async def crashed(request: Request, exc: Exception) -> Response:
    log.exception("request %s %s failed", request.method, request.url.path)
    message = "the service failed on this request; it was logged for the instructor"
    if request.url.path.startswith("/api/"):
        return error(500, message)
    return pages.plain_error(500, message)


def create(service: Service, on_shutdown=()) -> Starlette:
    routes = [
        Route("/api/submissions", post_submission, methods=["POST"]),
        Route("/api/submissions", threaded(_mine), methods=["GET"]),
        Route("/api/submissions/{id}", threaded(_one), methods=["GET"]),
        Route("/api/submissions/{id}/file", threaded(_file), methods=["GET"]),
        Route("/api/me", threaded(_me), methods=["GET"]),
        Route("/api/queue", threaded(_queue), methods=["GET"]),
        Route("/api/roster", threaded(_roster), methods=["GET"]),
        Route("/api/regrade-requests", post_regrade, methods=["POST"]),
        Route("/api/regrade-requests", threaded(_regrades), methods=["GET"]),
        Route("/api/regrade-requests/{id}/answer", post_regrade_answer, methods=["POST"]),
        *pages.routes(),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        for fn in on_shutdown:
            await run_in_threadpool(fn)

    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found, Exception: crashed},
                    lifespan=lifespan, middleware=[Middleware(HeadLimit)])
    app.state.service = service
    return app


class HeadLimit:
    """Headers over MAX_HEAD in all get 431 and a sentence. h11 refuses a head over its limit only
    while it is still arriving (protocol.py answers that case); one that came in whole is met here."""
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and sum(len(k) + len(v) + 4 for k, v in scope["headers"]) > MAX_HEAD:
            await error(431, HEAD_TOO_LARGE)(scope, receive, send)
            return
        await self.app(scope, receive, send)
