"""Paged KV-cache data for the L1 hidden suites, and the checks that turn a wrong cache
into a hint in the lesson's terms.

Everything here runs in the trusted grading process: inputs are drawn from the test's
`rng` on the CPU and then moved to the test's device, and the expected results are
computed in plain PyTorch without looking at the submission.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}

# Tensors larger than this go through the `shared` allocator, so the worker sees them
# without a copy in and out of every call.
SHARED_BYTES = 32 << 20

# One whole block on each side of every cache: a store at slot -1 (an unskipped padding
# token) or one past the last slot lands in memory we own and can inspect, instead of
# corrupting the process or going unnoticed.
GUARD_BLOCKS = 1


# --------------------------------------------------------------------------- calls
def fail(message: str):
    """Fail the test with `message` as the student's hint. An AssertionError, not
    pytest.fail: the grader turns an assertion's message into the hint and reports any
    other exception as a harness error."""
    raise AssertionError(message)


def raised_type(exc: BaseException) -> str:
    """The exception class the submission raised, whether or not it crossed a sandbox."""
    return getattr(exc, "type_name", type(exc).__name__)


def raised_message(exc: BaseException, limit: int = 300) -> str:
    """The line of the submission's message that holds the cause: the first for CUDA
    errors (debugging advice follows it), the last for a Triton compilation error (which
    opens with the source location and the offending lines)."""
    lines = [ln for ln in str(getattr(exc, "message", exc)).strip().splitlines() if ln.strip()]
    msg = ""
    if lines:
        msg = lines[-1] if re.match(r"at \d+:\d+:", lines[0]) else lines[0]
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def call(fn, *args):
    """(result, None) or (None, exception): the exception of a submission is data here."""
    try:
        return fn(*args), None
    except Exception as exc:  # a SubmissionError from the sandbox, or the raw exception
        return None, exc


def error_hint(fn_name: str, exc: BaseException) -> str:
    """Why a call that should have succeeded raised, in the lesson's terms where we can tell."""
    text = f"{raised_type(exc)}: {raised_message(exc)}"
    low = f"{text} {getattr(exc, 'message', exc)}".lower()
    if "illegal memory access" in low or "illegal address" in low:
        why = ("the kernel touched memory outside its tensors: an offset left the cache (slot*H*D "
               "computed in int32 wraps past 2**31; a padding slot -1 must be skipped).")
    elif "power of 2" in low or "power of two" in low:
        why = ("tl.arange needs a power-of-two length: launch with "
               "BLOCK = triton.next_power_of_2(H*D) and mask offs < H*D.")
    elif "contiguous" in low:
        why = ("only the caches and each token's [H, D] must be contiguous; the token "
               "dimension may have any stride (key can be a view of a fused QKV tensor).")
    elif "index" in low and "out of" in low:
        why = ("an index left its table: the logical block is position // block_size, "
               "with the position counted inside the token's own sequence.")
    else:
        why = "valid inputs must be accepted."
    return f"{fn_name} raised {text} on valid input; {why}"


# --------------------------------------------------------------------------- allocation
def alloc(shared, device, shape, dtype) -> torch.Tensor:
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if nbytes > SHARED_BYTES:
        return shared.empty(tuple(shape), dtype)
    return torch.empty(tuple(shape), dtype=dtype, device=device)


def randn(rng, shape, dtype) -> torch.Tensor:
    """Random values (CPU) in `dtype`; drawn in fp32 because not every dtype can be sampled."""
    return torch.randn(tuple(shape), generator=rng, dtype=torch.float32).to(dtype)


