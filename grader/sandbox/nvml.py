"""NVML, where the GPU says which processes used it: the one place the grader opens it.

Both readers of per-process utilisation go through here: the quiet timing windows
(grader/gpu/quiet.py), which wait for foreign work to end, and the watch on frozen workers
(gpu_watch.py), which ends a worker whose GPU work outlives its call.
"""
from __future__ import annotations

import os
from typing import NamedTuple


class Sample(NamedTuple):
    pid: int
    stamp_us: int       # NVML's CPU timestamp of the sample
    sm: int             # percent of the sample's period with a kernel of pid running
    mem: int            # percent with pid reading or writing memory


def handle(index: int):
    """(NVML handle of cuda:index, None) or (None, why there is none)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML did not start: {exc}"
    import torch
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    for candidate in (uuid, f"GPU-{uuid}"):
        if not uuid:
            break
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(candidate), None
        except pynvml.NVMLError:
            continue
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.split(",")[index].strip().isdigit():
        try:
            nvml_index = index if visible is None else int(visible.split(",")[index])
            return pynvml.nvmlDeviceGetHandleByIndex(nvml_index), None
        except (pynvml.NVMLError, ValueError, IndexError) as exc:
            return None, f"NVML does not know cuda:{index}: {exc}"
    return None, f"NVML does not know cuda:{index} (uuid {uuid})"


def busy_since(gpu, since_us: int) -> list[Sample]:
    """Every sample after since_us in which a process used the GPU at all."""
    import pynvml
    try:
        samples = pynvml.nvmlDeviceGetProcessUtilization(gpu, since_us)
    except pynvml.NVMLError_NotFound:
        return []                      # no process used the GPU since then
    return [Sample(s.pid, s.timeStamp, s.smUtil, s.memUtil) for s in samples
            if s.timeStamp > since_us and (s.smUtil or s.memUtil)]
