"""A class on every GPU of a host: does grade-all use them all, does its rate grow with them, and
does a busy GPU cost anyone a point? The checks behind docs/instructor.md's "Every GPU of a host".

    python bench/every_gpu.py [--copies 24 | --copies-per-gpu N] [--no-corpus] [--busy]
                              [--runs one all busy] [--jobs-per-gpu J] [--deadline 270] [--out DIR]

The class: N distinct reference copies (default 24) and, unless --no-corpus, the corpus's wrong
and right entries that apply on the GPU (grader/validate/corpus.py), interleaved so that a run its
deadline cuts short has graded a like share of each. Each run grades a fresh copy of it with
`python -m grader grade-all --device cuda`, within --deadline seconds, stopping it and letting its
processes leave the GPUs included (a run stopped counts what finished):
  one:  on the first visible GPU alone (CUDA_VISIBLE_DEVICES=<it>);
  all:  on every visible GPU, with grade-all's own slots (grader/gpu/machines.py);
  busy: (--busy) on every visible GPU again, with a copy loop (grader/gpu/load.py) on the last.
Per run it prints and writes: gradings a minute; per GPU how many gradings ran on it (each
report's extra_data.instructor.gpu), its peak memory above idle (NVML, every 50 ms), how many
were not measured (regrade), how many reference copies lost a point (bench/busy_gpu.verdict),
and the mean wait for the GPU's turn and for a quiet GPU.
Checks (exit 1 when one fails): the one-GPU run stayed on its GPU; every GPU used; all-GPU rate
>= 0.9 x GPUs x one-GPU rate; the kill matrix (each corpus entry's lost areas) the same on one
GPU and on all, for the entries both runs graded (an area not measured, or a right entry's
curve area, does not count as a difference); no reference copy lost a point; and with --busy:
no grading lost a point to the load, the other GPUs' gradings were measured as usual, and each
copy graded on the loaded GPU was not measured or waited for a quiet GPU.
On a one-GPU machine "one" and "all" are the same GPU: the all run is not made and the checks
that need two GPUs say they are skipped. Each run fits a 10-minute call at the default deadline;
--runs picks the runs to make now, and the checks read the runs an earlier call left in DIR
(on the same GPUs). Writes DIR/every_gpu.json and DIR/run-<name>.json (default build/every_gpu).
The rate check wants several gradings per slot: with all GPUs' slots far above the class, the
all-GPU run is one wave and its rate says more about start-up (--copies-per-gpu 24 keeps the
share of each GPU the same as one GPU's).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.busy_gpu import time_went, verdict  # noqa: E402
from bench.h200_checks import MemorySampler, bounded, make_class  # noqa: E402
from grader.gpu import load as gpu_load, machines  # noqa: E402
from grader.grading import report_reader  # noqa: E402
from grader.assignment import Assignment  # noqa: E402
from grader.validate.corpus import Entry, load_corpus  # noqa: E402
from grader.course.folder import Course  # noqa: E402

EPS = 1e-6
STOP_S = 15.0           # a run past its deadline: how long grade-all may take to end its gradings,
SETTLE_S = 15.0         # and then its processes to leave the GPUs; both inside the run's deadline


# -- the GPUs ------------------------------------------------------------------------------
def gpu_table() -> list[dict]:
    """The visible GPUs in CUDA's order: `id` as a slot's CUDA_VISIBLE_DEVICES names it
    (machines.visible_gpus), its uuid (asked of torch in a child process, so that this one holds
    no CUDA context), NVML's index, name and memory."""
    import pynvml
    ids = machines.visible_gpus()
    code = ("import json, torch; print(json.dumps([str(getattr(torch.cuda.get_device_properties(i), 'uuid', '') or '')"
            " for i in range(torch.cuda.device_count())]))")
    got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    lines = got.stdout.strip().splitlines()
    uuids = json.loads(lines[-1]) if got.returncode == 0 and lines else []
    pynvml.nvmlInit()
    nvml_of = {}
    for k in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(k)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        nvml_of[uuid.decode() if isinstance(uuid, bytes) else uuid] = k
    table = []
    for i, gpu in enumerate(ids):
        uuid = machines.device_uuid(type("Props", (), {"uuid": uuids[i] if i < len(uuids) else ""}))
        index = nvml_of.get(uuid)
        if index is None and gpu.isdigit() and not uuids:
            index = int(gpu)            # torch could not say: CUDA's order taken for NVML's
        row = {"id": gpu, "uuid": uuid or None, "nvml_index": index, "name": None, "memory_gib": None}
        if index is not None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            row["name"] = name.decode() if isinstance(name, bytes) else name
            row["memory_gib"] = round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30, 1)
        table.append(row)
    return table


