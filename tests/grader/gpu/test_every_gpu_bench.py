"""bench/every_gpu.py's own logic, on the CPU: the class it grades, how it reads a report's
GPU and kill-matrix row, and its checks over runs of one, two and eight GPUs (the runs made up
here; the GPU runs themselves need the GPUs)."""
import importlib.util
from pathlib import Path

import pytest

from grader.assignment import Assignment
from grader.validate.corpus import Entry

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("every_gpu", REPO / "bench/every_gpu.py")
every_gpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(every_gpu)

WRONG = Entry("wrong", "padding_not_skipped", REPO / "reference/l1_paged_kv_write.py", fails=("padding",))
RIGHT = Entry("right", "grid_2d_tiles", REPO / "reference/l1_paged_kv_write.py", may_lose=("performance",))
ENTRIES = {WRONG.label: WRONG, RIGHT.label: RIGHT}


def _table(n):
    return [{"id": str(i), "uuid": f"GPU-{i}", "nvml_index": i} for i in range(n)]


def _cell(gradings, not_measured=0):
    return {"gradings": gradings, "copies": gradings, "not_measured": not_measured, "copies_lost": 0,
            "peak_gib": 1.0, "turn_wait_s": 0.0, "quiet_wait_s": 0.0}


def _run(name, per_gpu, rate, kill=None, copies=None, load_gpu=None):
    return {"name": name, "per_gpu": per_gpu, "rate_per_min": rate, "graded": sum(c["gradings"] for c in per_gpu.values()),
            "kill": kill or {}, "copies": copies or [], "load_gpu": load_gpu}


def _by_name(found):
    return {c["check"]: c["ok"] for c in found}


def test_the_class_interleaves_the_corpus_among_the_copies(tmp_path):
    assignment = Assignment.find(None)
    students = every_gpu.build_class(tmp_path, 4, [WRONG, RIGHT, WRONG], assignment)
    order = sorted(students)
    assert [students[s] is None for s in order] == [True, False, True, False, True, False, True]
    for student in order:
        assert (tmp_path / "submitted" / student / assignment.id / assignment.submission).is_file()
    only_corpus = every_gpu.build_class(tmp_path / "none", 0, [WRONG], assignment)
    assert list(only_corpus.values()) == [WRONG]


def test_a_reports_gpu_and_kill_row():
    table = _table(2)
    report = {"extra_data": {"instructor": {"gpu": {"visible": "1", "uuid": "GPU-1"}}, "areas": {
        "padding": {"graded": True, "score": 0, "points": 10},
        "write": {"graded": True, "score": 25, "points": 25},
        "performance": {"graded": False, "score": 0, "points": 15, "note": "not measured, to be regraded: busy"}}}}
    assert every_gpu.which_gpu(report, table) == "1"
    assert every_gpu.kill_row(report, WRONG) == {"padding": "lost", "performance": "n/m"}
    report["extra_data"]["instructor"]["gpu"] = {"visible": "0", "uuid": None}
    assert every_gpu.which_gpu(report, table) == "0"
    report["extra_data"]["instructor"]["gpu"] = "cpu"
    assert every_gpu.which_gpu(report, table) == "?"
    # not measured on one side, or a right entry's curve: no difference
    assert every_gpu.row_differences({"padding": "lost"}, {"padding": "lost", "performance": "n/m"}, WRONG) == []
    assert every_gpu.row_differences({}, {"performance": "lost"}, RIGHT) == []
    assert every_gpu.row_differences({"padding": "lost"}, {}, WRONG) == ["padding lost -> ok"]


@pytest.mark.parametrize("count", [2, 8])
def test_the_checks_on_several_gpus(count):
    table = _table(count)
    one = _run("one", {"0": _cell(20)}, 10.0, kill={WRONG.label: {"padding": "lost"}})
    spread = {str(i): _cell(10) for i in range(count)}
    every = _run("all", spread, 9.5 * count, kill={WRONG.label: {"padding": "lost"}})
    got = _by_name(every_gpu.checks({"one": one, "all": every}, table, ENTRIES))
    assert got == {"the one-GPU run stayed on its GPU": True, "every GPU used": True,
                   "all-GPU rate >= 0.9 x GPUs x one-GPU rate": True,
                   "the kill matrix the same on one GPU and on all": True,
                   "no reference copy lost a point (one)": True, "no reference copy lost a point (all)": True}
    # a GPU left idle, a slow rate, a row that moved, a grading of the one-GPU run elsewhere
    every = _run("all", {**spread, str(count - 1): _cell(0)}, 8.0 * count, kill={WRONG.label: {}})
    one["per_gpu"]["1"] = _cell(1)
    got = _by_name(every_gpu.checks({"one": one, "all": every}, table, ENTRIES))
    assert not any(got[name] for name in ("the one-GPU run stayed on its GPU", "every GPU used",
                                          "all-GPU rate >= 0.9 x GPUs x one-GPU rate",
                                          "the kill matrix the same on one GPU and on all"))


