"""Time your reshape_and_cache on your own NVIDIA GPU, the way the grader times it, and estimate
the points of the performance area.

    python bench_mine.py                        # times l1_paged_kv_write.py beside this file
    python bench_mine.py --submission other.py  # or another file

For each of the three timed cases of the statement it prints the bandwidth of your
reshape_and_cache (whole Python calls launched back to back, as the grader times them), of a plain
PyTorch scatter of the same bytes, and the copy ceiling of this GPU (a 1 GiB device-to-device copy).
Then the points your kernel would get if the reference ran at the statement's figures for the
H200: exact on an H200, and on another GPU an estimate scaled by the two copy ceilings. The grade
itself comes only from the grader, which times the reference in the same run.
"""
import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

# The grader's timed cases: (T, H, D, dtype, key/value layout, launches per timed batch).
CASES = {
    "prefill-fp16-fused": (65536, 8, 128, "fp16", "fused", 16),
    "decode-bf16-fused-h32": (4096, 32, 128, "bf16", "fused", 64),
    "hd640-fp16-plain": (65536, 8, 80, "fp16", "plain", 16),
}
# The statement's figures: the reference on the H200, GB/s per case, and that GPU's copy ceiling
# (performance.md in this bundle).
REFERENCE_GBPS = {"prefill-fp16-fused": 3995, "decode-bf16-fused-h32": 3783, "hd640-fp16-plain": 3951}
H200_CEILING_GBPS = 4284
# The performance area: its points, and the curve from measure = the reference's time / yours to
# the fraction of a test's points (linear in between, flat beyond the ends).
POINTS = 15
CURVE = ((0.25, 0.0), (0.7, 1.0))
BLOCK_SIZE = 16
FILENAME = "l1_paged_kv_write.py"


def credit(measure: float) -> float:
    (x0, y0), (x1, y1) = CURVE
    if measure <= x0:
        return y0
    if measure >= x1:
        return y1
    return y0 + (y1 - y0) * (measure - x0) / (x1 - x0)