def slot_plan(env: dict[str, str] | None, jobs: int | None) -> dict[str, int]:
    """Slots per GPU as grade-all plans them in `env` (grader/gpu/machines.py), asked of a child
    process: this one's CUDA saw every GPU when it started."""
    code = ("import collections, json, sys; from grader.gpu import machines; from grader.assignment import Assignment; "
            "b = Assignment.find(None).grading_gpu_bytes; j = int(sys.argv[1]) or machines.default_jobs('cuda', b); "
            "print(json.dumps(collections.Counter(e.get('CUDA_VISIBLE_DEVICES', '?') for e in machines.slots('cuda', j, b))))")
    got = subprocess.run([sys.executable, "-c", code, str(jobs or 0)], cwd=ROOT, env=env, capture_output=True, text=True)
    lines = got.stdout.strip().splitlines()
    return json.loads(lines[-1]) if got.returncode == 0 and lines else {}


def which_gpu(report: dict, table: list[dict]) -> str:
    """The id of the GPU the report says the grading ran on, or "?" (an older grader, no record)."""
    gpu = report_reader.gpu(report)
    if not isinstance(gpu, dict):
        return "?"
    for row in table:
        if gpu.get("uuid") and gpu["uuid"] == row["uuid"]:
            return row["id"]
    return next((row["id"] for row in table if gpu.get("visible") == row["id"]), "?")


def settle(table: list[dict], keep: set[int] = frozenset(), limit_s: float = SETTLE_S) -> str | None:
    """Wait until no process but `keep` holds a context on any of the GPUs: what a stopped run
    left ending must not be the next run's neighbour. Why it did not settle, or None."""
    import pynvml
    deadline = time.monotonic() + limit_s
    while True:
        busy = []
        for row in table:
            if row["nvml_index"] is None:
                continue
            handle = pynvml.nvmlDeviceGetHandleByIndex(row["nvml_index"])
            try:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except pynvml.NVMLError:
                procs = []
            busy += [f"GPU {row['id']}: pid {p.pid}" for p in procs if p.pid not in keep]
        if not busy:
            return None
        if time.monotonic() >= deadline:
            return ", ".join(busy[:8])
        time.sleep(1.0)


# -- the class -----------------------------------------------------------------------------
def corpus_entries(assignment: Assignment, mutants: Path) -> list[Entry]:
    return [e for e in load_corpus(assignment, mutants=mutants)
            if e.kind in ("wrong", "right") and e.device in (None, "cuda")]


def build_class(folder: Path, copies: int, entries: list[Entry], assignment: Assignment) -> dict[str, Entry | None]:
    """Student -> corpus entry (None for a reference copy). Each corpus entry's student sorts
    right after a copy's, spread over the copies: grade-all takes the students in name order."""
    students: dict[str, Entry | None] = {s: None for s in make_class(folder, copies, assignment)}
    anchors = list(students) or ["c"]
    for j, entry in enumerate(entries):
        student = f"{anchors[j * len(anchors) // len(entries)]}-{j:02d}-{entry.kind}-{entry.name}"
        target = folder / "submitted" / student / assignment.id
        target.mkdir(parents=True)
        (target / assignment.submission).write_text(entry.file.read_text())
        students[student] = entry
    return students


def kill_row(report: dict, entry: Entry) -> dict[str, str]:
    """Area -> "lost" (graded, short of its points) or "n/m" (not measured), for those areas only."""
    row = {}
    for name, area in report_reader.areas(report).items():
        if str(area.get("note") or "").startswith("not measured"):
            row[name] = "n/m"
        elif area.get("graded") and float(area.get("score") or 0) < float(area.get("points") or 0) - EPS:
            row[name] = "lost"
    return row


def row_differences(a: dict[str, str], b: dict[str, str], entry: Entry) -> list[str]:
    """The areas where two rows of one entry differ, but for an area not measured on either side
    and a right entry's curve area (a correct solution may lose speed points, and by a hair)."""
    out = []
    for area in sorted(set(a) | set(b)):
        if a.get(area) == b.get(area) or "n/m" in (a.get(area), b.get(area)):
            continue
        if entry.kind == "right" and area in entry.may_lose:
            continue
        out.append(f"{area} {a.get(area, 'ok')} -> {b.get(area, 'ok')}")
    return out


