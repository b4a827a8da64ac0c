"""A class on every GPU of a host: how grade-all's slots (machines.slots, SlotPool) spread the
gradings over 2, 4 and 8 GPUs, each slot seeing one GPU through CUDA_VISIBLE_DEVICES, and how
what a grading keys by its GPU (gpu_turns.gpu_key, the turns' lock files, gpu_quiet's NVML
handle) tells the GPUs apart. The device list is faked at the driver's edge
(machines.cuda_device_count and cuda_device_memory, which ask libcuda); what the code makes of
it (visible_gpus, default_jobs, slots) is the real code. Which GPU a grading ran on reaches its
report (extra_data.instructor.gpu): "cpu" on the CPU."""
import collections
import os
import sys
import threading
import time
import types

import pytest

from grader.gpu import turns as gpu_turns, machines
from grader.grading.grade_one import gpu_of, read_state

GIB = 1 << 30
H200 = 139 * GIB            # what cuDeviceTotalMem says of an H200
PER_GRADING = 40 * GIB      # so large that the memory, not the cores or the cap of four, sets the slots: 139 // 40 = 3


def _host(monkeypatch, count, memory=None, cores=None, visible=None):
    """A host whose driver sees `count` GPUs of `memory` bytes each (a list for mixed GPUs),
    with CUDA_VISIBLE_DEVICES as `visible` (None: unset)."""
    sizes = memory if isinstance(memory, list) else [memory or H200] * count
    monkeypatch.setattr(machines, "cuda_device_count", lambda: count)
    monkeypatch.setattr(machines, "cuda_device_memory", lambda: sizes)
    monkeypatch.setattr(machines.os, "sched_getaffinity", lambda pid: set(range(cores or 16 * count)))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)


def _per_gpu(envs):
    return collections.Counter(env["CUDA_VISIBLE_DEVICES"] for env in envs)


@pytest.mark.parametrize("count", [2, 4, 8])
def test_every_gpu_gets_slots_and_each_slot_sees_one_gpu(monkeypatch, count):
    _host(monkeypatch, count)
    jobs = machines.default_jobs("cuda", PER_GRADING)
    envs = machines.slots("cuda", jobs, PER_GRADING)
    gpus = [str(i) for i in range(count)]
    assert machines.visible_gpus() == gpus
    assert len(envs) == jobs
    assert all(set(env) == {"CUDA_VISIBLE_DEVICES"} and env["CUDA_VISIBLE_DEVICES"] in gpus for env in envs)
    assert all("," not in env["CUDA_VISIBLE_DEVICES"] for env in envs)
    # 16 cores a GPU: 8 pairs a GPU, four at most, of which the memory holds 139 // 40 = 3
    assert _per_gpu(envs) == {gpu: 3 for gpu in gpus}
    # the slots take the GPUs in turn: the first `count` slots are one on each GPU
    assert [env["CUDA_VISIBLE_DEVICES"] for env in envs[:count]] == gpus


