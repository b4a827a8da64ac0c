"""Bandwidth of the L1 write on the GPU, against the measured copy ceiling.

    python bench/l1_paged_kv_write.py [--submission FILE] [--out docs/performance.md] [--quick]

Measures, in one run: a 1 GiB device-to-device copy (the ceiling), an empty Triton
kernel (the launch floor), the reference kernel, torch's index_copy_, a CUDA write of
vLLM's shape compiled on the spot (bench/cuda_peer.py), and optionally a submission,
over a grid of token counts, head shapes, dtypes, input layouts and padding. Bytes
moved = K and V read and written for the real tokens, plus the slots.
An instructor's tool: it imports the files it measures; grading never does.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import itertools
import platform
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

import ceilings

REPO = Path(__file__).resolve().parent.parent
TOKENS = (1, 256, 4096, 65536, 262144)
SHAPES = ((8, 128), (32, 128), (8, 64), (8, 80))
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
BLOCK_SIZE = 16
LARGE = 65536      # token counts from here on are bandwidth-bound: the ceilings apply


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem + "_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@triton.jit
def empty_kernel(a, b, c, d, e, f, g, h, BLOCK: tl.constexpr):
    pass


FLUSH = None


def event_times(fn, reps: int) -> list[float]:
    """Seconds per call by CUDA events; a 256 MB read between calls evicts L2 without dirtying it."""
    global FLUSH
    if FLUSH is None:
        FLUSH = torch.ones(64 << 20, dtype=torch.float32, device="cuda")
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        FLUSH.sum()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) / 1e3)
    return out


def graph_times(fn, reps: int) -> list[float]:
    """Seconds of GPU work per call: one call captured in a CUDA graph and replayed, so the
    Python launch cost (tens of microseconds here) stays out of a bandwidth figure."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return event_times(graph.replay, reps)


def per_call_eager(fn, n: int = 200) -> float:
    """Wall seconds per call, n calls back to back: what a launch-bound step costs."""
    import time
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n