# -- a run ---------------------------------------------------------------------------------
def run_class(name: str, args, table: list[dict], entries: list[Entry], out: Path, gpus: list[str],
              load_gpu: str | None = None) -> dict:
    """One grade-all of a fresh class on `gpus` (all visible ones, or the first alone)."""
    assignment = Assignment.find(None)
    folder = out / f"class-{name}"
    shutil.rmtree(folder, ignore_errors=True)
    students = build_class(folder, args.copies, entries, assignment)
    course = Course(folder, assignment)
    alone = len(gpus) < len(table)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus[0]} if alone else None
    cmd = [sys.executable, "-m", "grader", "grade-all", "--course", str(folder), "--assignment",
           str(assignment.folder), "--device", "cuda", "--no-gradebook", "--no-progress"]
    if args.jobs_per_gpu:
        cmd += ["--jobs", str(args.jobs_per_gpu * len(gpus))]
    where = f"GPU {gpus[0]} alone" if alone else f"all {len(gpus)} GPUs ({', '.join(gpus)})"
    print(f"\nrun {name}: {len(students)} gradings on {where}"
          + (f", a copy loop on GPU {load_gpu}" if load_gpu else "") + f"; deadline {args.deadline:g} s", flush=True)
    plan = slot_plan(env, args.jobs_per_gpu * len(gpus) if args.jobs_per_gpu else None)
    print(f"  grade-all's slots per GPU: {plan}", flush=True)
    load = gpu_load.start(gpu=load_gpu) if load_gpu is not None else None
    try:
        samplers = {row["id"]: MemorySampler(index=row["nvml_index"]) for row in table if row["nvml_index"] is not None}
        with contextlib.ExitStack() as stack:
            for sampler in samplers.values():
                stack.enter_context(sampler)
            t = time.monotonic()
            grading_s = args.deadline - STOP_S - SETTLE_S
            run = bounded(cmd, grading_s, out / f"run-{name}-grade-all.log", env=env, grace_s=STOP_S)
            # a run stopped at its deadline graded nothing after it (an interrupted grading keeps no report)
            wall = min(time.monotonic() - t, grading_s)
    finally:
        if load is not None:
            load.kill()
            load.wait()
    unsettled = settle(table, limit_s=SETTLE_S)
    if unsettled:
        print(f"  still on the GPUs {SETTLE_S:g} s after the run: {unsettled}", flush=True)
    reports = {s: report_reader.read_or_none(course.report_path(s)) or {} for s in students}
    at_once = re.search(r"with (\d+) at once", run.stdout)
    per_gpu = {row["id"]: {"gradings": 0, "copies": 0, "not_measured": 0, "copies_lost": 0,
                           "peak_gib": samplers[row["id"]].peak_gib if row["id"] in samplers else None}
               for row in table}
    per_gpu["?"] = {"gradings": 0, "copies": 0, "not_measured": 0, "copies_lost": 0, "peak_gib": None}
    grouped: dict[str, list[dict]] = {}
    copies, kill = [], {}
    for student, report in reports.items():
        if not report:
            continue
        gpu = which_gpu(report, table)
        cell = per_gpu[gpu]
        cell["gradings"] += 1
        cell["not_measured"] += bool(report_reader.regrade(report))
        grouped.setdefault(gpu, []).append(report)
        entry = students[student]
        if entry is None:
            ok, line = verdict(report)
            cell["copies"] += 1
            cell["copies_lost"] += not ok
            went = time_went([report])
            copies.append({"student": student, "gpu": gpu, "ok": ok, "result": line,
                           "not_measured": bool(report_reader.regrade(report)),
                           "quiet_wait_s": went["gpu_quiet_wait_s"]})
        else:
            kill[entry.label] = kill_row(report, entry)
    for gpu, cell in per_gpu.items():
        went = time_went(grouped.get(gpu, []))
        cell["turn_wait_s"], cell["quiet_wait_s"] = went["gpu_turn_wait_s"], went["gpu_quiet_wait_s"]
    if not per_gpu["?"]["gradings"]:
        del per_gpu["?"]
    done = sum(bool(r) for r in reports.values())
    result = {"name": name, "gpus": gpus, "load_gpu": load_gpu, "students": len(students), "graded": done,
              "wall_s": round(wall, 1), "rate_per_min": round(60 * done / wall, 2) if wall else 0.0,
              "cut": run.returncode == -9, "exit": run.returncode,
              "at_once": int(at_once.group(1)) if at_once else sum(plan.values()), "slots": plan,
              "unsettled": unsettled,
              "per_gpu": per_gpu, "copies": copies, "kill": kill,
              "gpu_uuids": [row["uuid"] for row in table]}
    print_run(result)
    return result


