"""What one grading costs on a GPU, and how many a GPU grades a minute: the checks behind the
figures in docs/instructor.md ("What a grading costs on one H200, and where its time goes"), in
parts of under ten minutes each.

    python bench/h200_checks.py first  [--out DIR]   # a fresh machine's first gradings, one at a time
    python bench/h200_checks.py rate   [--copies 24] [--jobs N] [--out DIR]
    python bench/h200_checks.py matrix [--jobs N] [--only NAME ...] [--out DIR]   # validate over the corpus
    python bench/h200_checks.py service [--out DIR]   # one student's check on an empty service queue
    python bench/h200_checks.py start [--procs 1 7 21]   # processes starting at once: torch, CUDA, Triton
    python bench/h200_checks.py write [--out DIR]   # where the write area's seconds go, case by case
    python bench/h200_checks.py int64 [--out DIR]   # what the int64 tests cost a process's first time
    python bench/h200_checks.py calls [--out DIR]   # where one call through the sandbox goes

first:  the reference graded cold twice, alone, with the GPU's memory sampled every 50 ms
        (NVML): wall time, the report's phases, and the peak memory above the idle GPU.
rate:   N distinct reference copies through `grade-all` at the default number at once (or
        --jobs): gradings a minute, each area's seconds as a budget counts them (waits aside)
        and the sum of their maxima, scores, the performance ratios, how many were not
        measured, and the peak memory of the class.
matrix: `validate --device cuda` over every corpus entry at the default number at once: the kill
        matrix, the budget table and the class rate.
service: `bench/service_burst.py --students 1 --checks 1`: one check through a fresh service on
        loopback, submit to report, and its score against a lone grading with the same seed.
start:  N processes started at once (--procs 1 7 21), each importing torch, making a CUDA context
        and running Triton's first kernel in a fresh cache: what a class's first wave pays, by step.
write:  each case of the write area in one process, outside the sandbox, with a fresh Triton
        cache: building its inputs as the test does (and, beside it, drawing the two caches' contents
        on the CPU as the suite did before), the reference's first call (Triton's compile
        of that specialisation included), a second call, and the check of both caches.
calls:  one call through the sandbox on a warm worker of the reference, alone (staged tensors,
        shared ones, a call that raises), a fresh worker's first two calls, the VMM steps on
        their own, and a profile of the grader's side. Run it beside a `rate` for the same
        under load. It also runs on the CPU, as a dry run.
Each part prints its table and writes DIR/<part>.json; exit 1 when a check fails.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.busy_gpu import time_went, timing_windows, verdict  # noqa: E402
from grader.grading import report_reader  # noqa: E402
from grader.assignment import Assignment  # noqa: E402
from grader.course.folder import Course  # noqa: E402
from grader.validate.matrix import area_seconds, budgets_on  # noqa: E402

REFERENCE = ROOT / "reference" / "l1_paged_kv_write.py"


def cpu_ticks() -> tuple[int, int]:
    """(busy, all) jiffies of every core since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]                    # idle and iowait
    return sum(fields) - idle, sum(fields)


class MemorySampler:
    """A GPU's used memory every `every_s`, from NVML, while the block runs: its peak above
    what was used when it started; with the GPU's mean utilisation over the samples and the
    cores' mean busy fraction (is a class bound by the GPU or by the CPU?). `index`: NVML's
    index of the GPU (the first by default)."""

    def __init__(self, every_s: float = 0.05, index: int = 0):
        import pynvml
        pynvml.nvmlInit()
        self.nvml, self.every_s = pynvml, every_s
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.base = self.peak = self._used()
        self.gpu_busy: list[int] = []
        self.cpu_from = cpu_ticks()
        self.cpu_busy = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _used(self) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)

    def _run(self) -> None:
        while not self.done.wait(self.every_s):
            self.peak = max(self.peak, self._used())
            self.gpu_busy.append(int(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu))

    def __enter__(self) -> "MemorySampler":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        busy, total = (b - a for a, b in zip(self.cpu_from, cpu_ticks()))
        self.cpu_busy = round(busy / max(total, 1), 3)

    @property
    def gpu_busy_mean(self) -> float | None:
        """NVML's utilisation (the share of its sample periods a kernel ran), mean over the block."""
        return round(statistics.mean(self.gpu_busy) / 100, 3) if self.gpu_busy else None

    @property
    def peak_gib(self) -> float:
        return round((self.peak - self.base) / 2**30, 2)