def fill_random(rng, t: torch.Tensor) -> None:
    """Random values into `t`, drawn where it lives. A cache's contents are only sentinels, and
    on a GPU drawing them on the CPU and copying them over was most of what building a test's
    caches cost: there they come from a generator on the GPU seeded from `rng`, so a test's
    inputs are still a function of its seed. On the CPU they come from `rng` itself."""
    if t.device.type == "cpu":
        t.copy_(randn(rng, t.shape, t.dtype))
        return
    gen = torch.Generator(device=t.device)
    gen.manual_seed(int(torch.randint(0, 2**62, (1,), generator=rng)))
    t.normal_(generator=gen)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns: exact comparison without NaN or -0.0 surprises."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


# --------------------------------------------------------------------------- inputs
def random_slots(rng, T: int, num_slots: int, *, include_zero=False, include_last=True) -> torch.Tensor:
    """T distinct slots in random order (CPU, int64).

    Slot 0 is left out unless asked for: whether it is written is the padding area's
    question (`slot > 0` instead of `slot >= 0`), and keeping it out everywhere else
    keeps that bug in its own area. The last slot is put in so that a store that runs
    one value past a token's row reaches the guard block behind the cache."""
    lo = 0 if include_zero else 1
    assert T <= num_slots - lo
    pick = torch.randperm(num_slots - lo, generator=rng)[:T] + lo
    if include_last and T > 0 and not bool((pick == num_slots - 1).any()):
        pick[int(torch.randint(0, T, (1,), generator=rng))] = num_slots - 1
    if include_zero and T > 0 and not bool((pick == 0).any()):
        # put 0 somewhere other than where the last slot went
        j = int(torch.randint(0, T, (1,), generator=rng))
        if int(pick[j]) == num_slots - 1 and T > 1:
            j = (j + 1) % T
        pick[j] = 0
    return pick


def token_rows(rng, T, H, D, dtype, device):
    """Contiguous key and value [T, H, D] with different random contents."""
    return randn(rng, (T, H, D), dtype).to(device), randn(rng, (T, H, D), dtype).to(device)


def fused_qkv(rng, T, H, D, dtype, device):
    """key and value as qkv[:, 1] and qkv[:, 2] of one [T, 3, H, D] tensor (vLLM's layout)."""
    qkv = randn(rng, (T, 3, H, D), dtype).to(device)
    return qkv, qkv[:, 1], qkv[:, 2]


def padded_rows(rng, T, H, D, dtype, device, extra):
    """[T, H, D] whose rows sit `extra` elements apart beyond H*D: the first H*D columns
    of a [T, H*D + extra] buffer."""
    buf = randn(rng, (T, H * D + extra), dtype).to(device)
    return buf, buf[:, : H * D].view(T, H, D)


@dataclass
class Batch:
    """A step's new tokens: which sequence, which position inside it, and the table."""
    block_table: torch.Tensor   # [S, W]
    seq_idx: torch.Tensor       # [T]
    positions: torch.Tensor     # [T]
    block_size: int


def random_batch(rng, *, num_seqs, width, block_size, num_blocks, new_tokens,
                 shuffle, table_dtype=torch.int32, index_dtype=torch.int64) -> Batch:
    """Sequences of random lengths, each adding a run of `new_tokens(s)` tokens at its end.

    The table holds distinct physical blocks in random order, as a pool hands them out;
    the entries a sequence does not use yet hold other blocks, so reading the wrong
    column gives a wrong answer rather than a zero."""
    assert num_seqs * width <= num_blocks
    table = torch.randperm(num_blocks, generator=rng)[: num_seqs * width].view(num_seqs, width)
    seqs, poss = [], []
    for s in range(num_seqs):
        n_new = new_tokens(s)
        length = int(torch.randint(n_new, width * block_size + 1, (1,), generator=rng))
        seqs.append(torch.full((n_new,), s, dtype=torch.int64))
        poss.append(torch.arange(length - n_new, length, dtype=torch.int64))
    seq_idx, positions = torch.cat(seqs), torch.cat(poss)
    if shuffle:
        order = torch.randperm(len(seq_idx), generator=rng)
        seq_idx, positions = seq_idx[order], positions[order]
    return Batch(table.to(table_dtype), seq_idx.to(index_dtype), positions.to(index_dtype), block_size)


