"""How the performance area times a write: the cases, their inputs, the copy ceiling.

Trust comes from five rules: the grader's own process holds the clock; the clock stops
when this process sees the outputs written, not when the worker says it is done (rows
picked after the inputs are written, unknown to the worker, read from here: a worker
that fakes its synchronize cannot stop the clock early); every timed launch gets inputs
written after the worker has mapped them (fresh values and fresh, distinct slots each
repeat), so nothing can be computed ahead or replayed; every launch's output is checked
afterwards (rows drawn by the grader after each window, and every row after the last), so a
launch that was skipped fails the test; and the reference is timed before any of the
submission's code has run (conftest.py, or an earlier grading on the same GPU, grader/gpu/memo.py),
so nothing the submission starts can slow the reference down and lift its own ratio. A time
below what the memory system allows is rejected outright.
"""
from __future__ import annotations

import collections
import os
import statistics
import time
import zlib

import torch

# (T, H, D, dtype, layout, launches per timed batch): a prefill-sized batch, a decode-sized
# one of a wide model, and an H*D that is not a power of two. Each launch keeps the GPU busy
# longer than it takes the host to launch, so the figure is bandwidth, not the jitter of two
# processes' Python: at H = 8 a 4096-token write is 13 us of GPU work against 17 us of launch
# (docs/performance.md), and the reference against itself scored 0.64-1.19 there over seven
# gradings on the H200; at H = 32 it is 37 us. A wrapper that synchronises or copies still shows.
# 16 (64) launches make a batch of about 2.2 ms of GPU work: with half as many, the round trip
# taken off each window (about 0.8 ms, give or take 0.2) moved the reference against itself to
# 0.84-0.86 on one case of a lone grading on the H200 (docs/performance.md).
CASES = {
    "prefill-fp16-fused": (65536, 8, 128, torch.float16, "fused", 16),
    "decode-bf16-fused-h32": (4096, 32, 128, torch.bfloat16, "fused", 64),
    "hd640-fp16-plain": (65536, 8, 80, torch.float16, "plain", 16),
}
REPEATS = 9
BLOCK_SIZE = 16
SAMPLED_ROWS = 32768    # rows of a batch compared after a window that is not its series' last (shared by
                        # its launches): a bound on the check's temporaries, 256 MB at H*D = 4096
# A batch's launches read their rows from a few sets in turn, not a set each, and write distinct
# slots of caches an eighth larger than they fill: a grading's GPU memory is what decides how many
# share a GPU, and a set of rows each for 16 prefill launches came to 6.4 GB of its 16.8 GiB peak.
# A set is read again only after the launches between have moved REUSE_GAP_BYTES, ten times the L2
# of an H100 or H200 (50 MB), so every read still comes from memory and the figure stays bandwidth.
REUSE_GAP_BYTES = 512 << 20
SPARE_SLOTS = 8         # one slot in this many more than the batch writes: writes off its slots show
WATCHED_ROWS = 256      # rows the clock waits for: a worker that left even 1% of its rows to finish
                        # after answering is seen with probability 1 - 0.99**256 > 92%

_CEILINGS: list[float] = []
WARM_COPIES = 24        # untimed copies before the ceiling's: about 16 ms of the GPU's work on an H100
# Where a timing's seconds go in this process (refilling inputs, the calls around their window,
# the window, checking outputs): a test reports what its own timing added (instructor detail).
SPENT: dict[str, float] = collections.defaultdict(float)


def spent_since(before: dict[str, float]) -> dict[str, float]:
    return {f"spent_{k}": round(v - before.get(k, 0.0), 4) for k, v in SPENT.items()}


