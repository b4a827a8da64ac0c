"""How many gradings run at once by default (machines.default_jobs): on a GPU machine as many
as each GPU's memory holds at the assignment's gpu_memory_gib, no more than the cores allow at
two a grading (the trusted process and its worker), shared among the GPUs, and four a GPU at
most (machines.MOST_AT_ONCE_PER_GPU)."""
from grader.gpu import machines


def _machine(monkeypatch, gpus, memory, cores):
    monkeypatch.setattr(machines, "visible_gpus", lambda: gpus)
    monkeypatch.setattr(machines, "cuda_device_memory", lambda: memory)
    monkeypatch.setattr(machines.os, "sched_getaffinity", lambda pid: set(range(cores)))


def test_one_h200_with_16_cores_takes_four_gradings_of_9_gib(monkeypatch):
    """Memory and cores would hold eight; past four a GPU's gradings slowed each other more than
    they added (docs/instructor.md). Asked for eight, the slots are there."""
    _machine(monkeypatch, ["0"], [139 << 30], 16)
    assert machines.default_jobs("cuda", 9 << 30) == machines.MOST_AT_ONCE_PER_GPU == 4
    assert len(machines.slots("cuda", 8, 9 << 30)) == 8


def test_memory_or_cores_whichever_is_fewer(monkeypatch):
    _machine(monkeypatch, ["0"], [139 << 30], 16)
    assert machines.default_jobs("cuda", 44 << 30) == 3          # the memory
    _machine(monkeypatch, ["0"], [139 << 30], 6)
    assert machines.default_jobs("cuda", 9 << 30) == 3           # the cores
    _machine(monkeypatch, ["0"], [139 << 30], 4)
    assert machines.default_jobs("cuda", 17 << 30) == 2          # the cores


def test_the_cores_are_shared_among_the_gpus(monkeypatch):
    _machine(monkeypatch, ["0", "1", "2", "3"], [139 << 30] * 4, 64)
    assert machines.default_jobs("cuda", 17 << 30) == 16         # four a GPU
    _machine(monkeypatch, ["0", "1", "2", "3"], [139 << 30] * 4, 16)
    assert machines.default_jobs("cuda", 17 << 30) == 8          # two cores' worth a GPU
    _machine(monkeypatch, ["0", "1"], [139 << 30, 139 << 30], 2)
    assert machines.default_jobs("cuda", 17 << 30) == 2          # still one a GPU


def test_unknown_memory_or_no_size_falls_back_to_one_per_gpu(monkeypatch):
    _machine(monkeypatch, ["0", "1"], [], 32)
    assert machines.default_jobs("cuda", 17 << 30) == 2
    _machine(monkeypatch, ["0", "1"], [139 << 30] * 2, 32)
    assert machines.default_jobs("cuda") == 2


def test_the_cpu_takes_half_its_cores(monkeypatch):
    _machine(monkeypatch, [], [], 2)
    assert machines.default_jobs("cpu") == 1
    _machine(monkeypatch, [], [], 9)
    assert machines.default_jobs("cpu", 17 << 30) == 4