def print_run(r: dict) -> None:
    cut = " (cut by the deadline)" if r["cut"] else ""
    print(f"run {r['name']}: {r['graded']} of {r['students']} graded in {r['wall_s']:.0f} s{cut}: "
          f"{r['rate_per_min']:.1f} gradings a minute; grade-all exit {r['exit']}, "
          f"{r['at_once'] if r['at_once'] is not None else '?'} at once", flush=True)
    head = ("GPU", "gradings", "copies", "not measured", "copies lost a point", "peak GiB", "turn wait s", "quiet wait s")
    rows = [head] + [(gpu, c["gradings"], c["copies"], c["not_measured"], c["copies_lost"],
                      "-" if c["peak_gib"] is None else c["peak_gib"], c["turn_wait_s"], c["quiet_wait_s"])
                     for gpu, c in r["per_gpu"].items()]
    width = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    for row in rows:
        print("  " + "  ".join(f"{str(v):>{w}}" for v, w in zip(row, width)), flush=True)
    for copy in r["copies"]:
        if not copy["ok"]:
            print(f"  BAD {copy['student']} on GPU {copy['gpu']}: {copy['result']}", flush=True)


# -- the checks ----------------------------------------------------------------------------
def checks(runs: dict[str, dict], table: list[dict], entries: dict[str, Entry]) -> list[dict]:
    """Each check: name, ok (True, False, or None when skipped), detail."""
    out = []

    def check(name: str, ok: bool | None, detail: str) -> None:
        out.append({"check": name, "ok": ok, "detail": detail})
    several = len(table) >= 2
    one, every, busy = runs.get("one"), runs.get("all"), runs.get("busy")
    if one:
        first = table[0]["id"]
        elsewhere = {g: c["gradings"] for g, c in one["per_gpu"].items() if g != first and c["gradings"]}
        check("the one-GPU run stayed on its GPU", not elsewhere and one["graded"] > 0,
              f"{one['graded']} gradings, on other GPUs: {elsewhere or 'none'}")
    if every:
        unused = [row["id"] for row in table if not every["per_gpu"].get(row["id"], {}).get("gradings")]
        check("every GPU used", not unused and every["graded"] > 0,
              "gradings per GPU: " + ", ".join(f"{g} {c['gradings']}" for g, c in every["per_gpu"].items())
              + (f"; unused: {unused}" if unused else ""))
    elif not several:
        check("every GPU used", None, "one GPU: the all-GPU run is the one-GPU run")
    if one and every and several:
        want = 0.9 * len(table) * one["rate_per_min"]
        check("all-GPU rate >= 0.9 x GPUs x one-GPU rate", every["rate_per_min"] >= want,
              f"{every['rate_per_min']:.1f} a minute on {len(table)} GPUs against {one['rate_per_min']:.1f} on one "
              f"(at least {want:.1f} wanted)")
        both = sorted(set(one["kill"]) & set(every["kill"]))
        differ = {label: d for label in both if (d := row_differences(one["kill"][label], every["kill"][label],
                                                                       entries[label]))}
        check("the kill matrix the same on one GPU and on all", not differ if both else None,
              f"{len(both)} corpus entries graded in both runs" + (f"; differ: {differ}" if differ else "")
              + ("" if both else " (none: nothing to compare)"))
    elif not several:
        check("all-GPU rate >= 0.9 x GPUs x one-GPU rate", None, "needs two GPUs or more")
        check("the kill matrix the same on one GPU and on all", None, "needs two GPUs or more")
    for name, r in runs.items():
        if name == "busy":
            continue
        lost = [c["student"] for c in r["copies"] if not c["ok"]]
        check(f"no reference copy lost a point ({name})", not lost, f"{len(r['copies'])} copies graded"
              + (f"; lost: {lost}" if lost else ""))
    if busy:
        base = every or one
        loaded = busy["load_gpu"]
        lost = [c["student"] for c in busy["copies"] if not c["ok"]]
        worse = {}
        if base:
            for label in sorted(set(base["kill"]) & set(busy["kill"])):
                d = row_differences(base["kill"][label], busy["kill"][label], entries[label])
                if d:
                    worse[label] = d
        check("busy: no grading lost a point to the load", not lost and not worse,
              f"{len(busy['copies'])} copies, {len(busy['kill'])} corpus entries"
              + (f"; copies lost: {lost}" if lost else "") + (f"; corpus rows changed: {worse}" if worse else ""))
        others = {g: c for g, c in busy["per_gpu"].items() if g not in (loaded, "?")}
        if others:
            before = {g: (base["per_gpu"].get(g, {}).get("not_measured", 0) if base else 0) for g in others}
            more = {g: (c["not_measured"], before[g]) for g, c in others.items() if c["not_measured"] > before[g]}
            check("busy: the other GPUs' gradings measured as usual", not more,
                  "not measured on the other GPUs: " + ", ".join(f"{g} {c['not_measured']}" for g, c in others.items())
                  + (f" (more than without the load: {more})" if more else ""))
        else:
            check("busy: the other GPUs' gradings measured as usual", None, "one GPU: no other GPU")
        on_loaded = [c for c in busy["copies"] if c["gpu"] == loaded]
        unhindered = [c["student"] for c in on_loaded if not c["not_measured"] and not c["quiet_wait_s"]]
        check("busy: copies on the loaded GPU not measured or waited", bool(on_loaded) and not unhindered,
              f"{len(on_loaded)} copies on GPU {loaded}: "
              f"{sum(c['not_measured'] for c in on_loaded)} not measured, "
              f"{sum(bool(c['quiet_wait_s']) for c in on_loaded)} waited for a quiet GPU"
              + (f"; neither: {unhindered}" if unhindered else ""))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=24, help="distinct reference copies in the class")
    ap.add_argument("--copies-per-gpu", type=int, help="instead of --copies: this many per visible GPU")
    ap.add_argument("--no-corpus", action="store_true", help="leave the corpus's wrong and right entries out")
    ap.add_argument("--busy", action="store_true", help="a third run with a copy loop on the last GPU")
    ap.add_argument("--runs", nargs="+", choices=["one", "all", "busy"],
                    help="the runs to make now (default: one, all, and busy with --busy)")
    ap.add_argument("--jobs-per-gpu", type=int, help="gradings at once per GPU (default: grade-all's own)")
    ap.add_argument("--deadline", type=float, default=270, help="seconds one run's grade-all may take")
    ap.add_argument("--out", default="build/every_gpu")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    table = gpu_table()
    if not table:
        print("no GPU visible here", file=sys.stderr)
        return 2
    if args.copies_per_gpu:
        args.copies = args.copies_per_gpu * len(table)
    print(f"{len(table)} GPU(s) visible:")
    for row in table:
        print(f"  {row['id']}: {row['name']}, {row['memory_gib']} GiB, {row['uuid']}, NVML index {row['nvml_index']}")
    assignment = Assignment.find(None)
    mutants = Path(tempfile.mkdtemp(prefix="grader-mutants-"))
    try:
        entries = [] if args.no_corpus else corpus_entries(assignment, mutants)
        wanted = args.runs or (["one", "all"] + (["busy"] if args.busy else []))
        if len(table) == 1 and "all" in wanted:
            print("one GPU visible: the all-GPU run would grade on the same GPU as the one-GPU run; it is not made")
            wanted = [w for w in wanted if w != "all"]
        gpus = [row["id"] for row in table]
        uuids = [row["uuid"] for row in table]
        runs: dict[str, dict] = {}
        for name in ("one", "all", "busy"):
            if name in wanted:
                runs[name] = run_class(name, args, table, entries, out, gpus[:1] if name == "one" else gpus,
                                       load_gpu=gpus[-1] if name == "busy" else None)
                (out / f"run-{name}.json").write_text(json.dumps(runs[name], indent=1))
            elif (out / f"run-{name}.json").exists():
                earlier = json.loads((out / f"run-{name}.json").read_text())
                if earlier.get("gpu_uuids") == uuids:
                    runs[name] = earlier
                    print(f"\nrun {name}: from an earlier call ({out / f'run-{name}.json'})")
                    print_run(earlier)
    finally:
        shutil.rmtree(mutants, ignore_errors=True)
    found = checks(runs, table, {e.label: e for e in entries})
    print()
    for c in found:
        print(f"{ {True: 'ok  ', False: 'FAIL', None: 'skip'}[c['ok']]} {c['check']}: {c['detail']}")
    (out / "every_gpu.json").write_text(json.dumps({"gpus": table, "args": vars(args), "runs": runs,
                                                    "checks": found}, indent=1))
    failed = [c for c in found if c["ok"] is False]
    print(f"{len(failed)} check(s) failed" if failed else "every check passed (or was skipped)")
    print(f"written: {out / 'every_gpu.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
