"""What this machine grades on: its CUDA devices (asked of the driver, not of torch, which
would cost the trusted process seconds to import), the device a run resolves to, and the
slots that gradings side by side run in."""
from __future__ import annotations

import ctypes
import os
from queue import Queue


def _cuda_driver():
    """libcuda, initialised, or None where there is no usable driver."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:                 # no NVIDIA driver on this machine
        return None
    return cuda if cuda.cuInit(0) == 0 else None


def cuda_device_count() -> int:
    """CUDA devices this process may see (CUDA_VISIBLE_DEVICES applies)."""
    cuda, count = _cuda_driver(), ctypes.c_int(0)
    if cuda is None or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def cuda_device_memory() -> list[int]:
    """Total bytes of memory of each CUDA device this process may see; empty if unknown."""
    cuda, device, total = _cuda_driver(), ctypes.c_int(0), ctypes.c_size_t(0)
    sizes = []
    for i in range(cuda_device_count()):
        if cuda.cuDeviceGet(ctypes.byref(device), i) != 0 or cuda.cuDeviceTotalMem_v2(ctypes.byref(total), device) != 0:
            return []
        sizes.append(total.value)
    return sizes


def device_uuid(props) -> str:
    """The uuid of the GPU behind torch's device properties `props` as nvidia-smi and NVML write
    it ("GPU-..."), or "" where torch gives none."""
    uuid = str(getattr(props, "uuid", "") or "")
    return uuid if not uuid or uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


class DeviceUnavailable(Exception):
    """--device cuda on a machine without a usable CUDA device."""


def resolve_device(requested: str) -> str:
    """"cpu" or "cuda" for a requested "auto", "cpu" or "cuda"; DeviceUnavailable when
    "cuda" is asked for and there is none."""
    if requested == "cpu":
        return "cpu"
    if cuda_device_count() > 0:
        return "cuda"
    if requested == "cuda":
        raise DeviceUnavailable("--device cuda asked for, but this machine has no usable CUDA device")
    return "cpu"


def visible_gpus() -> list[str]:
    count = cuda_device_count()
    listed = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


# Gradings at once on one GPU, at most, by default. Past four the GPU's time-slicing among the
# gradings' processes costs each test more than the extra gradings bring: on one H100 with 16
# cores, 24 reference copies went at 19.2 a minute four at once, 19.0 six, 16.6 and 18.4 eight, and
# the reference's slowest seconds in each area summed to 6.9, 10.2, 14.6 and 12.1 s
# (docs/instructor.md, "A nineteenth round"). `--jobs` asks for more.
MOST_AT_ONCE_PER_GPU = 4


def default_jobs(device: str, grading_gpu_bytes: int | None = None) -> int:
    """Gradings at once. A grading keeps about two cores busy (the trusted pytest process and
    the worker); on a GPU machine the cores are shared among the GPUs, and each GPU takes as
    many as its memory holds at grading_gpu_bytes each (one per GPU where that is not known),
    and MOST_AT_ONCE_PER_GPU at most."""
    pairs = max(1, len(os.sched_getaffinity(0)) // 2)
    if device != "cuda":
        return pairs
    gpus = visible_gpus()
    sizes = cuda_device_memory() if grading_gpu_bytes else []
    if len(sizes) != len(gpus) or not gpus:
        return len(gpus)
    per_gpu = max(1, min(MOST_AT_ONCE_PER_GPU, pairs // len(gpus)))
    return sum(max(1, min(per_gpu, size // grading_gpu_bytes)) for size in sizes)


def slots(device: str, jobs: int, grading_gpu_bytes: int | None = None) -> list[dict[str, str]]:
    """The extra environment of each parallel grading: on a GPU machine the gradings are
    spread over the GPUs in turn, and no GPU gets more than its memory holds when each
    grading may use grading_gpu_bytes of it (one at least), so there may be fewer than jobs."""
    if device != "cuda":
        return [{} for _ in range(jobs)]
    gpus = visible_gpus()
    sizes = cuda_device_memory() if grading_gpu_bytes else []
    room = [max(1, size // grading_gpu_bytes) for size in sizes] if len(sizes) == len(gpus) else [jobs] * len(gpus)
    return [{"CUDA_VISIBLE_DEVICES": gpu} for turn in range(jobs) for gpu, n in zip(gpus, room) if turn < n][:jobs]


class SlotPool:
    """Slots to run gradings in, each with its environment from `slots`. `note` says why there
    are fewer than `jobs`, if there are. With `hosts` (a callable env -> context), each slot
    also keeps what `hosts` made for it across the gradings it runs (see grader/warm/hosts.py)."""

    def __init__(self, device: str, jobs: int, grading_gpu_bytes: int | None = None, hosts=None):
        envs = slots(device, jobs, grading_gpu_bytes)
        if not envs:
            raise RuntimeError("no GPU to grade on")     # resolve_device lets no such run start
        self.note = None if len(envs) == jobs else (
            f"grading {len(envs)} at once, not {jobs}: each grading may use {grading_gpu_bytes / 2**30:.0f} GiB "
            "of GPU memory (gpu_memory_gib in assignment.toml) and the GPUs hold no more")
        self.hosts = [hosts(env) for env in envs] if hosts else []
        self._free: Queue = Queue()
        for i in range(len(envs)):
            self._free.put(i)
        self._envs = envs

    def run(self, fn, *args):
        """fn(*args, env) in the first free slot, waiting for one. A slot with a warm host passes
        the host's address in env (see grader/warm/hosts.py)."""
        i = self._free.get()
        try:
            env = dict(self._envs[i])
            if self.hosts:
                env.update(self.hosts[i].env())
            return fn(*args, env)
        finally:
            self._free.put(i)

    def close(self) -> None:
        for host in self.hosts:
            host.close()