def per_call_graph(fn, n: int = 100) -> float:
    """Seconds per call when n calls are replayed from one CUDA graph."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return statistics.median(event_times(graph.replay, 20)) / n


def paged_slots(T: int, num_blocks: int, g, slot_mapping) -> torch.Tensor:
    """Slots of a prefill batch as a server makes them: sequences of 1 to 2048 tokens, each on
    its own physical blocks drawn at random from the cache, through the reference slot_mapping."""
    lens = []
    while sum(lens) < T:
        lens.append(int(torch.randint(1, 2049, (1,), generator=g, device="cuda")))
    lens[-1] -= sum(lens) - T
    per_seq = [-(-n // BLOCK_SIZE) for n in lens]
    physical = torch.randperm(num_blocks, device="cuda", generator=g)[: sum(per_seq)]
    table = torch.zeros(len(lens), max(per_seq), dtype=torch.int32, device="cuda")
    for s, chunk in enumerate(physical.split(per_seq)):
        table[s, : len(chunk)] = chunk.int()
    lens_t = torch.tensor(lens, device="cuda")
    seq_idx = torch.repeat_interleave(torch.arange(len(lens), device="cuda"), lens_t)
    positions = torch.arange(T, device="cuda") - torch.repeat_interleave(lens_t.cumsum(0) - lens_t, lens_t)
    return slot_mapping(table, seq_idx, positions, BLOCK_SIZE)


class Case:
    """One measured configuration. slots: "paged" (a prefill batch, see paged_slots), "decode" (one
    token from each of T sequences: T slots scattered over the cache), "dense" (whole blocks in
    random order, all within the first T slots) or "consecutive"."""

    def __init__(self, T, H, D, dtype, layout, padding, slot_mapping, slots="paged"):
        self.T, self.H, self.D, self.HD = T, H, D, H * D
        g = torch.Generator(device="cuda").manual_seed(T * 31 + H * D)
        if layout == "fused":
            qkv = torch.randn(T, 3, H, D, dtype=dtype, device="cuda", generator=g)
            self.key, self.value = qkv[:, 1], qkv[:, 2]
        else:
            self.key = torch.randn(T, H, D, dtype=dtype, device="cuda", generator=g)
            self.value = torch.randn(T, H, D, dtype=dtype, device="cuda", generator=g)
        blocks = max(1, -(-2 * T // BLOCK_SIZE) + T // BLOCK_SIZE)   # room for every sequence's last, partial block
        self.k_cache = torch.zeros(blocks, BLOCK_SIZE, H, D, dtype=dtype, device="cuda")
        self.v_cache = torch.zeros_like(self.k_cache)
        if slots == "paged":
            self.slots = paged_slots(T, blocks, g, slot_mapping)
        elif slots == "decode":
            self.slots = torch.randperm(blocks * BLOCK_SIZE, device="cuda", generator=g)[:T]
        elif slots == "dense":
            order = torch.randperm(-(-T // BLOCK_SIZE), device="cuda", generator=g)
            self.slots = (order.repeat_interleave(BLOCK_SIZE)[:T] * BLOCK_SIZE
                          + torch.arange(T, device="cuda") % BLOCK_SIZE)
        else:
            self.slots = torch.arange(T, device="cuda")
        if padding:
            self.slots[torch.randperm(T, device="cuda", generator=g)[: T // 4]] = -1
        self.real = int((self.slots >= 0).sum())
        self.bytes = 4 * self.real * self.HD * self.key.element_size() + 8 * T

    def write_with(self, module):
        return lambda: module.reshape_and_cache(self.key, self.value, self.k_cache, self.v_cache, self.slots)

    def index_copy(self):
        kc, vc = self.k_cache.view(-1, self.H, self.D), self.v_cache.view(-1, self.H, self.D)
        return lambda: (kc.index_copy_(0, self.slots, self.key), vc.index_copy_(0, self.slots, self.value))


def summarise(times: list[float], nbytes: int, ceiling: float) -> dict:
    med = statistics.median(times)
    q = statistics.quantiles(times, n=4) if len(times) >= 4 else [min(times), med, max(times)]
    return {"gbps": nbytes / med / 1e9, "frac": nbytes / med / ceiling,
            "spread": (q[2] - q[0]) / med, "us": med * 1e6}


PEER_CASES = [(T, 8, 128) for T in (1, 256, 4096, 65536, 262144)] + [(65536, 32, 128), (65536, 8, 64)]


def peer_table(ref, ceiling: float, reps: int, quick: bool) -> tuple[list[dict], str]:
    """The reference beside the CUDA peer and index_copy_ on identical inputs (fp16, fused QKV,
    prefill slots): one call's GPU time, and the per-call cost eager and replayed from a graph."""
    import time
    try:
        import cuda_peer
        start = time.perf_counter()
        peer = cuda_peer.build()
        note = f"compiled with torch.utils.cpp_extension in {time.perf_counter() - start:.0f} s"
    except Exception as exc:     # no nvcc, or a compiler error: the table says so instead of a figure
        return [], f"not measured: the CUDA peer did not build ({type(exc).__name__}: {str(exc)[:300]})"
    print("peer:", note, flush=True)
    rows = []
    for T, H, D in (PEER_CASES[:2] + PEER_CASES[3:4]) if quick else PEER_CASES:
        case = Case(T, H, D, torch.float16, "fused", False, ref.slot_mapping)
        row = {"T": T, "H": H, "D": D}
        expected_k, expected_v = case.k_cache.clone(), case.v_cache.clone()
        ref.reshape_and_cache(case.key, case.value, expected_k, expected_v, case.slots)
        peer.reshape_and_cache(case.key, case.value, case.k_cache, case.v_cache, case.slots)
        if not (torch.equal(case.k_cache, expected_k) and torch.equal(case.v_cache, expected_v)):
            raise AssertionError(f"the CUDA peer does not write what the reference writes at T={T}, H={H}, D={D}")
        del expected_k, expected_v
        fns = {"reference": case.write_with(ref), "peer": case.write_with(peer), "index_copy_": case.index_copy()}
        # Interleaved rounds, in alternating order: whichever runs first right after the caches are made
        # was measured up to 10% slow (seen on the H200), which is the order's cost, not the kernel's.
        samples = {name: {"one": [], "eager": [], "graph": []} for name in fns}
        for round_ in range(4):
            for name in (list(fns) if round_ % 2 == 0 else list(fns)[::-1]):
                samples[name]["one"] += graph_times(fns[name], max(5, reps // 2))
                samples[name]["eager"].append(per_call_eager(fns[name], 100))
                samples[name]["graph"].append(per_call_graph(fns[name], 20 if T >= LARGE else 100))
        for name, got in samples.items():
            r = summarise(got["one"], case.bytes, ceiling)
            row[name] = {"us": r["us"], "frac": r["frac"], "eager_us": statistics.median(got["eager"]) * 1e6,
                         "graph_us": statistics.median(got["graph"]) * 1e6}
        rows.append(row)
        print("peer", T, H, D, {k: f"{v['us']:.1f}/{v['eager_us']:.1f}/{v['graph_us']:.1f} us"
                                for k, v in row.items() if isinstance(v, dict)}, flush=True)
        del case
        torch.cuda.empty_cache()
    return rows, note


def peer_markdown(rows: list[dict], note: str) -> list[str]:
    md = ["", "## Against a CUDA write of vLLM's shape (fp16, fused, prefill slots)", "",
          "`bench/cuda_peer.py`: one thread block per token, the block returning at once on slot -1, int64 "
          "offsets, 16-byte vector copies (narrower when a row or pointer is not 16-byte aligned), launched "
          f"on torch's current stream; {note}. Both are checked to write the same caches before timing. "
          "*one call* = GPU time of one call replayed from a CUDA graph with L2 evicted (the main table's "
          "method); *eager* = wall clock per call over 100 back-to-back Python calls; *graph* = per call "
          "when 100 calls (20 at T ≥ 65,536) are replayed from one CUDA graph. Each figure is the median "
          "of four interleaved rounds, the three writes taking turns in alternating order.", ""]
    if not rows:
        return md
    large = [r["reference"]["us"] / r["peer"]["us"] - 1 for r in rows if r["T"] >= LARGE]
    small = [r for r in rows if r["T"] <= 4096]
    if large:
        md += [f"At T ≥ {LARGE:,} the reference's one-call time is within "
               f"{min(large):+.1%} to {max(large):+.1%} of the peer's (positive: the reference is slower)."]
    if small:
        eager = [r["reference"]["eager_us"] / r["peer"]["eager_us"] for r in small]
        graph = [r["reference"]["graph_us"] / r["peer"]["graph_us"] for r in small]
        md += [f"At T ≤ 4,096 a call launched from Python costs the reference {min(eager):.1f}–{max(eager):.1f}× "
               f"the peer's (Triton's launch path); replayed from a CUDA graph, {min(graph):.2f}–{max(graph):.2f}×."]
    md += ["", "| T | H | D | reference one call µs | peer µs | index_copy_ µs | reference of ceiling | "
               "peer of ceiling | reference eager µs | peer eager µs | reference graph µs | peer graph µs |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ref, peer, ic = r["reference"], r["peer"], r["index_copy_"]
        md.append(f"| {r['T']} | {r['H']} | {r['D']} | {ref['us']:.1f} | {peer['us']:.1f} | {ic['us']:.1f} | "
                  f"{ref['frac']:.1%} | {peer['frac']:.1%} | {ref['eager_us']:.1f} | {peer['eager_us']:.1f} | "
                  f"{ref['graph_us']:.2f} | {peer['graph_us']:.2f} |")
    return md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--submission", type=Path, help="also measure this file")
    ap.add_argument("--out", type=Path, help="write the tables as Markdown here")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="a small grid, for a smoke run")
    ap.add_argument("--no-peer", action="store_true", help="skip the CUDA peer (it needs nvcc; compiling takes a minute)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench: needs a CUDA GPU", file=sys.stderr)
        return 2
    ref = load(REPO / "reference/l1_paged_kv_write.py")
    sub = load(args.submission) if args.submission else None

    ceiling = ceilings.copy_ceiling(event_times, args.reps)
    lines = [f"copy ceiling: {ceiling / 1e9:.0f} GB/s (torch copying 1 GiB device-to-device)"]
    print(lines[0])

    tokens = (256, 65536) if args.quick else TOKENS
    shapes = SHAPES[:1] if args.quick else SHAPES
    head = ["T", "H", "D", "dtype", "layout", "padding", "reference GB/s", "of ceiling", "of scattered copy",
            "spread", "index_copy_ GB/s"] + (["submission GB/s", "of ceiling"] if sub else [])
    rows, run_copies, large = [], {}, []
    for T, (H, D), dname, layout, padding in itertools.product(tokens, shapes, DTYPES, ("plain", "fused"),
                                                               (False, True)):
        if T == 1 and padding:
            continue
        if T >= LARGE and (T, H, D) not in run_copies:   # measured before the case takes its memory
            run_copies[T, H, D] = ceilings.run_copy_rates(graph_times, args.reps, T, H, D, BLOCK_SIZE)
            torch.cuda.empty_cache()
        case = Case(T, H, D, DTYPES[dname], layout, padding, ref.slot_mapping)
        r = summarise(graph_times(case.write_with(ref), args.reps), case.bytes, ceiling)
        ic = "—" if padding else f"{summarise(graph_times(case.index_copy(), args.reps), case.bytes, ceiling)['gbps']:.0f}"
        of_scattered = r["gbps"] * 1e9 / run_copies[T, H, D]["scattered"] if T >= LARGE else None
        if T >= LARGE:
            large.append((r["frac"], of_scattered))
        row = [T, H, D, dname, layout, "25%" if padding else "none", f"{r['gbps']:.0f}", f"{r['frac']:.1%}",
               "—" if of_scattered is None else f"{of_scattered:.1%}", f"{r['spread']:.1%}", ic]
        if sub:
            s = summarise(graph_times(case.write_with(sub), args.reps), case.bytes, ceiling)
            row += [f"{s['gbps']:.0f}", f"{s['frac']:.1%}"]
        rows.append(row)
        print(" ".join(str(x) for x in row), flush=True)
        del case
        torch.cuda.empty_cache()

    # What the slot pattern costs: the same bytes, written where a prefill, a decode step or a plain copy puts them.
    pattern_rows = []
    for T, pattern in itertools.product((256, 65536), ("paged", "decode", "dense", "consecutive")):
        case = Case(T, 8, 128, torch.float16, "fused", False, ref.slot_mapping, slots=pattern)
        r = summarise(graph_times(case.write_with(ref), args.reps), case.bytes, ceiling)
        same_order = run_copies.get((T, 8, 128), {}).get("in order" if pattern == "consecutive" else "scattered")
        pattern_rows.append([str(T), pattern, f"{r['gbps']:.0f}", f"{r['frac']:.1%}",
                             f"{r['gbps'] * 1e9 / same_order:.1%}" if same_order else "—"])
        print("pattern", pattern_rows[-1], flush=True)
        del case

    # Other shapes of the kernel on the same large batches: what was tried, and what it gains.
    from write_variants import VARIANTS
    variant_cases = [("paged", False), ("paged", True), ("dense", False), ("consecutive", False)]
    variant_rows = []
    for pattern, padding in variant_cases:
        case = Case(65536, 8, 128, torch.float16, "fused", padding, ref.slot_mapping, slots=pattern)
        fracs = {name: summarise(graph_times(case.write_with(m), args.reps), case.bytes, ceiling)["frac"]
                 for name, m in [("reference", ref)] + [(n, v[1]) for n, v in VARIANTS.items()]}
        variant_rows.append(fracs)
        print("variants", pattern, padding, {k: f"{v:.1%}" for k, v in fracs.items()}, flush=True)
        del case

    # Launch-bound sizes: the reference against an empty kernel, eagerly and replayed from a graph.
    launch_rows = []
    for T in (1, 256):
        case = Case(T, 8, 128, torch.float16, "fused", False, ref.slot_mapping)
        args8 = (case.key, case.value, case.k_cache, case.v_cache, case.slots,
                 case.key.stride(0), case.value.stride(0), case.HD)
        empty = lambda: empty_kernel[(T,)](*args8, BLOCK=1024, num_warps=1)
        write = case.write_with(ref)
        e_eager, r_eager = per_call_eager(empty), per_call_eager(write)
        e_graph, r_graph = per_call_graph(empty), per_call_graph(write)
        launch_rows.append([T, f"{e_eager*1e6:.1f}", f"{r_eager*1e6:.1f}", f"{r_eager/e_eager:.2f}",
                            f"{e_graph*1e6:.2f}", f"{r_graph*1e6:.2f}", f"{r_graph/e_graph:.2f}"])
        print("launch", launch_rows[-1], flush=True)

    peer_rows, peer_note = peer_table(ref, ceiling, args.reps, args.quick) if not args.no_peer else ([], "skipped (--no-peer)")

    if args.out:
        env = (f"{datetime.date.today()} · {torch.cuda.get_device_name()} · torch {torch.__version__} · "
               f"triton {triton.__version__} · Python {platform.python_version()}")
        md = ["# Performance of the L1 write", "",
              "Generated by `python bench/l1_paged_kv_write.py --out docs/performance.md` on the GPU runner; "
              "do not edit the numbers by hand.", "", f"Measured: {env}.", "",
              "Bytes moved = K and V read and written for the real (non-padding) tokens, plus 8 bytes of "
              "slot per token. Times are medians of CUDA-event timings of one call replayed from a CUDA "
              "graph (GPU work only; the Python launch cost is in the last table), with L2 evicted by a "
              "read between calls; spread is the interquartile range over the median. Slots are those of a prefill "
              "batch: sequences of 1 to 2048 tokens on physical blocks drawn at random from a cache of about "
              "three times as many slots as tokens, mapped by the reference `slot_mapping` (block size 16); "
              "the slot-pattern table below compares a decode step's scattered slots. `fused` reads "
              "key/value as views of a [T, 3, H, D] tensor.",
              "", lines[0], ""]
        if large:
            fracs, of_scattered = sorted(f for f, _ in large), sorted(o for _, o in large)
            md += [f"At T ≥ {LARGE:,} the reference reaches {fracs[0]:.1%}–{fracs[-1]:.1%} of the copy ceiling "
                   f"(median {statistics.median(fracs):.1%}) and {of_scattered[0]:.1%}–{of_scattered[-1]:.1%} "
                   f"(median {statistics.median(of_scattered):.1%}) of a copy that scatters the same bytes in "
                   "the same runs; see \"Copy ceilings\" below.", ""]
        md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        md += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
        md += ["", "## Copy ceilings", "",
               "What a plain copy of the bytes a write of T tokens moves reaches, as a fraction of the copy "
               "ceiling: the 2T rows of H·D fp16 values (K and V) copied by a Triton kernel into a buffer three "
               "times as large (the bench's caches), in runs of 16 rows (one cache block). *In order* writes "
               "run after run; *scattered* sends source run r to destination run r·s mod R for a stride s coprime "
               "with R, so consecutive runs land far apart, as a prefill's blocks do, but no slot is ever read. "
               f"Each is the best of {len(ceilings.COPY_SHAPES)} program shapes (rows per program, warps): "
               f"{', '.join(map(str, ceilings.COPY_SHAPES))}. The main table's \"of scattered copy\" divides "
               "by the scattered figure of its (T, H, D).", "",
               "| T | H | D | run KB | in order | scattered |", "|---|---|---|---|---|---|"]
        md += [f"| {T} | {H} | {D} | {BLOCK_SIZE * H * D * 2 // 1024} | {r['in order'] / ceiling:.1%} | "
               f"{r['scattered'] / ceiling:.1%} |" for (T, H, D), r in run_copies.items()]
        md += ["", "## Slot pattern (H=8, D=128, fp16, fused)", "",
               "paged: the prefill batch above; decode: one token from each of T sequences, so every slot "
               "lands at a random place in the cache; dense: whole blocks in random order within the first "
               "T slots (does the spread over a large cache cost, or the shuffle?); consecutive: slots "
               "0..T-1, a plain copy's pattern. The last column divides by the copy-ceilings table's scattered copy "
               "(its in-order copy for consecutive slots); a decode step scatters single tokens, finer than runs.", "",
               "| T | slots | reference GB/s | of ceiling | of the copy in the same order |", "|---|---|---|---|---|"]
        md += ["| " + " | ".join(row) + " |" for row in pattern_rows]
        names = list(variant_rows[0])
        md += ["", "## Other kernel shapes (T=65536, H=8, D=128, fp16, fused)", "",
               "Fraction of the copy ceiling reached by the reference and by other ways of cutting the same "
               "write (`bench/write_variants.py`), on the slot patterns above; padding: 25% of the slots are -1.",
               "", "| variant | what differs | " + " | ".join(
                   f"{p}{' +pad' if pad else ''}" for p, pad in variant_cases) + " |",
               "|---|---|" + "---|" * len(variant_cases)]
        for name in names:
            what = "one token per program, one warp (the lesson's shape)" if name == "reference" else VARIANTS[name][0]
            md.append(f"| {name} | {what} | " + " | ".join(f"{row[name]:.1%}" for row in variant_rows) + " |")
        md += ["", "## Launch-bound sizes (H=8, D=128, fp16, fused)", "",
               "Per call: eager = wall clock over 200 back-to-back calls; graph = replay of 100 calls "
               "captured in one CUDA graph. The empty kernel takes the same arguments and does nothing.", "",
               "| T | empty eager µs | reference eager µs | ratio | empty graph µs | reference graph µs | ratio |",
               "|---|---|---|---|---|---|---|"]
        md += ["| " + " | ".join(str(x) for x in row) + " |" for row in launch_rows]
        md += peer_markdown(peer_rows, peer_note)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(md) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