def test_the_busy_checks():
    table = _table(2)
    every = _run("all", {"0": _cell(10), "1": _cell(10)}, 20.0, kill={WRONG.label: {"padding": "lost"}})
    copies = [{"student": "ref00", "gpu": "1", "ok": True, "not_measured": True, "quiet_wait_s": 10.0},
              {"student": "ref01", "gpu": "1", "ok": True, "not_measured": False, "quiet_wait_s": 3.0},
              {"student": "ref02", "gpu": "0", "ok": True, "not_measured": False, "quiet_wait_s": 0.0}]
    busy = _run("busy", {"0": _cell(10), "1": _cell(10, not_measured=4)}, 15.0,
                kill={WRONG.label: {"padding": "lost", "performance": "n/m"}}, copies=copies, load_gpu="1")
    got = _by_name(every_gpu.checks({"all": every, "busy": busy}, table, ENTRIES))
    assert got["busy: no grading lost a point to the load"] and got["busy: the other GPUs' gradings measured as usual"]
    assert got["busy: copies on the loaded GPU not measured or waited"]
    busy["per_gpu"]["0"]["not_measured"] = 1
    copies[1].update(quiet_wait_s=0.0)
    copies[2].update(ok=False)
    got = _by_name(every_gpu.checks({"all": every, "busy": busy}, table, ENTRIES))
    assert not any(got[name] for name in ("busy: no grading lost a point to the load",
                                          "busy: the other GPUs' gradings measured as usual",
                                          "busy: copies on the loaded GPU not measured or waited"))


def test_one_gpu_skips_what_needs_two():
    one = _run("one", {"0": _cell(20)}, 10.0)
    busy = _run("busy", {"0": _cell(20, not_measured=20)}, 8.0, load_gpu="0",
                copies=[{"student": "ref00", "gpu": "0", "ok": True, "not_measured": True, "quiet_wait_s": 10.0}])
    got = _by_name(every_gpu.checks({"one": one, "busy": busy}, _table(1), ENTRIES))
    assert got["every GPU used"] is None
    assert got["all-GPU rate >= 0.9 x GPUs x one-GPU rate"] is None
    assert got["the kill matrix the same on one GPU and on all"] is None
    assert got["busy: the other GPUs' gradings measured as usual"] is None
    assert got["the one-GPU run stayed on its GPU"] and got["busy: no grading lost a point to the load"]
    assert got["busy: copies on the loaded GPU not measured or waited"]


def test_the_load_starts_on_the_gpu_asked_for(monkeypatch):
    from grader.gpu import load as gpu_load
    seen = {}

    class Proc:
        def __init__(self, cmd, env=None, **kw):
            seen["env"] = env
            self.stdout = type("Out", (), {"readline": lambda self: "ready\n"})()
    monkeypatch.setattr(gpu_load.subprocess, "Popen", Proc)
    gpu_load.start(gpu="5")
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "5"
    gpu_load.start()
    assert seen["env"] is None          # the caller's environment: its first GPU


