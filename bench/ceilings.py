"""What plain copies reach on this GPU: the ceilings the bench divides by.

The copy ceiling is torch copying 1 GiB from one buffer to another. The L1 write is not
quite a copy, though: it writes whole blocks (block_size tokens of H*D values, a "run")
to places the slots choose, so its writes land in runs scattered over the cache. The
scattered-copy ceiling asks what scattering alone costs: a copy with the write's shape
that needs no slots at all, because the run a source row goes to is computed, as a
fixed permutation of the destination runs. Whatever the write loses beyond it, it loses
to reading slots, to padding and to its own code; whatever both lose, scattering costs.
"""
from __future__ import annotations

import math
import statistics

import torch
import triton
import triton.language as tl

# (rows per program, warps): the reference's shape, two and four rows a program (short rows need more
# bytes in flight than one row gives), and one program per whole run.
COPY_SHAPES = ((1, 1), (2, 1), (4, 2), (16, 8))


@triton.jit
def _run_copy(src, dst, n_rows, stride_runs, runs_dst, ROW: tl.constexpr, RUN_ROWS: tl.constexpr,
              ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Source row i goes to row i % RUN_ROWS of destination run (i // RUN_ROWS) * stride_runs % runs_dst."""
    i = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    run = (i // RUN_ROWS) * stride_runs % runs_dst
    row = run * RUN_ROWS + i % RUN_ROWS
    offs = tl.arange(0, BLOCK)
    mask = (offs[None, :] < ROW) & (i[:, None] < n_rows)
    values = tl.load(src + i[:, None] * ROW + offs[None, :], mask=mask)
    tl.store(dst + row[:, None] * ROW + offs[None, :], values, mask=mask)


def scattering_stride(runs_dst: int) -> int:
    """A stride coprime with runs_dst near its golden section, so that consecutive source runs land
    far apart and every destination run is hit at most once."""
    return next(s for s in range(int(runs_dst * 0.618) or 1, runs_dst + 1) if math.gcd(s, runs_dst) == 1)


def run_copy(src: torch.Tensor, dst: torch.Tensor, run_rows: int, stride: int, rows: int = 1, warps: int = 1):
    """Copy the rows of src [n, row] into dst [runs_dst * run_rows, row] run by run, source run r going
    to destination run r * stride % runs_dst (stride 1: in order)."""
    n_rows, row = src.shape
    _run_copy[(triton.cdiv(n_rows, rows),)](src, dst, n_rows, stride, dst.shape[0] // run_rows, ROW=row,
                                           RUN_ROWS=run_rows, ROWS=rows, BLOCK=1 << (row - 1).bit_length(),
                                           num_warps=warps)


def destination_rows(n_rows: int, run_rows: int, runs_dst: int, stride: int) -> torch.Tensor:
    """The destination row of every source row under run_copy: what a test checks it against."""
    i = torch.arange(n_rows)
    return (i // run_rows) * stride % runs_dst * run_rows + i % run_rows


def copy_ceiling(timer, reps: int) -> float:
    """Bytes per second of torch copying 1 GiB (read plus written)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    seconds = statistics.median(timer(lambda: dst.copy_(src), reps))
    return 2 * src.numel() / seconds


def run_copy_rates(timer, reps: int, T: int, H: int, D: int, block_size: int, dtype=torch.float16) -> dict:
    """Bytes per second of copying the 2*T rows of H*D values a write of T tokens moves (K and V)
    into a destination three times as large (the bench's caches), in runs of block_size rows:
    in order, and scattered. Each is the best of COPY_SHAPES."""
    src = torch.randn(2 * T, H * D, device="cuda").to(dtype)
    runs = -(-2 * T // block_size)
    dst = torch.empty(3 * runs * block_size, H * D, dtype=dtype, device="cuda")
    nbytes = 2 * src.numel() * src.element_size()
    rates = {}
    for order, stride in (("in order", 1), ("scattered", scattering_stride(3 * runs))):
        best = min(statistics.median(timer(lambda: run_copy(src, dst, block_size, stride, rows, warps), reps))
                   for rows, warps in COPY_SHAPES)
        rates[order] = nbytes / best
    return rates
