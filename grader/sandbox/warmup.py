"""Triton's first launch in a process, done by the worker before the submission arrives.

The first kernel a process launches pays for Triton's start: its compiler is loaded and
its driver helpers are built with the C compiler into the (fresh, per-worker) cache. On
the H200 that was 1.9 s, against 0.05-0.08 s for each later kernel. Done here, while the
worker waits for its file (a grading host's spare waits a whole grading), it leaves the
submission's first call only its own kernel's compile. Nothing here is the submission's,
and nothing of it is left for the submission to see but Triton's own caches."""
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


def run() -> None:
    x = torch.zeros(16, device="cuda")
    _touch[(1,)](x, 16, BLOCK=16)
    torch.cuda.synchronize()
    if int(x.sum()) != 16:
        raise RuntimeError("Triton's warm-up kernel did not write")
