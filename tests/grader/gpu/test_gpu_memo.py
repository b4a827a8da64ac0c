"""A figure measured once per GPU (grader/gpu/memo.py): kept under its fingerprint for its
lifetime, never kept when the maker says it could not measure, and made once when gradings
ask for it at the same moment."""
from __future__ import annotations

import json
import multiprocessing
import threading
import time

from grader.gpu.memo import GpuMemo


def test_a_kept_figure_is_read_until_it_is_too_old(tmp_path):
    memo = GpuMemo(tmp_path, "gpu-a", "fp1", ttl_s=60)
    made = memo.get("timings", lambda: {"t": 1.5})
    assert made.made_here and made.value == {"t": 1.5} and made.age_s == 0
    again = memo.get("timings", lambda: {"t": 99.0})
    assert not again.made_here and again.value == {"t": 1.5} and 0 <= again.age_s < 5
    path = next(tmp_path.glob("memo.*.json"))
    kept = json.loads(path.read_text())
    kept["made"] -= 61
    path.write_text(json.dumps(kept))
    assert memo.get("timings", lambda: {"t": 2.0}).value == {"t": 2.0}


def test_another_fingerprint_or_gpu_never_reads_it(tmp_path):
    GpuMemo(tmp_path, "gpu-a", "fp1").get("timings", lambda: 1)
    assert GpuMemo(tmp_path, "gpu-a", "fp2").get("timings", lambda: 2).value == 2
    assert GpuMemo(tmp_path, "gpu-b", "fp2").get("timings", lambda: 3).value == 3


def test_a_figure_the_maker_could_not_measure_is_not_kept(tmp_path):
    memo = GpuMemo(tmp_path, "gpu-a", "fp")
    assert memo.get("timings", lambda: {"busy": "x"}, keep=lambda v: "busy" not in v).made_here
    assert memo.get("timings", lambda: {"t": 1.0}, keep=lambda v: "busy" not in v).made_here
    assert not memo.get("timings", lambda: {"t": 5.0}).made_here


def test_a_lifetime_of_zero_measures_every_time(tmp_path):
    memo = GpuMemo(tmp_path, "gpu-a", "fp", ttl_s=0)
    assert memo.get("t", lambda: 1).value == 1 and memo.get("t", lambda: 2).value == 2
    assert not list(tmp_path.glob("memo.*.json"))


def test_a_damaged_file_is_measured_again(tmp_path):
    memo = GpuMemo(tmp_path, "gpu-a", "fp")
    memo.get("t", lambda: 1)
    next(tmp_path.glob("memo.*.json")).write_text("{not json")
    assert memo.get("t", lambda: 2).value == 2


def _ask(folder, out):
    def make():
        time.sleep(0.5)            # a measurement takes a while: the others must wait for it
        with open(out, "a") as f:
            f.write("made\n")
        return {"t": 1.0}
    GpuMemo(folder, "gpu-a", "fp").get("timings", make)


def test_gradings_asking_at_once_measure_once(tmp_path):
    out = tmp_path / "makers"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_ask, args=(tmp_path, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    assert out.read_text().splitlines() == ["made"]


def test_a_grading_that_will_not_wait_goes_on_while_another_makes_the_figure(tmp_path):
    """Slots that start together: one measures, the others go on with their other tests and
    read the figure when they need it, instead of standing idle behind the maker's lock."""
    memo = GpuMemo(tmp_path, "gpu-a", "fp")
    making, done = threading.Event(), threading.Event()

    def slow_make():
        making.set()
        done.wait(10)
        return {"t": 2.0}
    maker = threading.Thread(target=lambda: memo.get("timings", slow_make))
    maker.start()
    assert making.wait(5)
    began = time.monotonic()
    assert GpuMemo(tmp_path, "gpu-a", "fp").get("timings", lambda: {"t": 9.0}, wait=False) is None
    assert time.monotonic() - began < 1, "it waited for the maker"
    done.set()
    maker.join(10)
    later = GpuMemo(tmp_path, "gpu-a", "fp").get("timings", lambda: {"t": 9.0}, wait=False)
    assert later is not None and later.value == {"t": 2.0} and not later.made_here
    fresh = GpuMemo(tmp_path / "x", "gpu-a", "fp")
    (tmp_path / "x").mkdir()
    assert fresh.get("timings", lambda: {"t": 3.0}, wait=False).made_here, "nobody making it: made here"


def test_the_wait_for_another_gradings_making_is_told_apart_from_the_making(tmp_path):
    """What a grading stood behind another's lock is its neighbours' cost (the suite charges it
    to no area); the maker's own seconds are not a wait."""
    memo = GpuMemo(tmp_path, "gpu-a", "fp")
    making = threading.Event()
    made = {}

    def slow_make():
        making.set()
        time.sleep(0.6)
        return {"t": 2.0}
    maker = threading.Thread(target=lambda: made.update(memo=memo.get("timings", slow_make)))
    maker.start()
    assert making.wait(5)
    waiter = GpuMemo(tmp_path, "gpu-a", "fp").get("timings", lambda: {"t": 9.0})
    maker.join(10)
    assert waiter.value == {"t": 2.0} and not waiter.made_here
    assert 0.3 <= waiter.waited_s < 5, f"the wait behind the maker was {waiter.waited_s:.2f} s"
    assert made["memo"].made_here and made["memo"].waited_s < 0.1
    assert GpuMemo(tmp_path, "gpu-a", "fp").get("timings", lambda: {"t": 9.0}).waited_s < 0.1
