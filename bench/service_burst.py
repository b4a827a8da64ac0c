"""A burst of checks at the grading service, as a class sends them the night before the deadline.

    python bench/service_burst.py [--students 8] [--checks 3] [--jobs N] [--device auto]
                                  [--out build/service_burst.json]

Starts `python -m grader serve` on loopback for a fresh course, gives each student a token, and
sends students x checks checks at once: each student's files are reference copies and wrong
corpus entries, in turn. Then it checks and measures:
  - every report is its student's own (the report's sha256 is that of the bytes sent),
  - its score is the score `grade-all` gives the same file with the report's seed, all of the
    burst's files graded again in one `grade-all --seeds` at the same --jobs,
  - the time from submit to report (median, worst) and the gradings a minute.
Exit 0 when every check held.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.grading import report_reader  # noqa: E402
from grader.assignment import Assignment  # noqa: E402
from grader.validate.corpus import load_corpus  # noqa: E402
from grader.course.folder import Course  # noqa: E402
from grader.service.submit_client import Api, ClientError  # noqa: E402

POLL_S = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def files_for(assignment: Assignment, students: int, checks: int, mutants: Path) -> dict[str, list[bytes]]:
    """Each student's checks: reference copies and wrong entries in turn, every file distinct."""
    wrong = [e.file.read_bytes() for e in load_corpus(assignment, mutants=mutants)
             if e.kind == "wrong" and e.device is None]
    reference = assignment.reference.read_bytes()
    out, k = {}, 0
    for s in range(students):
        files = []
        for c in range(checks):
            base = reference if (s + c) % 2 == 0 else wrong[k % len(wrong)]
            k += (s + c) % 2
            files.append(base + f"\n# student {s} check {c}\n".encode())
        out[f"student{s:02d}"] = files
    return out