def copy_ceiling(device) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + written), measured now (with
    the reference's timing, conftest.py); the highest measured in this run is returned. On the
    H200 one grading measured 4.23 TB/s in its first test and 3.80 in the next two, and a
    ceiling measured low flags honest times as too fast. So the copies are timed only after
    WARM_COPIES untimed ones back to back, and a timing window measures it at its start and at
    its end (docs/timing.md, "A copy ceiling measured low")."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(WARM_COPIES):
        dst.copy_(src)
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    _CEILINGS.append(2 * src.numel() / min(times))
    # Given back at once: two GiB kept by the caching allocator would count in every
    # grading's peak of GPU memory, and so in how many gradings a GPU holds.
    del src, dst
    torch.cuda.empty_cache()
    return max(_CEILINGS)


def case_seed(run_seed: int, case: str) -> int:
    """The same inputs for the reference and the submission, new ones every run."""
    return zlib.crc32(f"{run_seed}:performance:{case}".encode())


def launch_bytes(T: int, HD: int, itemsize: int) -> int:
    """What one launch moves: its tokens' key and value rows read and written, its slots read."""
    return 4 * T * HD * itemsize + 8 * T


class Batch:
    """n launches' inputs in one proxy's shared memory, refilled before each timing: each launch
    its own slots, its rows one of `sets` sets taken in turn."""

    def __init__(self, proxy, case: str, seed: int):
        T, H, D, dtype, layout, n = CASES[case]
        self.T, self.n, self.HD = T, n, H * D
        self.sets = min(n, 1 + -(-REUSE_GAP_BYTES // launch_bytes(T, H * D, dtype.itemsize)))
        alloc = proxy.exchange.empty
        # Plain key and value get rows of their own: had value been key, its read would come
        # from the cache, not memory, and not all the bytes counted would be moved.
        self.rows = alloc((self.sets, T, 3 * H * D) if layout == "fused" else (self.sets, 2, T, H * D), dtype)
        self.slot_table = alloc((n, T), torch.int64)
        blocks = -(-(n * T * (SPARE_SLOTS + 1)) // (SPARE_SLOTS * BLOCK_SIZE))
        self.k_cache = alloc((blocks, BLOCK_SIZE, H, D), dtype)
        self.v_cache = alloc((blocks, BLOCK_SIZE, H, D), dtype)
        if layout == "fused":
            self.keys = [self.rows[i % self.sets, :, H * D:2 * H * D].view(T, H, D) for i in range(n)]
            self.values = [self.rows[i % self.sets, :, 2 * H * D:].view(T, H, D) for i in range(n)]
        else:
            self.keys = [self.rows[i % self.sets, 0].view(T, H, D) for i in range(n)]
            self.values = [self.rows[i % self.sets, 1].view(T, H, D) for i in range(n)]
        self.layout = layout
        self.gen = torch.Generator(device=self.rows.device).manual_seed(seed)
        # The watched rows are drawn from a generator of this process only, seeded afresh, so
        # that neither the inputs nor the seed tell the worker which rows they are.
        self.watch_gen = torch.Generator(device=self.rows.device).manual_seed(
            int.from_bytes(os.urandom(8), "little") & (2**63 - 1))

    def calls(self):
        return [((self.keys[i], self.values[i], self.k_cache, self.v_cache, self.slot_table[i]), {})
                for i in range(self.n)]

    def refill(self):
        began = time.perf_counter()
        self._refill()
        SPENT["refill_s"] += time.perf_counter() - began

    def _refill(self):
        self.rows.normal_(generator=self.gen)
        self.k_cache.zero_()
        self.v_cache.zero_()
        # The cache's first and last slots are in every batch, at drawn places; the rest are
        # drawn from the slots between. Drawn with the others, slot 0 was in half the batches,
        # and a file that takes slot 0 for padding lost a case or not by how many windows a
        # busy neighbour made its grading time again: the same file and seed scored 88 in the
        # grading service and 83 in grade-all on the H200.
        total, count, device = self.k_cache.shape[0] * BLOCK_SIZE, self.n * self.T, self.rows.device
        inner = torch.randperm(total - 2, generator=self.gen, device=device)[: count - 2] + 1
        slots = torch.cat([torch.tensor([0, total - 1], device=device), inner])
        slots = slots[torch.randperm(count, generator=self.gen, device=device)]
        self.slot_table.copy_(slots.view(self.n, self.T))
        self._watch()

    def _watch(self):
        """Pick the rows whose arrival stops the clock, and what they must hold."""
        pick = torch.randint(0, self.n * self.T, (WATCHED_ROWS,), generator=self.watch_gen, device=self.rows.device)
        call, token = pick // self.T, pick % self.T
        self.watch_k, self.watch_v = (rows.clone() for rows in self._sources(call, token))
        self.watch_slots = self.slot_table[call, token].clone()

    def _sources(self, call: torch.Tensor, token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The key and value rows of launch `call`'s token `token` (index tensors of one shape),
        each gathered alone: gathering whole fused rows first would copy the query's third too."""
        rows = call % self.sets
        if self.layout == "fused":
            return self.rows[rows, token, self.HD:2 * self.HD], self.rows[rows, token, 2 * self.HD:]
        return self.rows[rows, 0, token], self.rows[rows, 1, token]

    def settled(self) -> bool:
        """Do the watched rows hold their values, as seen from this process? Reads go to memory
        the worker writes from its own CUDA context, so nothing it does in its process (a
        patched synchronize, an early answer) can make this true before its kernels wrote them."""
        return (torch.equal(self.k_cache.view(-1, self.HD)[self.watch_slots], self.watch_k)
                and torch.equal(self.v_cache.view(-1, self.HD)[self.watch_slots], self.watch_v))

    def check(self, whole: bool = True) -> bool:
        """Did every launch write its tokens' rows? `whole`: every row of every launch, and nothing
        else written. Otherwise SAMPLED_ROWS rows of the batch, shared by its launches and drawn
        now from the grader's own generator: a launch skipped is seen for certain, and one that left
        a share of its rows unwritten almost so (at 2,048 rows a launch, one that skipped 0.1% of
        its rows with probability 1 - 0.999**2048 > 87%, in each of 16 launches and 8 windows), for
        a fraction of the time and memory. A series checks every window but its last by sample and
        its last whole (timed), each window before the next refill overwrites it."""
        bits = {2: torch.int16, 4: torch.int32}[self.k_cache.element_size()]
        caches = self.k_cache.view(-1, self.HD), self.v_cache.view(-1, self.HD)
        if not whole:
            per_launch, device = SAMPLED_ROWS // self.n, self.rows.device
            if per_launch >= self.T:            # a small batch: every row
                token = torch.arange(self.T, device=device).expand(self.n, self.T)
            else:
                token = torch.randint(0, self.T, (self.n, max(1, per_launch)), generator=self.watch_gen, device=device)
            call = torch.arange(self.n, device=self.rows.device)[:, None].expand_as(token)
            slots = self.slot_table[call, token].reshape(-1)
            return all(torch.equal(cache[slots].view(bits), src.reshape(-1, self.HD).view(bits))
                       for cache, src in zip(caches, self._sources(call, token)))
        return self._check_whole(bits, caches)

    def _check_whole(self, bits, caches) -> bool:
        """Launch by launch; then the compared rows are zeroed, what is left must be all zero
        bits, and the rows are put back (round_trip's look at the watched rows needs them). The
        caches are gigabytes: no temporary of their size is made."""
        sources = (self.keys, self.values)
        for i in range(self.n):
            slots = self.slot_table[i]
            for cache, src in zip(caches, sources):
                if not torch.equal(cache[slots].view(bits), src[i].reshape(-1, self.HD).view(bits)):
                    return False
        clean = True
        for cache, src in zip(caches, sources):
            cache.index_fill_(0, self.slot_table.reshape(-1), 0)
            flat = cache.view(bits)      # amax and amin: any() would make a bool copy of gigabytes
            clean = clean and int(flat.amax()) == 0 and int(flat.amin()) == 0
            for i in range(self.n):
                cache.index_copy_(0, self.slot_table[i], src[i].reshape(-1, self.HD))
        return clean

    @property
    def bytes_moved(self) -> int:
        return self.n * launch_bytes(self.T, self.HD, self.rows.element_size())


def timed(proxy, batch: Batch, repeats: int = 1) -> list[float]:
    """Wall seconds of `repeats` timed batches over the same mapped inputs, refilled before each
    and checked after each (Batch.check: by sample, and the last whole)."""
    began, refilled, checked = time.perf_counter(), SPENT["refill_s"], SPENT["check_s"]

    windows = []

    def check(seconds: float) -> None:
        checking = time.perf_counter()
        SPENT["window_s"] += seconds
        windows.append(seconds)
        correct = batch.check(whole=len(windows) == repeats)
        SPENT["check_s"] += time.perf_counter() - checking
        assert correct, ("a timed launch did not leave the expected cache, so its time cannot count: "
                         "either the write is wrong on these inputs (random slots, slot 0 included; "
                         "see the write, padding and strided_qkv areas) or a launch was skipped or "
                         "replayed. Speed is scored only for correct output.")
    try:
        return proxy.time_repeats("reshape_and_cache", batch.calls(), repeats, refill=batch.refill,
                                  settled=batch.settled, after=check)
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()    # the checks' temporaries: not held into the next test
        SPENT["calls_s"] += (time.perf_counter() - began - (SPENT["refill_s"] - refilled)
                             - (SPENT["check_s"] - checked))


def round_trip(proxy, batch: Batch) -> float:
    """What a timed window holds besides the launches: an empty batch's window, closed by one
    look at `batch`'s watched rows (written by the timed batch before, so the look succeeds)."""
    return statistics.median(proxy.time_calls("reshape_and_cache", [], settled=batch.settled) for _ in range(5))