def parse(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Needs an NVIDIA GPU: the CPU interpreter's times say nothing about a GPU's.")
    parser.add_argument("--submission", metavar="PATH", type=Path,
                        default=Path(__file__).resolve().parent / FILENAME,
                        help=f"the file to time (default: {FILENAME} beside this script)")
    parser.add_argument("--repeats", type=int, default=9, help="timed batches per case; the best counts (9)")
    parser.add_argument("--launches", type=int, default=None,
                        help="calls per timed batch (default: the grader's, fewer where GPU memory is short)")
    parser.add_argument("--case", choices=sorted(CASES), action="append",
                        help="time only this case (repeatable; default: all three)")
    return parser.parse_args(argv)


def load(path: Path):
    spec = importlib.util.spec_from_file_location("l1_submission", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["l1_submission"] = module
    spec.loader.exec_module(module)
    return module


class Batch:
    """`n` calls' worth of inputs, as the grader builds them: fresh rows and fresh, distinct slots
    before every timed batch, half the cache's slots never written."""

    def __init__(self, torch, case: str, n: int, device: str = "cuda"):
        T, H, D, dtype, layout, _ = CASES[case]
        self.torch, self.T, self.n, self.HD, self.device = torch, T, n, H * D, device
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        if layout == "fused":
            self.rows = torch.empty(n, T, 3 * H * D, dtype=dt, device=device)
            self.keys = [self.rows[i, :, H * D:2 * H * D].view(T, H, D) for i in range(n)]
            self.values = [self.rows[i, :, 2 * H * D:].view(T, H, D) for i in range(n)]
        else:
            self.rows = torch.empty(n, 2, T, H * D, dtype=dt, device=device)
            self.keys = [self.rows[i, 0].view(T, H, D) for i in range(n)]
            self.values = [self.rows[i, 1].view(T, H, D) for i in range(n)]
        blocks = -(-(2 * n * T) // BLOCK_SIZE)
        self.k_cache = torch.empty(blocks, BLOCK_SIZE, H, D, dtype=dt, device=device)
        self.v_cache = torch.empty_like(self.k_cache)
        self.slots = torch.empty(n, T, dtype=torch.int64, device=device)

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    @staticmethod
    def bytes_per_call(torch, case: str) -> int:
        T, H, D, dtype, layout, _ = CASES[case]
        size = 2
        rows = T * (3 if layout == "fused" else 2) * H * D * size
        caches = 2 * 2 * T * H * D * size                      # two caches, twice the slots needed
        return rows + caches + 8 * T

    def refill(self):
        torch = self.torch
        self.rows.normal_()
        self.k_cache.zero_()
        self.v_cache.zero_()
        slots = torch.randperm(self.k_cache.shape[0] * BLOCK_SIZE, device=self.device)[: self.n * self.T]
        self.slots.copy_(slots.view(self.n, self.T))
        self.sync()

    def calls(self):
        return [(self.keys[i], self.values[i], self.k_cache, self.v_cache, self.slots[i]) for i in range(self.n)]

    def right(self) -> bool:
        """Did every call of the batch write its rows? (A sample of each call's rows.)"""
        torch = self.torch
        pick = torch.randint(0, self.T, (min(self.T, 4096),), device=self.device)
        for i in range(self.n):
            slots = self.slots[i, pick]
            for cache, src in ((self.k_cache, self.keys[i]), (self.v_cache, self.values[i])):
                if not torch.equal(cache.view(-1, self.HD)[slots], src.reshape(self.T, self.HD)[pick]):
                    return False
        return True

    @property
    def bytes_moved(self) -> int:
        return self.n * (4 * self.T * self.HD * self.rows.element_size() + 8 * self.T)


def timed(torch, fn, batch: Batch, repeats: int) -> tuple[float, bool]:
    """(the best wall time of one batch of calls, less an empty batch's, and whether the output
    of the last one was right)."""
    def window(calls):
        batch.refill()
        began = time.perf_counter()
        for args in calls:
            fn(*args)
        batch.sync()
        return time.perf_counter() - began
    window(batch.calls())                                    # compile and warm up
    empty = statistics.median(window([]) for _ in range(5))
    best = min(window(batch.calls()) for _ in range(repeats))
    return max(best - empty, 1e-9), batch.right()


def pytorch_scatter(key, value, k_cache, v_cache, slot_mapping):
    """The same bytes moved by PyTorch indexing: what a write without a kernel of your own reaches."""
    row = key.shape[1] * key.shape[2]
    k_cache.view(-1, row)[slot_mapping] = key.reshape(-1, row)
    v_cache.view(-1, row)[slot_mapping] = value.reshape(-1, row)


def copy_ceiling(torch) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + written), the best of five."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (1 << 30) / min(times)


def main(argv=None) -> int:
    args = parse(argv)
    import torch
    if not torch.cuda.is_available():
        print("bench_mine.py needs an NVIDIA GPU: on the CPU, Triton's interpreter runs one program "
              "after another, and its times say nothing about a GPU's.", file=sys.stderr)
        return 2
    if not args.submission.is_file():
        print(f"no submission at {args.submission}: pass --submission PATH", file=sys.stderr)
        return 2
    sub = load(args.submission)
    gpu = torch.cuda.get_device_name()
    ceiling = copy_ceiling(torch) / 1e9
    h200 = "H200" in gpu
    print(f"{gpu}: copy ceiling {ceiling:,.0f} GB/s (the statement's H200: {H200_CEILING_GBPS:,} GB/s)")
    print(f"{'case':24} {'calls':>5} {'yours GB/s':>11} {'of ceiling':>10} {'PyTorch GB/s':>12} "
          f"{'measure':>8} {'points':>7}")
    cases = args.case or list(CASES)
    share = POINTS / len(CASES)
    total = scaled_total = 0.0
    for case in cases:
        n = args.launches or CASES[case][5]
        free, _ = torch.cuda.mem_get_info()
        n = max(1, min(n, int(0.6 * free) // Batch.bytes_per_call(torch, case)))
        batch = Batch(torch, case, n)
        t_mine, right = timed(torch, sub.reshape_and_cache, batch, args.repeats)
        t_torch, _ = timed(torch, pytorch_scatter, batch, args.repeats)
        mine, scatter = batch.bytes_moved / t_mine / 1e9, batch.bytes_moved / t_torch / 1e9
        # measure = the reference's time / yours = your bandwidth / the reference's
        measure = mine / REFERENCE_GBPS[case] if right else 0.0
        scaled = (mine / ceiling) / (REFERENCE_GBPS[case] / H200_CEILING_GBPS) if right else 0.0
        points, scaled_points = share * credit(measure), share * credit(scaled)
        total, scaled_total = total + points, scaled_total + scaled_points
        shown = measure if h200 else scaled
        print(f"{case:24} {n:>5} {mine:>11,.0f} {mine / ceiling:>10.1%} {scatter:>12,.0f} "
              f"{shown:>8.2f} {(points if h200 else scaled_points):>7.2f}")
        if not right:
            print(f"  {case}: your kernel left wrong rows in the caches, and the grader scores speed "
                  f"only for a correct write: 0 points here. Run the public tests first.")
        del batch
        torch.cuda.empty_cache()
    print(f"performance, if the reference ran at the statement's H200 figures: {total:.2f} / "
          f"{share * len(cases):g} points (measure = your GB/s / the reference's)")
    if not h200:
        print(f"scaled to this GPU by the copy ceilings ({ceiling:,.0f} here, {H200_CEILING_GBPS:,} on the "
              f"H200): about {scaled_total:.2f} / {share * len(cases):g}. An estimate: the grade is the "
              f"grader's, on the H200.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