@pytest.mark.parametrize("count", [2, 4, 8])
def test_slots_a_gpu_gets_follow_its_memory_and_the_cores(monkeypatch, count):
    memory = [H200 if i % 2 == 0 else 80 * GIB for i in range(count)]      # H200s beside 80 GiB GPUs
    _host(monkeypatch, count, memory)
    jobs = machines.default_jobs("cuda", PER_GRADING)
    per_gpu = _per_gpu(machines.slots("cuda", jobs, PER_GRADING))
    assert per_gpu == {str(i): (3 if i % 2 == 0 else 2) for i in range(count)}      # 139 // 40, 80 // 40
    # more asked for than the memory holds: no GPU gets more than its room, and the pool says why
    per_gpu = _per_gpu(machines.slots("cuda", 100, PER_GRADING))
    assert all(n <= memory[int(gpu)] // PER_GRADING for gpu, n in per_gpu.items())
    assert machines.SlotPool("cuda", 100, PER_GRADING).note.startswith(f"grading {sum(per_gpu.values())} at once")
    # few cores: the cores are shared among the GPUs, one a GPU at least
    _host(monkeypatch, count, memory, cores=2)
    assert _per_gpu(machines.slots("cuda", machines.default_jobs("cuda", PER_GRADING), PER_GRADING)) == \
        {str(i): 1 for i in range(count)}
    # memory not known: one a GPU by default, and --jobs N spread in turn over all of them
    monkeypatch.setattr(machines, "cuda_device_memory", lambda: [])
    assert machines.default_jobs("cuda", PER_GRADING) == count
    per_gpu = _per_gpu(machines.slots("cuda", 3 * count + 1, PER_GRADING))
    assert per_gpu["0"] == 4 and all(per_gpu[str(i)] == 3 for i in range(1, count))


def test_a_visible_device_list_is_graded_on_those_devices(monkeypatch):
    _host(monkeypatch, 2, visible="3,5")
    assert machines.visible_gpus() == ["3", "5"]
    assert _per_gpu(machines.slots("cuda", 4, PER_GRADING)) == {"3": 2, "5": 2}
    # as CUDA reads the list: spaces around the entries, and no more entries than devices it found
    _host(monkeypatch, 2, visible=" 6 , 2,7")
    assert machines.visible_gpus() == ["6", "2"]
    _host(monkeypatch, 2, visible="GPU-aaaa,GPU-bbbb")
    assert set(_per_gpu(machines.slots("cuda", 2))) == {"GPU-aaaa", "GPU-bbbb"}
    _host(monkeypatch, 0, visible="")
    assert machines.visible_gpus() == []
    with pytest.raises(RuntimeError):
        machines.SlotPool("cuda", 2, PER_GRADING)


@pytest.mark.parametrize("count", [2, 4, 8])
def test_the_pool_runs_gradings_on_every_gpu_never_more_on_one_than_it_holds(monkeypatch, count):
    _host(monkeypatch, count, [H200] + [80 * GIB] * (count - 1))      # room 3, then 2 each
    jobs = machines.default_jobs("cuda", PER_GRADING)
    pool = machines.SlotPool("cuda", jobs, PER_GRADING)
    lock = threading.Lock()
    inside, most, ran = collections.Counter(), collections.Counter(), collections.Counter()

    def grading(i, env):
        gpu = env["CUDA_VISIBLE_DEVICES"]
        with lock:
            inside[gpu] += 1
            most[gpu] = max(most[gpu], inside[gpu])
            ran[gpu] += 1
        time.sleep(0.01)
        with lock:
            inside[gpu] -= 1

    threads = [threading.Thread(target=lambda k=k: [pool.run(grading, i) for i in range(k, 6 * jobs, jobs)])
               for k in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert set(ran) == {str(i) for i in range(count)}
    assert sum(ran.values()) == 6 * jobs
    assert most["0"] <= 3 and all(most[str(i)] <= 2 for i in range(1, count))


class _FakeProps:
    def __init__(self, uuid):
        if uuid is not None:
            self.uuid = uuid


@pytest.mark.parametrize("count", [2, 4, 8])
@pytest.mark.parametrize("with_uuid", [True, False])
def test_each_slot_keys_its_gpu_apart(monkeypatch, count, with_uuid):
    """gpu_key names the device a slot's process opens: its uuid, or where torch gives none its
    CUDA_VISIBLE_DEVICES. A fake torch stands for the driver: the one device a slot's process
    sees is the one its CUDA_VISIBLE_DEVICES names."""
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_properties=lambda index: _FakeProps(
        f"uuid-of-{os.environ['CUDA_VISIBLE_DEVICES']}" if with_uuid else None)))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    _host(monkeypatch, count, visible=",".join(str(2 * i + 1) for i in range(count)))
    keys = {}
    for env in machines.slots("cuda", machines.default_jobs("cuda", PER_GRADING), PER_GRADING):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env["CUDA_VISIBLE_DEVICES"])
        gpu_turns.gpu_key.cache_clear()
        keys.setdefault(env["CUDA_VISIBLE_DEVICES"], set()).add(gpu_turns.gpu_key())
    gpu_turns.gpu_key.cache_clear()
    assert all(len(k) == 1 for k in keys.values()), "every slot of one GPU keys it alike"
    assert len({k for ks in keys.values() for k in ks}) == count, "no two GPUs share a key"


