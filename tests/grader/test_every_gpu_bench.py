"""bench/every_gpu.py's own logic, on the CPU: the class it grades, how it reads a report's
GPU and kill-matrix row, and its checks over runs of one, two and eight GPUs (the runs made up
here; the GPU runs themselves need the GPUs)."""
import importlib.util
from pathlib import Path

import pytest

from grader.assignment import Assignment
from grader.corpus import Entry

REPO = Path(__file__).resolve().parents[2]
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
    from grader import gpu_load
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