def test_a_run_reads_what_grade_all_left(monkeypatch, tmp_path, capsys):
    """run_class end to end, with grade-all, NVML and the load faked: a grade-all that writes each
    student's report as if graded on the GPUs in turn (in the busy run, the copies on the loaded
    GPU not measured)."""
    import json
    import subprocess
    import types

    from grader.course.folder import Course
    table = _table(2)
    assignment = Assignment.find(None)
    calls = []

    def fake_grade_all(cmd, deadline_s, log, env=None, grace_s=0):
        calls.append((cmd, env, deadline_s))
        course = Course(Path(cmd[cmd.index("--course") + 1]), assignment)
        gpus = [env["CUDA_VISIBLE_DEVICES"]] if env else ["0", "1"]
        for i, student in enumerate(course.students()):
            gpu = gpus[i % len(gpus)]
            wrong = "wrong" in student
            nm = len(calls) == 3 and gpu == "1" and not wrong      # the busy run: its loaded GPU
            areas = {"padding": {"graded": True, "score": 0 if wrong else 10, "points": 10},
                     "performance": {"graded": not nm, "score": 0 if nm else 15, "points": 15,
                                     "note": "not measured, to be regraded: busy" if nm else ""}}
            report = {"score": 15 if nm else 25 - 10 * wrong, "max_score": 15 if nm else 25, "tests": [],
                      "extra_data": {"instructor": {"gpu": {"visible": gpu, "uuid": f"GPU-{gpu}"}}, "areas": areas,
                                     "regrade": "performance: not measured" if nm else None}}
            path = course.report_path(student)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(report))
        return subprocess.CompletedProcess(cmd, 0, stdout="grade-all: ... gradings run on cuda with 4 at once, warm",
                                           stderr="")

    class Sampler:
        def __init__(self, index=0):
            self.peak_gib = 1.5 + index

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass
    loads = []
    monkeypatch.setattr(every_gpu, "bounded", fake_grade_all)
    monkeypatch.setattr(every_gpu, "MemorySampler", Sampler)
    monkeypatch.setattr(every_gpu, "settle", lambda table, keep=(), limit_s=0: None)
    monkeypatch.setattr(every_gpu, "slot_plan", lambda env, jobs: {"0": 2} if env else {"0": 2, "1": 2})
    monkeypatch.setattr(every_gpu.gpu_load, "start", lambda gpu=None: loads.append(gpu) or types.SimpleNamespace(
        kill=lambda: None, wait=lambda: 0))
    args = types.SimpleNamespace(copies=4, deadline=100.0, jobs_per_gpu=None)
    runs = {name: every_gpu.run_class(name, args, table, [WRONG], tmp_path, ["0"] if name == "one" else ["0", "1"],
                                      load_gpu="1" if name == "busy" else None) for name in ("one", "all", "busy")}
    assert calls[0][1]["CUDA_VISIBLE_DEVICES"] == "0" and calls[1][1] is None
    assert calls[0][2] == 100.0 - every_gpu.STOP_S - every_gpu.SETTLE_S
    assert loads == ["1"]
    assert runs["one"]["per_gpu"]["0"]["gradings"] == 5 and runs["one"]["per_gpu"]["1"]["gradings"] == 0
    assert runs["all"]["per_gpu"]["0"]["gradings"] == 3 and runs["all"]["per_gpu"]["1"]["not_measured"] == 0
    assert runs["busy"]["per_gpu"]["1"]["not_measured"] == 1 and runs["busy"]["per_gpu"]["0"]["not_measured"] == 0
    assert runs["all"]["per_gpu"]["1"]["peak_gib"] == 2.5 and runs["all"]["at_once"] == 4
    assert runs["one"]["kill"] == runs["all"]["kill"] == {WRONG.label: {"padding": "lost"}}
    found = {c["check"]: c["ok"] for c in every_gpu.checks(runs, table, {WRONG.label: WRONG})}
    assert found["every GPU used"] and found["the one-GPU run stayed on its GPU"]
    assert found["the kill matrix the same on one GPU and on all"]
    assert found["busy: no grading lost a point to the load"]
    assert found["busy: copies on the loaded GPU not measured or waited"]
    assert found["busy: the other GPUs' gradings measured as usual"]
    out = capsys.readouterr().out
    assert "run all: 5 of 5 graded" in out and "not measured" in out


def test_a_run_past_its_deadline_is_asked_to_stop_first(tmp_path):
    """bench/h200_checks.bounded with grace_s: SIGTERM first (grade-all then ends its gradings), the
    process group killed only if it is still there grace_s later; either way the exit reads -9."""
    import sys
    import time
    script = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: (print('stopping', flush=True), "
              "sys.exit(0))); print('up', flush=True); time.sleep(60)")
    t = time.monotonic()
    run = every_gpu.bounded([sys.executable, "-c", script], 1.5, tmp_path / "log", grace_s=10)
    assert run.returncode == -9 and "stopping" in run.stdout and time.monotonic() - t < 8
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    t = time.monotonic()
    run = every_gpu.bounded([sys.executable, "-c", stubborn], 1.5, tmp_path / "log2", grace_s=1)
    assert run.returncode == -9 and time.monotonic() - t < 8