def expected_slots(b: Batch) -> torch.Tensor:
    """The trusted answer: the lesson's formula, on the CPU in int64."""
    bt, si, pos, bs = b.block_table.long(), b.seq_idx.long(), b.positions.long(), b.block_size
    return bt[si, pos // bs] * bs + pos % bs


def slot_mistake(result: torch.Tensor, b: Batch) -> str | None:
    """Name the mistake when a wrong slot vector matches a known wrong formula."""
    bt, si, pos, bs = b.block_table.long(), b.seq_idx.long(), b.positions.long(), b.block_size
    T = len(si)
    r = result.long().cpu()

    def matches(f):
        try:
            return torch.equal(r, f())
        except (IndexError, RuntimeError):
            return False

    batch_pos = torch.arange(T)
    if matches(lambda: bt[si, batch_pos // bs] * bs + batch_pos % bs):
        return ("the position was taken as the token's index in the batch; the position is "
                "the token's place inside its own sequence (the positions argument).")
    if matches(lambda: bt[si, pos % bs] * bs + pos // bs):
        return ("// and % are swapped: the logical block is position // block_size and the "
                "offset inside the block is position % block_size.")
    if matches(lambda: bt[si, pos // bs] + pos % bs):
        return ("the physical block number must be multiplied by block_size before adding "
                "the offset inside the block.")
    if matches(lambda: bt[si, pos // bs] * bs + pos):
        return ("the offset inside the block is position % block_size, not the position itself.")
    if matches(lambda: (pos // bs) * bs + pos % bs):
        return ("the block table was not used: logical block i of a sequence lives in "
                "physical block block_table[seq, i].")
    return None


# --------------------------------------------------------------------------- caches
class GuardedCache:
    """A [num_blocks, block_size, H, D] cache filled with random sentinel values, with a
    guard block on each side. `cache` is what the submission gets (contiguous: a
    slice of the first dimension), `buf` includes the guards, `before` is a copy."""

    def __init__(self, rng, shared, device, num_blocks, block_size, H, D, dtype):
        self.num_blocks, self.block_size, self.H, self.D = num_blocks, block_size, H, D
        shape = (num_blocks + 2 * GUARD_BLOCKS, block_size, H, D)
        self.buf = alloc(shared, device, shape, dtype)
        fill_random(rng, self.buf)
        self.before = self.buf.clone()
        self.cache = self.buf[GUARD_BLOCKS:-GUARD_BLOCKS]

    def expected(self, src: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """The buffer as it must be after writing src[t] at slots[t] (slot -1: skipped)."""
        exp = self.before.clone()
        slots = slots.to(exp.device).long()
        keep = slots >= 0
        inner = exp[GUARD_BLOCKS:-GUARD_BLOCKS].view(-1, self.H, self.D)
        inner[slots[keep]] = src.to(exp.device)[keep]
        return exp

    def rows(self, t: torch.Tensor) -> torch.Tensor:
        return bits(t).reshape(-1, self.H * self.D)


@dataclass
class Finding:
    kind: str
    cache: str
    rows: int
    tokens: list = field(default_factory=list)
    extra: str = ""


def compare_cache(name: str, gc: GuardedCache, expected: torch.Tensor, slots: torch.Tensor,
                  src: torch.Tensor, other: torch.Tensor | None) -> list[Finding]:
    """Every way the guarded buffer differs from `expected`, by kind.

    kinds: guard_before, guard_after (memory around the cache), stray (a slot no token
    maps to), past_row (only the first value of such a slot: one value beyond a row),
    not_written, swapped (holds the other tensor's row), partial (a prefix of the row
    written, the rest old), wrong_values (anything else at a written slot)."""
    after, exp, before = gc.rows(gc.buf), gc.rows(expected), gc.rows(gc.before)
    bad = (after != exp).any(1)
    if not bool(bad.any()):
        return []
    bs, HD = gc.block_size, gc.H * gc.D
    n_rows = after.shape[0]
    g = GUARD_BLOCKS * bs
    bad_rows = bad.nonzero().flatten()
    out = []

    n = int((bad_rows < g).sum())
    if n:
        out.append(Finding("guard_before", name, n))
    n = int((bad_rows >= n_rows - g).sum())
    if n:
        out.append(Finding("guard_after", name, n))

    dev = after.device
    slots = slots.to(dev).long()
    token_of_row = torch.full((n_rows,), -1, dtype=torch.long, device=dev)
    live = (slots >= 0).nonzero().flatten()
    token_of_row[slots[live] + g] = live
    inner = bad_rows[(bad_rows >= g) & (bad_rows < n_rows - g)]
    tok = token_of_row[inner]

    stray = inner[tok < 0]
    if len(stray):
        changed = after[stray] != before[stray]
        one_past = (changed.sum(1) == 1) & changed[:, 0]
        if bool(one_past.any()):
            out.append(Finding("past_row", name, int(one_past.sum())))
        if bool((~one_past).any()):
            out.append(Finding("stray", name, int((~one_past).sum())))

    written, wtok = inner[tok >= 0], tok[tok >= 0]
    if len(written):
        A, E, B = after[written], exp[written], before[written]
        not_written = (A == B).all(1)
        swapped = torch.zeros_like(not_written)
        if other is not None:
            O = bits(other.to(dev)).reshape(-1, HD)[wtok]
            swapped = (A == O).all(1) & ~not_written
        eq_e, eq_b = A == E, A == B
        partial = (eq_e | eq_b).all(1) & eq_e[:, 0] & ~not_written & ~swapped
        wrong = ~(not_written | swapped | partial)
        for kind, sel in (("not_written", not_written), ("swapped", swapped),
                          ("partial", partial), ("wrong_values", wrong)):
            if bool(sel.any()):
                extra = ""
                if kind == "partial":
                    # how many leading values were right, for the hint (one head = D)
                    first_bad = (~eq_e[sel]).int().argmax(1)
                    extra = str(int(first_bad.min()))
                out.append(Finding(kind, name, int(sel.sum()), sorted(wtok[sel].tolist()), extra))
    return out


def describe(findings: list[Finding]) -> str:
    """Instructor-side summary: kinds, caches and counts (no data)."""
    return "; ".join(f"{f.cache}:{f.kind} rows={f.rows}"
                     + (f" tokens={f.tokens[:8]}" if f.tokens else "")
                     + (f" extra={f.extra}" if f.extra else "") for f in findings)


def default_hint(kind: str, findings: list[Finding], *, T: int, D: int) -> str:
    """The student's hint for one kind of difference, in the lesson's terms."""
    caches = sorted({f.cache for f in findings if f.kind == kind})
    which = " and ".join(caches)
    if kind == "guard_before":
        return ("memory just before the cache was written: a store used a negative slot; "
                "slot -1 marks a padding token, which must be skipped.")
    if kind == "guard_after":
        return ("memory just past the cache's last slot was written: a token's row is the "
                "H*D values [slot*H*D, (slot+1)*H*D) and nothing beyond.")
    if kind == "swapped":
        return "K and V are swapped: k_cache received the value rows and v_cache the key rows."
    if kind == "not_written":
        toks = sorted({t for f in findings if f.kind == kind for t in f.tokens})
        if toks == [T - 1]:
            return ("the last token of the batch was not written: launch one program per "
                    "token, grid (T,).")
        if caches == ["v_cache"] and all(f.rows == T for f in findings if f.kind == kind):
            return "v_cache was never written: the kernel must store V as well as K."
        if caches == ["k_cache"] and all(f.rows == T for f in findings if f.kind == kind):
            return "k_cache was never written: the kernel must store K as well as V."
        return (f"some tokens' slots in {which} were not written: every token with slot >= 0 "
                "must be stored.")
    if kind == "partial":
        ex = {f.extra for f in findings if f.kind == kind}
        if ex == {str(D)}:
            return ("only the first head was copied: a token owns H*D values, not D; copy "
                    "all H heads.")
        return "only part of each token's H*D values was copied: copy all H*D of them."
    if kind == "past_row":
        return ("one value past a token's H*D values was written into the next slot: the "
                "mask must be offs < H*D, not offs <= H*D.")
    if kind == "stray":
        return (f"a slot of {which} that no token maps to was overwritten: a token landed in "
                "the wrong place; slot s owns the flat offsets [s*H*D, (s+1)*H*D).")
    if kind == "wrong_values":
        return (f"{which} holds the wrong values at a token's slot: token t's row starts at "
                "t * key.stride(0) in key, and goes to slot*H*D in the cache.")
    return f"{which}: unexpected difference ({kind})."


# The order in which hints are worth reading: the most specific diagnosis first.
HINT_ORDER = ["swapped", "guard_before", "guard_after", "past_row", "partial",
              "not_written", "stray", "wrong_values"]


def cache_message(findings: list[Finding], *, T: int, D: int, hints: dict | None = None,
                  lead: str = "The caches after the call are not the expected ones:") -> str:
    """At most two hints, most telling first. `hints` overrides the defaults per kind with a
    sentence, or with a function of the findings that returns one (None: use the default)."""
    hints = hints or {}
    kinds = {f.kind for f in findings}
    parts = []
    for kind in HINT_ORDER:
        if kind in kinds:
            h = hints.get(kind)
            if callable(h):
                h = h(findings)
            h = h or default_hint(kind, findings, T=T, D=D)
            if h not in parts:
                parts.append(h)
    return " ".join([lead] + parts[:2])


def write_and_compare(submission, key, value, kc: GuardedCache, vc: GuardedCache, slots,
                      record_property, *, hints=None):
    """Run reshape_and_cache on the guarded caches and return the assertion message, or
    None when both caches (guards included) are exactly as expected."""
    slots_dev = slots.to(kc.buf.device)
    # the expectation comes from copies: a submission that also changes key or value in
    # place must not move the target (that is checked on its own in the write area)
    key0, value0 = key.clone(), value.clone()
    _, err = call(submission.reshape_and_cache, key, value, kc.cache, vc.cache, slots_dev)
    if err is not None:
        record_property("detail", f"raised {raised_type(err)}: {raised_message(err, 1000)}")
        return error_hint("reshape_and_cache", err)
    findings = (compare_cache("k_cache", kc, kc.expected(key0, slots), slots, key0, value0)
                + compare_cache("v_cache", vc, vc.expected(value0, slots), slots, value0, key0))
    if not findings:
        return None
    record_property("detail", describe(findings))
    return cache_message(findings, T=len(slots), D=kc.D, hints=hints)


def general_case_first(submission, rng, shared, device, record_property, H: int, D: int, dtype):
    """A degenerate case (no tokens, only padding, inputs left alone) says something only about
    a write that works: an answer that ignores its input passes it. So such a test first writes
    an ordinary batch of the same shapes, and fails, counting for nothing, when that is wrong."""
    bs, nb, T = 16, 16, 24
    kc = GuardedCache(rng, shared, device, nb, bs, H, D, dtype)
    vc = GuardedCache(rng, shared, device, nb, bs, H, D, dtype)
    key, value = token_rows(rng, T, H, D, dtype, device)
    msg = write_and_compare(submission, key, value, kc, vc, random_slots(rng, T, nb * bs), record_property)
    if msg is not None:
        fail("this case counts only beside a working write, and an ordinary batch of "
             f"{T} tokens of the same shapes was not written right: {msg}")