def start_service(course: Path, assignment: Assignment, device: str, jobs: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(course.parent / "serve.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "grader", "serve", "--course", str(course), "--assignment",
                             str(assignment.folder), "--device", device, "--jobs", str(jobs), "--port", str(port),
                             "--checks-per-hour", "0"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    said = (course.parent / "serve.log").read_text(errors="replace").strip().splitlines()[-15:]
    raise SystemExit("service_burst: the service did not start; the end of its log:\n" + "\n".join(said))


def send_and_wait(api: Api, data: bytes, out: dict, timeout_s: float) -> None:
    sent = time.monotonic()
    try:
        first, _ = api.call("POST", "/api/submissions?kind=check", data)
        sub_id = first["id"]
        while time.monotonic() - sent < timeout_s:
            state, _ = api.call("GET", f"/api/submissions/{sub_id}")
            if state["status"] in ("done", "error"):
                out.update(state=state, wait_s=time.monotonic() - sent)
                return
            time.sleep(POLL_S)
        out["problem"] = f"no report within {timeout_s:.0f} s"
    except ClientError as exc:
        out["problem"] = str(exc)


def send_all(url: str, tokens: dict[str, str], runs: list[dict], timeout_s: float) -> float:
    """Every run's check sent at once, each from its student's token, and waited for
    (send_and_wait fills each run); the wall seconds until the last answer."""
    t0 = time.monotonic()
    threads = [threading.Thread(target=send_and_wait, args=(Api(url, tokens[r["student"]]), r["data"], r, timeout_s))
               for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - t0


def graded_again(assignment: Assignment, runs: list[dict], device: str, jobs: int, work: Path) -> dict[str, float]:
    """{sha256: score} of one `grade-all --seeds` over every run's file with its report's seed,
    `jobs` at once as the service graded them."""
    course = work / "again"
    seeds = {}
    for i, r in enumerate(runs):
        if r.get("seed") is None:
            continue
        folder = course / "submitted" / f"run{i:03d}" / assignment.id
        folder.mkdir(parents=True)
        (folder / assignment.submission).write_bytes(r["data"])
        seeds[hashlib.sha256(r["data"]).hexdigest()] = r["seed"]
    if not seeds:
        return {}
    (work / "seeds.json").write_text(json.dumps(seeds))
    subprocess.run([sys.executable, "-m", "grader", "grade-all", "--course", str(course), "--assignment",
                    str(assignment.folder), "--device", device, "--jobs", str(jobs), "--seeds", str(work / "seeds.json"),
                    "--no-gradebook", "--no-progress"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    got = {}
    for student in Course(course, assignment).students():
        report = report_reader.read_or_none(Course(course, assignment).report_path(student))
        if report is not None:
            got[report_reader.sha256(report)] = float(report.get("score", 0.0))
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=8)
    ap.add_argument("--checks", type=int, default=3)
    ap.add_argument("--jobs", type=int, help="gradings at once, in the service and in the grade-all it is compared "
                                             "with (default: theirs, machines.default_jobs)")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one check may take from submit to report")
    ap.add_argument("--out", default="build/service_burst.json")
    args = ap.parse_args()
    from grader.gpu.machines import default_jobs, resolve_device
    device = resolve_device(args.device)
    assignment = Assignment.find(None)
    args.jobs = args.jobs or default_jobs(device, assignment.grading_gpu_bytes)
    work = Path(tempfile.mkdtemp(prefix="service-burst-"))
    course = work / "course"
    course.mkdir()
    try:
        files = files_for(assignment, args.students, args.checks, work)
        made = subprocess.run([sys.executable, "-m", "grader", "tokens", "--course", str(course), "--add", *files],
                              cwd=ROOT, capture_output=True, text=True)
        if made.returncode != 0:
            print(f"`grader tokens` failed (exit {made.returncode}):\n{made.stderr[-2000:]}", file=sys.stderr)
            return 1
        tokens = dict(line.split(" ", 1) for line in made.stdout.splitlines() if line.strip())
        proc, url = start_service(course, assignment, device, args.jobs)
        runs = [{"student": s, "data": d} for s, ds in files.items() for d in ds]
        try:
            wall = send_all(url, tokens, runs, args.timeout)
        finally:
            proc.terminate()
            proc.wait(timeout=120)
        print(f"{len(runs)} checks from {len(files)} students, --jobs {args.jobs}, {device}: {wall:.0f} s, "
              f"{60 * len(runs) / wall:.1f} gradings a minute", flush=True)
        for r in runs:
            r["problem"] = r.get("problem") or _own(r, work)
        t = time.monotonic()
        again = graded_again(assignment, runs, device, args.jobs, work)
        print(f"the same {len(again)} files through one grade-all --seeds: {time.monotonic() - t:.0f} s", flush=True)
        bad = 0
        for r in runs:
            if not r["problem"]:
                alone = again.get(hashlib.sha256(r["data"]).hexdigest())
                if alone is None or abs(alone - float(r["state"]["score"])) > 1e-6:
                    r["problem"] = f"grade-all with seed {r['seed']} gives {alone}, the service {r['state']['score']}"
            bad += bool(r["problem"])
            state = r.get("state") or {}
            print(f"  {r['student']}: {state.get('score')} / {state.get('max_score')} in {r.get('wait_s', 0):.0f} s"
                  + (f"  PROBLEM: {r['problem']}" if r["problem"] else ""), flush=True)
        waits = sorted(r["wait_s"] for r in runs if "wait_s" in r)
        summary = {"checks": len(runs), "students": len(files), "jobs": args.jobs, "device": device,
                   "wall_s": round(wall, 1), "gradings_per_minute": round(60 * len(runs) / wall, 2),
                   "wait_median_s": round(statistics.median(waits), 1) if waits else None,
                   "wait_worst_s": round(waits[-1], 1) if waits else None, "problems": bad}
        print("submit to report: median {wait_median_s} s, worst {wait_worst_s} s; {problems} problem(s)"
              .format(**summary))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"summary": summary, "runs": [
            {k: v for k, v in r.items() if k not in ("data", "state")} | {"score": (r.get("state") or {}).get("score")}
            for r in runs]}, indent=1))
        return 1 if bad else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _own(run: dict, work: Path) -> str | None:
    """Why this check's answer is not its own; None when it is (and run["seed"] is its seed)."""
    state = run["state"]
    if state["status"] != "done" or state.get("score") is None:
        return f"ended {state['status']}: {state.get('error')}"
    from grader.service.store import Store, default_url     # the API shows feedback; the report is in the store
    store = Store(default_url(work / "course"))
    try:
        report = store.report(state["id"]) or {}
    finally:
        store.close()
    if report_reader.sha256(report) != hashlib.sha256(run["data"]).hexdigest():
        return "the report is of another file"
    seed = (report.get("extra_data") or {}).get("instructor", {}).get("seed")
    if not isinstance(seed, int):
        return "the report has no seed"
    run["seed"] = seed
    return None


if __name__ == "__main__":
    sys.exit(main())