def test_timing_turns_on_two_gpus_do_not_wait_for_each_other(tmp_path):
    with gpu_turns.turn("gpu-uuid-of-1", exclusive=True, folder=tmp_path) as first:
        assert first.alone
        t = time.monotonic()
        with gpu_turns.turn("gpu-uuid-of-3", exclusive=True, folder=tmp_path, wait_s=5) as other:
            assert other.alone and time.monotonic() - t < 1
        # the same GPU does wait
        with gpu_turns.turn("gpu-uuid-of-1", exclusive=True, folder=tmp_path, wait_s=0.3) as same:
            assert not same.alone


def test_gpu_quiet_watches_the_slots_own_gpu(monkeypatch):
    """gpu_quiet's NVML handle (sandbox/nvml.handle): by the uuid of the device the slot opened,
    and where NVML does not know that uuid, by the physical index its CUDA_VISIBLE_DEVICES names."""
    from grader.sandbox import nvml

    class NVMLError(Exception):
        pass
    by_uuid = {"GPU-u3": "handle of 3", "GPU-u5": "handle of 5"}

    def get_by_uuid(uuid):
        if uuid not in by_uuid:
            raise NVMLError(uuid)
        return by_uuid[uuid]
    fake_nvml = types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=lambda: None, nvmlDeviceGetHandleByUUID=get_by_uuid,
                                      nvmlDeviceGetHandleByIndex=lambda i: f"handle of index {i}")
    uuid_of = {"3": "u3", "5": "u5", "6": "u6"}
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        get_device_properties=lambda index: _FakeProps(uuid_of[os.environ["CUDA_VISIBLE_DEVICES"]])))
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    for visible, handle in (("3", "handle of 3"), ("5", "handle of 5"), ("6", "handle of index 6")):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert nvml.handle(0) == (handle, None)


# -- which GPU a grading ran on, in its report -------------------------------------------
def test_the_report_says_which_gpu_a_grading_ran_on(monkeypatch, tmp_path):
    import json

    from grader.grading import report, report_reader, state_records
    from grader.assignment import Assignment
    from grader.grading.scoring import score
    from grader.validate.matrix import schema_problems
    from toy_reports import REPO
    assert gpu_of("cpu") == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    instructor = {"seed": 1, "gpu": gpu_of("cuda")}
    assert instructor["gpu"] == {"visible": "5", "uuid": None}
    # the test process says which device it opened (pytest_plugin, state_records.DEVICE)
    (tmp_path / state_records.DEVICE).write_text(json.dumps({"device_name": "NVIDIA H200", "cuda": "12.8",
                                                             "uuid": "GPU-0123"}))
    l1 = Assignment.load(REPO / "assignment/l1_paged_kv_write")
    read_state(tmp_path, l1, 0, "", instructor, {})
    assert instructor["gpu"] == {"visible": "5", "uuid": "GPU-0123"}
    for gpu in (instructor["gpu"], "cpu"):
        built = report.build(l1, score(l1, [], "cuda"), [], submission={}, environment={}, sandbox={},
                             phases={}, instructor={"seed": 1, "gpu": gpu})
        assert report_reader.gpu(built) == gpu
        assert [p for p in schema_problems(built) if "instructor" in p] == []
    built["extra_data"]["instructor"]["gpu"] = "cuda:0"
    assert [p for p in schema_problems(built) if "instructor" in p]


def test_the_device_uuid_is_written_as_nvml_writes_it():
    device_uuid = machines.device_uuid
    assert device_uuid(_FakeProps("58e7-aa")) == "GPU-58e7-aa"
    assert device_uuid(_FakeProps("GPU-58e7")) == "GPU-58e7"
    assert device_uuid(_FakeProps(None)) == ""


def test_a_cpu_grading_reports_cpu(toy_report):
    assert toy_report("good")["extra_data"]["instructor"]["gpu"] == "cpu"