def bounded(cmd: list[str], deadline_s: float, log: Path, env: dict[str, str] | None = None,
            grace_s: float = 0.0) -> subprocess.CompletedProcess:
    """Run cmd (in `env`, default ours), its output to `log`; past deadline_s its whole process
    group is killed (exit -9), so a part always reports what finished. With grace_s it is first
    asked to stop (SIGTERM: grade-all then ends its gradings, which run in sessions of their
    own) and killed only if still there grace_s later."""
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                env=env)
        try:
            code = proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            if grace_s:
                os.killpg(proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=grace_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = -9
            print(f"ended after its {deadline_s:g} s deadline", flush=True)
    text = log.read_text(errors="replace")
    return subprocess.CompletedProcess(cmd, code, stdout=text, stderr="")


def part_first(args, out: Path) -> dict:
    found = {"gradings": []}
    for i in range(2):
        report_path = out / f"first-{i}.json"
        with MemorySampler() as memory:
            t = time.monotonic()
            subprocess.run([sys.executable, "-m", "grader", "grade", "--submission", str(REFERENCE), "--report",
                            str(report_path), "--device", "cuda"], cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            wall = time.monotonic() - t
        report = report_reader.read_or_none(report_path) or {}
        ok, line = verdict(report)
        row = {"run": i, "ok": ok, "result": line, "wall_s": round(wall, 1), "peak_gib": memory.peak_gib,
               "phases": report_reader.phases(report) if report else {}, "areas_s": area_seconds(report),
               "timing": timing_windows([report])}
        found["gradings"].append(row)
        print(f"cold grading {i}: {'ok ' if ok else 'BAD'} {line}; wall {wall:.1f} s; peak {memory.peak_gib} GiB",
              flush=True)
        print(f"  phases {json.dumps(row['phases'])}", flush=True)
        print(f"  areas  {json.dumps(row['areas_s'])}", flush=True)
        print(f"  timing {json.dumps(row['timing'])}", flush=True)
    return found


def make_class(folder: Path, copies: int, assignment: Assignment) -> list[str]:
    students = []
    for i in range(copies):
        student = f"ref{i:02d}"
        target = folder / "submitted" / student / assignment.id
        target.mkdir(parents=True)
        (target / assignment.submission).write_text(REFERENCE.read_text() + f"\n# copy {i}\n")
        students.append(student)
    return students


def first_wave(reports: list[dict]) -> dict:
    """Where a slot's first grading went, mean seconds over those a host started for: the report's
    phases, the host's start (its steps) and the submission worker's start (its steps)."""
    firsts = [r for r in reports if (report_reader.instructor(r).get("test_process") or {}).get("host_start")]
    totals: dict[str, float] = {}
    for report in firsts:
        instructor = report_reader.instructor(report)
        steps = {**report_reader.phases(report),
                 **{f"host_{k}": v for k, v in instructor["test_process"]["host_start"].items()},
                 **((instructor.get("worker") or {}).get("timings") or {})}
        for key, value in steps.items():
            if isinstance(value, (int, float)):
                totals[key] = totals.get(key, 0.0) + float(value)
    return {"gradings": len(firsts), **{k: round(v / max(1, len(firsts)), 2) for k, v in sorted(totals.items())}}


def part_rate(args, out: Path) -> dict:
    assignment = Assignment.find(None)
    course = Path(tempfile.mkdtemp(prefix="rate-class-"))
    students = make_class(course, args.copies, assignment)
    cmd = [sys.executable, "-m", "grader", "grade-all", "--course", str(course), "--assignment",
           str(assignment.folder), "--device", "cuda"] + (["--jobs", str(args.jobs)] if args.jobs else [])
    with MemorySampler() as memory:
        t = time.monotonic()
        run = bounded(cmd, args.deadline, out / "rate-grade-all.log")
        wall = time.monotonic() - t
    reports = [report_reader.read_or_none(Course(course, assignment).report_path(s)) or {} for s in students]
    kept = out / "rate-reports"
    kept.mkdir(exist_ok=True)
    for student, report in zip(students, reports):
        (kept / f"{student}.json").write_text(json.dumps(report))
    done = [s for s, r in zip(students, reports) if r]
    print(f"{len(done)} of {len(students)} graded", flush=True)
    rows, seconds, ratios, unmeasured, bad = [], {}, [], 0, 0
    for student, report in zip(students, reports):
        ok, line = verdict(report)
        bad += not ok
        unmeasured += bool(report_reader.regrade(report))
        for area, s in area_seconds(report, without_waits=True).items():     # as a budget counts it
            seconds.setdefault(area, []).append(s)
        perf = [t for t in report.get("tests", []) if "performance" in t.get("tags", [])]
        ratios += [m for t in perf if (m := report_reader.test_detail(t).get("measure")) is not None]
        rows.append({"student": student, "ok": ok, "result": line})
        print(f"  {student}: {'ok ' if ok else 'BAD'} {line}", flush=True)
    rate = 60 * len(done) / wall
    per_area = {a: {"max": round(max(v), 2), "median": round(statistics.median(v), 2)} for a, v in seconds.items()}
    print(f"{len(done)} distinct reference copies in {wall:.0f} s: {rate:.1f} gradings a minute "
          f"(grade-all exit {run.returncode}; {(run.stdout.strip().splitlines() or [''])[-1][:200]})")
    print(f"class peak GPU memory above idle: {memory.peak_gib} GiB; not measured: {unmeasured} of {len(students)}")
    print(f"GPU busy (NVML, mean): {memory.gpu_busy_mean}; cores busy (mean of {os.cpu_count()}): {memory.cpu_busy}")
    budgets = budgets_on(assignment, "cuda")
    most = sum(v["max"] for a, v in per_area.items() if a in budgets)
    print("seconds per area, waits for neighbours aside (max, median): " + json.dumps(per_area))
    print(f"each budgeted area's most, summed: {most:.2f} s against budgets summing to {sum(budgets.values()):g} s")
    if ratios:
        print(f"performance ratio reference/reference: min {min(ratios):.3f} median {statistics.median(ratios):.3f} "
              f"max {max(ratios):.3f} over {len(ratios)} tests")
    print("where a grading's time went (mean s): " + json.dumps(time_went(reports)), flush=True)
    print("a slot's first grading (mean s): " + json.dumps(first_wave(reports)), flush=True)
    return {"wall_s": round(wall, 1), "rate_per_min": round(rate, 2), "gradings": len(students),
            "first_wave": first_wave(reports),
            "peak_gib": memory.peak_gib, "gpu_busy": memory.gpu_busy_mean, "cpu_busy": memory.cpu_busy,
            "not_measured": unmeasured, "bad": bad, "areas_s": per_area, "areas_most_sum_s": round(most, 2),
            "ratios": ratios, "rows": rows, "time_went": time_went(reports), "ok": bad == 0}


START_PROBE = r"""
import json, os, sys, tempfile, time
t0 = time.perf_counter(); steps = {}
import torch
steps["torch_s"] = time.perf_counter() - t0; t = time.perf_counter()
torch.empty(1, device="cuda"); torch.cuda.synchronize()
steps["cuda_s"] = time.perf_counter() - t; t = time.perf_counter()
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="start-probe-")
sys.path.insert(0, sys.argv[1])
import warmup
warmup.run()
steps["triton_s"] = time.perf_counter() - t
print(json.dumps(steps))
"""


def part_start(args, out: Path) -> dict:
    """N processes started at once, each importing torch, making a CUDA context and running
    Triton's first kernel (a fresh cache, as a worker's): what a class's first wave pays, by step."""
    found = {}
    for n in args.procs:
        t = time.monotonic()
        procs = [subprocess.Popen([sys.executable, "-c", START_PROBE, str(ROOT / "grader" / "sandbox")],
                                  stdout=subprocess.PIPE, text=True) for _ in range(n)]
        steps = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
        wall = time.monotonic() - t
        row = {k: {"mean": round(statistics.mean(x[k] for x in steps), 2), "max": round(max(x[k] for x in steps), 2)}
               for k in steps[0]}
        found[str(n)] = {"wall_s": round(wall, 2), **row}
        print(f"{n} at once: all done in {wall:.1f} s; " + json.dumps(row), flush=True)
    return found


# What every probe starts with: a fresh Triton cache (as a worker's), the hidden suite's folder
# and the project on the path, the reference imported as `ref`, and a CUDA context.
PROBE_HEAD = r"""
import importlib.util, json, os, sys, tempfile, time
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="probe-")
import torch
sys.path[:0] = [sys.argv[2], sys.argv[3]]
spec = importlib.util.spec_from_file_location("reference", sys.argv[1])
ref = importlib.util.module_from_spec(spec); spec.loader.exec_module(ref)
if torch.cuda.is_available():
    torch.empty(1, device="cuda")
"""


def run_probe(body: str, deadline_s: float) -> tuple[dict | None, float]:
    """A probe (PROBE_HEAD, then `body`) in a fresh process: the JSON of its last line, or None
    where it failed, and its seconds. What it wrote to stderr is printed."""
    t = time.monotonic()
    run = subprocess.run([sys.executable, "-c", PROBE_HEAD + body, str(REFERENCE),
                          str(ROOT / "tests" / "hidden" / "l1_paged_kv_write"), str(ROOT)],
                         capture_output=True, text=True, timeout=deadline_s)
    wall = time.monotonic() - t
    if run.stderr.strip():
        print(run.stderr[-9000:])
    if run.returncode != 0:
        return None, wall
    return json.loads(run.stdout.strip().splitlines()[-1]), wall


WRITE_PROBE = r"""
import test_write
from paged import compare_cache, randn

class Shared:   # the grader's shared allocator, without the worker on the other side
    def empty(self, shape, dtype):
        return torch.empty(shape, dtype=dtype, device="cuda")

rng = torch.Generator().manual_seed(1)
def step(fn):
    torch.cuda.synchronize(); t = time.perf_counter()
    out = fn(); torch.cuda.synchronize()
    return out, round(time.perf_counter() - t, 4)
rows = {}
for case, (dtype, H, D, bs, nb, T) in test_write.CASES.items():
    (kc, vc, key, value, slots), build = step(lambda: test_write._setup(rng, Shared(), "cuda", dtype, H, D, bs, nb, T))
    # the caches' contents drawn on the CPU and copied over, as the suite did before fill_random
    _, cpu_drawn = step(lambda: [gc.buf.copy_(randn(rng, gc.buf.shape, gc.buf.dtype)) for gc in (kc, vc)])
    kc.before, vc.before = kc.buf.clone(), vc.buf.clone()
    slots = slots.cuda()
    _, first = step(lambda: ref.reshape_and_cache(key, value, kc.cache, vc.cache, slots))
    _, second = step(lambda: ref.reshape_and_cache(key, value, kc.cache, vc.cache, slots))
    found, check = step(lambda: compare_cache("k_cache", kc, kc.expected(key, slots), slots, key, value)
                        + compare_cache("v_cache", vc, vc.expected(value, slots), slots, value, key))
    assert not found, found
    rows[case] = {"build": build, "caches_drawn_on_cpu": cpu_drawn, "first_call": first, "second_call": second, "check": check}
print(json.dumps(rows))
"""


def part_write(args, out: Path) -> dict:
    rows, wall = run_probe(WRITE_PROBE, args.deadline)
    if rows is None:
        return {"ok": False, "wall_s": round(wall, 1)}
    for case, row in rows.items():
        print(f"  {case}: " + json.dumps(row))
    sums = {k: round(sum(r[k] for r in rows.values()), 3) for k in next(iter(rows.values()))}
    print(f"{len(rows)} write cases, seconds in all: {json.dumps(sums)}; process {wall:.1f} s", flush=True)
    return {"ok": True, "wall_s": round(wall, 1), "sums": sums, "cases": rows}


INT64_PROBE = r"""
import cProfile, io, pstats
from pathlib import Path
from grader.sandbox.exchange import Exchange
import test_int64_overflow as t64

class Submission:   # the reference in this process: the worker's side is not what is probed
    reshape_and_cache = staticmethod(ref.reshape_and_cache)

shared = Exchange(Path(tempfile.mkdtemp(prefix="int64-probe-x-")), torch.device("cuda"), vmm=True)
small = [torch.zeros((4, 16, 32, 128), dtype=torch.float16, device="cuda") for _ in range(2)]
kv = torch.randn((3, 32, 128), device="cuda").half()
ref.reshape_and_cache(kv, kv, small[0], small[1], torch.tensor([0, 5, 17], device="cuda"))  # its compile, apart
torch.cuda.synchronize()
rows = {}
for rep in range(3):
    for name in ("test_offsets_past_2_32_land_in_their_rows", "test_offsets_between_2_31_and_2_32"):
        rng = torch.Generator().manual_seed(rep)
        prof = cProfile.Profile()
        t = time.perf_counter(); prof.enable()
        getattr(t64, name)(Submission, rng, shared, "cuda", lambda *a: None)
        torch.cuda.synchronize(); shared.release()
        prof.disable(); rows[f"{rep}:{name[:22]}"] = round(time.perf_counter() - t, 3)
        if rep == 0:
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
            print(name, file=sys.stderr); print(text.getvalue()[-3500:], file=sys.stderr)
print(json.dumps(rows))
"""


def part_int64(args, out: Path) -> dict:
    """Each int64_overflow test three times in one fresh process, with the grader's sparse caches
    and the reference called in-process (its compile apart): what a host's first session pays
    there and its later ones do not, with a profile of the first pass."""
    rows, wall = run_probe(INT64_PROBE, args.deadline)
    if rows is None:
        return {"ok": False, "wall_s": round(wall, 1)}
    print(f"int64 tests, seconds by pass: {json.dumps(rows)}; process {wall:.1f} s", flush=True)
    return {"ok": True, "wall_s": round(wall, 1), "tests": rows}


CALLS_PROBE = r"""
import cProfile, io, pstats
from pathlib import Path
from grader.assignment import Assignment
from grader.grading.workers import confinement_for, started
from grader.sandbox import vmm

DEV = "cuda" if torch.cuda.is_available() else "cpu"    # the CPU: a dry run of this probe
sync = torch.cuda.synchronize if DEV == "cuda" else (lambda: None)

a = Assignment.load(Path(sys.argv[3]) / "assignment" / "l1_paged_kv_write" / "assignment.toml")
conf = confinement_for(a, DEV, [], want_uid=True)
sub = started(a.reference, a, DEV, conf, {})
H, D, BS, NB, T = 4, 64, 16, 32, 12
g = torch.Generator(device=DEV).manual_seed(0)

def torch_made():      # as a test builds them: staged through fresh allocations at each call
    kc, vc = (torch.randn((NB, BS, H, D), device=DEV, generator=g).half() for _ in range(2))
    key, value = (torch.randn((T, H, D), device=DEV, generator=g).half() for _ in range(2))
    return key, value, kc, vc, torch.randperm(NB * BS, device=DEV, generator=g)[:T]

def shared_made():     # the grader's own allocations (sub.exchange): nothing staged
    x = sub.exchange
    kc, vc, key, value = (x.empty(s, torch.float16) for s in [(NB, BS, H, D)] * 2 + [(T, H, D)] * 2)
    slots = x.empty((T,), torch.int64); slots.copy_(torch.arange(T, device=DEV))
    return key, value, kc, vc, slots

def rejected():        # a cache that is not contiguous: the call raises
    key, value, kc, vc, slots = torch_made()
    return key, value, torch.randn((NB, BS, 2 * H, D), device=DEV).half()[:, :, :H], vc, slots

def one(fn, args, raises=False):   # seconds of one call; only a call meant to raise may raise
    sync(); t = time.perf_counter()
    try:
        fn(*args)
    except Exception:
        if not raises:
            raise
    return time.perf_counter() - t

table = torch.arange(64, device=DEV, dtype=torch.int32).reshape(4, 16)
seq = torch.tensor([0, 0, 1, 2, 3], device=DEV); pos = torch.tensor([0, 5, 9, 2, 7], device=DEV)
cases = {
    "slot_mapping, 5 tokens (3 tensors staged)": lambda: (sub.slot_mapping, (table, seq, pos, 16)),
    "reshape_and_cache, 5 tensors staged": lambda: (sub.reshape_and_cache, torch_made()),
    "reshape_and_cache, 5 shared tensors": lambda: (sub.reshape_and_cache, shared_made()),
    "reshape_and_cache raising (staged)": lambda: (sub.reshape_and_cache, rejected(), True),
}
for make in cases.values():           # the worker's import and the kernel's compile, apart
    one(*make())
sub.exchange.release()
rows = {}
for name, make in cases.items():
    times = []
    for _ in range(30):
        times.append(one(*make()))
        sub.exchange.release()
    times.sort()
    rows[name] = {"median_ms": round(1e3 * times[15], 2), "min_ms": round(1e3 * times[0], 2),
                  "max_ms": round(1e3 * times[-1], 2)}
prof = cProfile.Profile(); prof.enable()
for _ in range(30):
    one(*cases["reshape_and_cache, 5 tensors staged"]())
    sub.exchange.release()
prof.disable()
text = io.StringIO()
pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(22)
print(text.getvalue()[-6000:], file=sys.stderr)

def ms(fn, n=30):
    return round(1e3 * sorted(one(fn, ()) for _ in range(n))[n // 2], 3)

def alloc_close():
    vmm.Allocation(1 << 20, torch.cuda.current_device()).close()

def import_close():
    al = vmm.Allocation(1 << 20, torch.cuda.current_device())
    d = al.describe()
    im = vmm.Import([(o, n, os.dup(fd)) for (o, n, _), fd in zip(d["pieces"], al.fds)], d["nbytes"], d["size"],
                    torch.cuda.current_device())
    im.close(); al.close()

# A fresh worker's first calls: what the first test of a grading pays (int64_overflow's, on the
# GPU 0.4-7.6 s beside seven other gradings, 0.1-0.4 s for the test after it). Small tensors first,
# then two 100,000-block caches with a few windows backed, as int64_overflow makes them.
fresh = started(a.reference, a, DEV, confinement_for(a, DEV, [], want_uid=True), {})
fresh._ready_worker()
for label in ("first", "second"):
    rows[f"fresh worker, its {label} call, small (ms)"] = round(1e3 * one(fresh.reshape_and_cache, torch_made()), 2)
    fresh.exchange.release()
row = 32 * 128 * 2
windows = [(w * 256 * row, (w + 1) * 256 * row) for w in (3, 2100, 4400, 6000)]
for label in ("first", "second"):
    sync(); t = time.perf_counter()
    big = [fresh.exchange.zeros((100_000, 16, 32, 128), torch.float16, backed=windows) for _ in range(2)]
    sync(); made = time.perf_counter() - t
    kv = torch.randn((8, 32, 128), device=DEV, generator=g).half()
    slots = torch.tensor([5, 9, 2100 * 256 + 3, 2100 * 256 + 7, 4400 * 256, 4400 * 256 + 9, 6000 * 256 + 1, 6000 * 256 + 2],
                         device=DEV)
    rows[f"fresh worker, 100,000-block caches, {label} time: made (ms)"] = round(1e3 * made, 2)
    took = one(fresh.reshape_and_cache, (kv, kv, *big, slots))
    rows[f"fresh worker, 100,000-block caches, {label} time: call (ms)"] = round(1e3 * took, 2)
    del big
    fresh.exchange.release()
fresh.close(); fresh.conf.release()
if DEV == "cuda":
    rows["vmm: 1 MiB allocated, exported and freed (ms)"] = ms(alloc_close)
    rows["vmm: the same, and imported and unmapped once more (ms)"] = ms(import_close)
    rows["torch.cuda.synchronize, idle (ms)"] = ms(torch.cuda.synchronize)
sub.close(); conf.release()
print(json.dumps(rows))
"""


def part_calls(args, out: Path) -> dict:
    """Where one call through the sandbox goes, on a warm worker of the reference alone: a call with
    tensors staged as a test makes them, with the grader's shared tensors, and one that raises;
    a fresh worker's first and second calls, small and with int64_overflow's sparse caches; the
    VMM steps on their own; and a profile of the grader's side of the staged call."""
    rows, wall = run_probe(CALLS_PROBE, args.deadline)
    if rows is None:
        return {"ok": False, "wall_s": round(wall, 1)}
    for name, row in rows.items():
        print(f"  {name}: {json.dumps(row)}")
    print(f"process {wall:.1f} s", flush=True)
    return {"ok": True, "wall_s": round(wall, 1), "calls": rows}


def part_matrix(args, out: Path) -> dict:
    cmd = [sys.executable, "-m", "grader", "validate", "--device", "cuda", "--out", str(out / "matrix-validate.json")]
    cmd += ["--jobs", str(args.jobs)] if args.jobs else []
    cmd += ["--only", *args.only] if args.only else []
    with MemorySampler() as memory:
        t = time.monotonic()
        run = bounded(cmd, args.deadline, out / "matrix.log")
        wall = time.monotonic() - t
    print(run.stdout[-12000:])
    matrix = json.loads((out / "matrix-validate.json").read_text()) if (out / "matrix-validate.json").exists() else {}
    n = len(matrix.get("rows", matrix.get("entries", []))) if matrix else 0
    print(f"validate exit {run.returncode}; {n} entries in {wall:.0f} s ({60 * n / wall:.1f} a minute); "
          f"peak GPU memory above idle {memory.peak_gib} GiB; GPU busy {memory.gpu_busy_mean}, "
          f"cores busy {memory.cpu_busy}", flush=True)
    return {"exit": run.returncode, "wall_s": round(wall, 1), "entries": n, "peak_gib": memory.peak_gib,
            "ok": run.returncode == 0}


def part_service(args, out: Path) -> dict:
    cmd = [sys.executable, "bench/service_burst.py", "--students", "1", "--checks", "1", "--device", "cuda",
           "--out", str(out / "service-burst.json")]
    run = bounded(cmd, args.deadline, out / "service.log")
    print(run.stdout[-4000:])
    found = json.loads((out / "service-burst.json").read_text()) if (out / "service-burst.json").exists() else {}
    summary = found.get("summary", {})
    wait = summary.get("wait_worst_s")
    print(f"one check on an empty queue: submit to report {wait} s; exit {run.returncode}", flush=True)
    return {"exit": run.returncode, "submit_to_report_s": wait, "ok": run.returncode == 0 and wait is not None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=["first", "rate", "matrix", "service", "start", "write", "int64", "calls"])
    ap.add_argument("--copies", type=int, default=24)
    ap.add_argument("--jobs", type=int, help="gradings at once (default: grade-all's and validate's own)")
    ap.add_argument("--out", default="build/h200")
    ap.add_argument("--only", nargs="+", help="matrix: only these corpus entries (as validate --only)")
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 7, 21], help="start: processes started at once")
    ap.add_argument("--deadline", type=float, default=540, help="seconds the part's command may take")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    found = {"first": part_first, "rate": part_rate, "matrix": part_matrix, "service": part_service,
             "start": part_start, "write": part_write, "int64": part_int64,
             "calls": part_calls}[args.part](args, out)
    (out / f"{args.part}.json").write_text(json.dumps(found, indent=1))
    ok = found["ok"] if "ok" in found else all(g["ok"] for g in found.get("gradings", []))
    print("every check passed" if ok else "a check failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
