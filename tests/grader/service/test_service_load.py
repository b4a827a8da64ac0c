"""A class at once: 50 students send 4 checks each within a minute. Every one is accepted or
refused with 429, every accepted one gets its own report, and status requests answer within
200 ms at the 99th percentile while the gradings run. Loopback only, bounded in time."""
import hashlib
import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy as sa

import pytest

import service_server as svc
from grader.service import store as tables

STUDENTS = 50
CHECKS = 4
QUOTA = 1              # 50 gradings: what two CPU cores grade in about two minutes
SOURCES = {0: ((svc.TOY / "submissions/good.py").read_bytes(), 90.0),
           1: ((svc.TOY / "submissions/no_echo.py").read_bytes(), 60.0)}


@pytest.mark.slow
@pytest.mark.serial(reason="measures status latency (p99 < 200 ms): a test on the other core would be measured with it")
def test_fifty_students_four_checks_each(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    names = [f"st{i:02d}" for i in range(STUDENTS)]
    toks = svc.tokens(course, "--add", *names)
    server = svc.start(course, "--jobs", "2", "--checks-per-hour", str(QUOTA))
    sent: dict[str, list[tuple[bytes, object]]] = {n: [] for n in names}
    latencies: list[float] = []
    accepted: list[tuple[str, int]] = []
    lock = threading.Lock()
    stop = threading.Event()
    refused: list[tuple[int, int, object]] = []     # status requests not answered 200: failed below

    def student(i: int) -> None:
        name = names[i]
        source, _ = SOURCES[i % 2]
        for k in range(CHECKS):
            data = svc.unique(source, f"{name} check {k}")
            answer = server.submit(toks[name], data)
            with lock:
                sent[name].append((data, answer))
                if answer.status == 202:
                    accepted.append((name, answer.body["id"]))
            time.sleep(random.uniform(0, 0.5))

    def poll() -> None:
        while not stop.is_set():
            with lock:
                pick = random.choice(accepted) if accepted else None
            if pick is None:
                time.sleep(0.05)
                continue
            t0 = time.perf_counter()
            answer = server.request("GET", f"/api/submissions/{pick[1]}", toks[pick[0]])
            elapsed = time.perf_counter() - t0
            with lock:
                latencies.append(elapsed)
                if answer.status != 200:
                    refused.append((pick[1], answer.status, answer.body))
            time.sleep(0.02)

    pollers = [threading.Thread(target=poll) for _ in range(2)]
    t0 = time.monotonic()
    try:
        for p in pollers:
            p.start()
        with ThreadPoolExecutor(max_workers=10) as pool:
            list(pool.map(student, range(STUDENTS)))
        sending_s = time.monotonic() - t0
        results = {sub_id: server.wait(toks[name], sub_id, timeout=400) for name, sub_id in accepted}
        graded_s = time.monotonic() - t0
    finally:
        stop.set()
        for p in pollers:
            p.join()
        server.stop()

    assert not refused, f"{len(refused)} status requests not answered 200, the first: {refused[0]}"
    assert sending_s < 60, f"sending took {sending_s:.0f} s"
    for name, answers in sent.items():
        statuses = [a.status for _, a in answers]
        assert set(statuses) <= {202, 429}, (name, statuses)
        assert statuses.count(202) == QUOTA, (name, statuses)
        for _, a in answers:
            if a.status == 429:
                assert int(a.headers["retry-after"]) > 0 and "next one can be sent at" in a.body["error"]
    engine = sa.create_engine(tables.default_url(course))
    with engine.connect() as c:
        stored = {r.id: r for r in c.execute(sa.select(tables.submissions.c.id, tables.submissions.c.student,
                                                       tables.submissions.c.report))}
    engine.dispose()
    for i, name in enumerate(names):
        data = next(d for d, a in sent[name] if a.status == 202)
        sub_id = next(a.body["id"] for d, a in sent[name] if a.status == 202)
        got = results[sub_id]
        assert got["status"] == "done" and got["student"] == name and got["score"] == SOURCES[i % 2][1], got
        assert got["feedback"].startswith(f"# Feedback for {name}\n")
        report = json.loads(stored[sub_id].report)
        assert report["extra_data"]["submission"]["sha256"] == hashlib.sha256(data).hexdigest()
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)]
    print(f"\nload: {len(accepted)} accepted of {STUDENTS * CHECKS}, sent in {sending_s:.1f} s, all graded in "
          f"{graded_s:.0f} s; {len(latencies)} status requests, p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms")
    assert len(latencies) >= 200
    assert p99 < 0.2, f"status p99 {p99 * 1000:.0f} ms"
