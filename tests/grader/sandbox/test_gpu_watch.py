"""A frozen worker must leave the GPU alone (grader/sandbox/gpu_watch.py): the rule that convicts
it from NVML's samples, and what its grading sees once the watch has ended it. The watch's NVML
reading itself runs on the GPU only (bench/busy_gpu.py, the gpu_work_after_return corpus entry)."""
import time
from pathlib import Path

import pytest
import torch

from grader.sandbox import Confinement, Submission, SubmissionUnavailable, WorkerCrashed
from grader.sandbox.gpu_watch import BUSY_SAMPLES, FROZEN_GRACE_S, FrozenGpuWatch, left_running
from grader.sandbox.nvml import Sample

TOY = Path(__file__).parent.parent / "toy" / "submissions"
FROZEN = 1_000_000_000_000
GRACE_US = int(FROZEN_GRACE_S * 1e6)


def _late(pid: int, n: int, sm: int = 80) -> list[Sample]:
    return [Sample(pid, FROZEN + GRACE_US + 200_000 * (i + 1), sm, 10) for i in range(n)]


def test_an_honest_worker_is_never_convicted_by_samples_of_its_own_last_call():
    """A sample taken within the grace may cover work from before the freeze (the call's own,
    synchronised before it answered): however busy, it convicts nobody."""
    early = [Sample(7, FROZEN + t, 100, 100) for t in range(0, GRACE_US + 1, 100_000)]
    assert left_running(early, {7}, FROZEN) is None


def test_one_late_sample_alone_convicts_nobody():
    assert BUSY_SAMPLES >= 2
    assert left_running(_late(7, BUSY_SAMPLES - 1), {7}, FROZEN) is None


def test_work_of_another_process_is_not_the_frozen_workers():
    assert left_running(_late(8, 5), {7}, FROZEN) is None


def test_a_frozen_worker_seen_busy_past_the_grace_is_ended_with_a_reason_that_teaches():
    why = left_running(_late(7, BUSY_SAMPLES), {7, 9}, FROZEN)
    assert why is not None and "left work running on the GPU after its call had returned" in why
    assert "process 7" in why and "must finish all the GPU work it starts before it returns" in why


def test_an_ended_worker_fails_the_next_call_with_the_reason_and_no_worker_of_the_file_starts_again():
    """What the watch does to a convicted worker (end_for, from its thread) is seen by the grading
    at its next call: that call fails with the watch's reason, and the test in flight is lost. No
    fresh worker of that file is started: its next calls would leave GPU work running again, each
    neighbour's timing waiting on it, so every later call fails at once saying why."""
    conf = Confinement.prepare("cpu", [], want_uid=False)
    sub = Submission(TOY / "segfault_on_seven.py", ["add_into", "echo"], torch.device("cpu"), conf, timeout=60)
    try:
        assert sub.echo(1) == 1
        worker = sub._worker
        assert worker.frozen, "a worker is frozen between its calls"
        worker.end_for("your code left work running on the GPU after its call had returned: test")
        assert worker.proc.wait(timeout=10) < 0, "the ended worker's process is killed"
        with pytest.raises(WorkerCrashed, match="left work running on the GPU after its call had returned: test"):
            sub.echo(2)
        started = time.monotonic()
        with pytest.raises(SubmissionUnavailable, match="left work running on the GPU after a call had returned"):
            sub.echo(3)
        assert time.monotonic() - started < 1.0, "a later call fails at once, without starting a worker"
        assert not sub.started and sub.restarts == 1 and "left work running" in sub.failures[-1]
    finally:
        sub.close()


class _FrozenWorker:
    """What the watch reads of a frozen worker, and what it does to one (end_for)."""

    def __init__(self, pids: set[int]):
        self.frozen, self.frozen_at_us, self.ended = pids, FROZEN, None

    def end_for(self, why: str) -> None:
        self.ended = why


def test_nvml_answers_one_sample_a_process_so_the_watch_gathers_them_over_its_readings():
    """NVML's per-process utilisation holds one sample per process, its latest: no single reading
    shows two, and a watch that judged each reading alone convicted nobody (on the H200, a child
    process busy at 99% for minutes). Gathered over readings, two late busy samples end it; a
    fresh freeze starts the gathering again."""
    watch = FrozenGpuWatch(gpu=None, start=False)
    worker = _FrozenWorker({7, 8})
    watch.watch(worker)
    first, second = _late(8, 2)
    watch.take([worker], [first])
    assert worker.ended is None, "one busy sample alone convicts nobody"
    watch.watch(worker)                      # frozen again: what came before is forgotten
    watch.take([worker], [second])
    assert worker.ended is None
    watch.take([worker], [second._replace(stamp_us=second.stamp_us + 200_000)])
    assert worker.ended and "process 8" in worker.ended


def _l1_file(name: str, tmp_path) -> Path:
    from grader.assignment import REPO, Assignment
    from grader.validate.corpus import load_corpus
    l1 = Assignment.load(REPO / "assignment" / "l1_paged_kv_write")
    return l1.reference if name == "reference" else next(
        e.file for e in load_corpus(l1, mutants=tmp_path) if e.name == name)


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the watch reads NVML on a GPU")
@pytest.mark.parametrize("name, ended", [("reference", False), ("gpu_work_after_return", True)])
def test_on_the_gpu_only_a_worker_that_leaves_work_queued_is_ended(tmp_path, name, ended):
    """The real thing: the gpu_work_after_return corpus entry leaves 3 s of matmuls queued by a
    child process after each call; frozen for 4 s, its worker is ended, and its next call says why.
    The reference, frozen as long, is left alone."""
    conf = Confinement.prepare("cuda", [], want_uid=False)
    sub = Submission(_l1_file(name, tmp_path), ["slot_mapping", "reshape_and_cache"], torch.device("cuda"), conf,
                     timeout=120)
    T, H, D, blocks, block = 64, 8, 128, 16, 16
    key, value = (torch.randn(T, H, D, device="cuda", dtype=torch.float16) for _ in range(2))
    k_cache, v_cache = (torch.zeros(blocks, block, H, D, device="cuda", dtype=torch.float16) for _ in range(2))
    slots = torch.randperm(blocks * block, device="cuda")[:T].to(torch.int64)
    try:
        sub.reshape_and_cache(key, value, k_cache, v_cache, slots)
        time.sleep(4.0)                     # frozen between calls
        if ended:
            with pytest.raises(WorkerCrashed, match="left work running on the GPU after its call had returned"):
                sub.reshape_and_cache(key, value, k_cache, v_cache, slots)
        else:
            sub.reshape_and_cache(key, value, k_cache, v_cache, slots)
            assert sub.restarts == 0
    finally:
        sub.close()
        conf.release()
