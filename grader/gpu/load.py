"""Load on a GPU, for checks that what runs beside a grading changes no score: another tenant's
job, as `validate --under-load` and bench/busy_gpu.py run it. It copies a buffer back and forth
on the GPU until it is stopped (or for --seconds), steadily or in bursts.

    python -m grader.gpu.load [--gib 1] [--seconds S] [--burst-s B --pause-s P]

On a host of several GPUs it loads the first one this process sees: CUDA_VISIBLE_DEVICES=3
picks GPU 3, as start(gpu="3") does.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def run(gib: float, seconds: float | None, burst_s: float, pause_s: float) -> None:
    import torch
    n = int(gib * 2**30)
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    stop = time.monotonic() + seconds if seconds else float("inf")
    while time.monotonic() < stop:
        until = time.monotonic() + (burst_s or float("inf"))
        while time.monotonic() < min(until, stop):
            b.copy_(a)
            a.copy_(b)
            torch.cuda.synchronize()
        if pause_s:
            time.sleep(pause_s)


def start(gib: float = 1.0, burst_s: float = 0.0, pause_s: float = 0.0, gpu: str | None = None) -> subprocess.Popen:
    """The load as a child process, up and copying once this returns: on `gpu` (a device as
    CUDA_VISIBLE_DEVICES names it) where given, else on the first device this process sees."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else None
    proc = subprocess.Popen([sys.executable, "-m", "grader.gpu.load", "--gib", str(gib),
                             "--burst-s", str(burst_s), "--pause-s", str(pause_s), "--say-ready"],
                            stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"the GPU load did not start (exit {proc.wait()})")
    return proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0, help="size of the buffer copied (GiB)")
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long (default: never)")
    ap.add_argument("--burst-s", type=float, default=0.0, help="copy this long, then pause (0: no pauses)")
    ap.add_argument("--pause-s", type=float, default=0.0)
    ap.add_argument("--say-ready", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("grader.gpu.load: no GPU here", file=sys.stderr)
        return 2
    torch.empty(1, device="cuda")
    if args.say_ready:
        print("ready", flush=True)
    run(args.gib, args.seconds, args.burst_s, args.pause_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
