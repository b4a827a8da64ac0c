"""The worker's count of a call's work (grader/sandbox/worker.py WorkCount), run in this process:
what a vectorised function, a loop in its several forms and a T x blocks intermediate each make
it count, that a cap cuts a loop short, and that switching the count off shows."""
import sys
import textwrap
import time

import pytest
import torch

from grader.assignment import REPO

sys.path.insert(0, str(REPO / "grader" / "sandbox"))
import worker  # noqa: E402

worker.torch = torch

T, S, W, BS = 20_000, 64, 32, 16
CAPS = {"ops": 100, "lines": 200, "items": 100, "python_objects": 5000}

STYLES = '''
import sys
import numpy as np
import torch

def gather(bt, si, pos, bs):
    return bt[si, pos // bs].long() * bs + pos % bs

def flat_take(bt, si, pos, bs):
    pos = pos.to(torch.int64)
    idx = si.to(torch.int64) * bt.size(1) + torch.div(pos, bs, rounding_mode="floor")
    return torch.take(bt, idx).to(torch.int64) * bs + torch.remainder(pos, bs)

def checked(bt, si, pos, bs):
    assert bt.dim() == 2 and si.shape == pos.shape
    if int(si.max()) >= bt.shape[0] or int(pos.min()) < 0:
        raise ValueError("bad batch")
    for t in (bt, si, pos):
        assert not t.is_floating_point()
    return gather(bt, si, pos, bs)

def tensor_loop(bt, si, pos, bs):
    out = torch.empty(pos.shape[0], dtype=torch.int64)
    for t in range(pos.shape[0]):
        p = int(pos[t])
        out[t] = int(bt[int(si[t]), p // bs]) * bs + p % bs
    return out

def tolist_comprehension(bt, si, pos, bs):
    table = bt.tolist()
    return torch.tensor([table[s][p // bs] * bs + p % bs for s, p in zip(si.tolist(), pos.tolist())])

def numpy_comprehension(bt, si, pos, bs):
    table, s_, p_ = bt.numpy(), si.numpy(), pos.numpy()
    return torch.tensor([int(table[s, p // bs]) * bs + int(p) % bs for s, p in zip(s_, p_)])

def map_lambda(bt, si, pos, bs):
    table = bt.numpy()
    return torch.tensor(list(map(lambda s, p: int(table[s, p // bs]) * bs + int(p) % bs,
                                 si.numpy(), pos.numpy())))

def per_sequence(bt, si, pos, bs):
    out = torch.empty_like(pos)
    for s in range(bt.shape[0]):
        mask = si == s
        out[mask] = bt[s, pos[mask] // bs].long() * bs + pos[mask] % bs
    return out

def row_gather(bt, si, pos, bs):
    rows = bt[si]
    return torch.gather(rows, 1, (pos // bs).unsqueeze(1)).squeeze(1).long() * bs + pos % bs

def swallowing_loop(bt, si, pos, bs):
    try:
        return tensor_loop(bt, si, pos, bs)
    except BaseException:
        return gather(bt, si, pos, bs)

def builtin_map(bt, si, pos, bs):
    import operator
    flat, p = bt.numpy().reshape(-1).tolist(), pos.numpy().tolist()
    n, w = len(p), bt.shape[1]
    idx = map(operator.add, map(operator.mul, si.numpy().tolist(), [w] * n), map(operator.floordiv, p, [bs] * n))
    slots = map(operator.add, map(operator.mul, map(flat.__getitem__, idx), [bs] * n), map(operator.mod, p, [bs] * n))
    return torch.from_numpy(np.fromiter(slots, dtype=np.int64, count=n))

def untraced_loop(bt, si, pos, bs):
    sys.settrace(None)
    return torch.tensor([int(bt[s, p // bs]) * bs + p % bs
                         for s, p in zip(si.numpy().tolist(), pos.numpy().tolist())])
'''


@pytest.fixture(scope="module")
def styles(tmp_path_factory):
    path = tmp_path_factory.mktemp("styles") / "styles.py"
    path.write_text(textwrap.dedent(STYLES))
    namespace = {"__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace, str(path)


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(0)
    table = torch.randperm(S * W, generator=g).view(S, W).int()
    si, pos = torch.randint(0, S, (T,), generator=g), torch.randint(0, W * BS, (T,), generator=g)
    return table, si, pos, table[si, pos // BS].long() * BS + pos % BS


def count(styles, batch, name, caps=CAPS):
    namespace, source = styles
    table, si, pos, want = batch
    args = [table, si, pos, BS]
    observer = worker.Observer(args, {}, count=dict(caps), source=source)
    t0 = time.perf_counter()
    result = None
    try:
        with observer.watching():
            result = namespace[name](*args)
    except worker.WorkCapped:
        pass
    took = time.perf_counter() - t0
    if result is not None:
        assert torch.equal(result.long(), want), name
    return observer.work.report(), took


@pytest.mark.parametrize("name", ["gather", "flat_take", "checked"])
def test_a_vectorised_form_makes_a_few_ops_whatever_T(styles, batch, name):
    seen, _ = count(styles, batch, name)
    assert seen["capped"] is None and seen["intact"]
    assert seen["ops"] <= 20 and seen["lines"] <= 30 and seen["items"] == 0 and seen["python_objects"] <= 1000
    # its largest tensor is one of T int64, four times the int32 table's width of nothing
    assert seen["max_alloc_bytes"] <= 2 * T * 8


@pytest.mark.parametrize("name,capped", [("tensor_loop", "ops"), ("tolist_comprehension", "items"),
                                         ("numpy_comprehension", "lines"), ("map_lambda", "lines"),
                                         ("per_sequence", "ops"), ("swallowing_loop", "ops"),
                                         ("builtin_map", "python_objects")])
def test_a_loop_is_cut_short_at_its_cap(styles, batch, name, capped):
    seen, took = count(styles, batch, name)
    assert seen["capped"] == capped
    # one .tolist() of the whole table, or the lists built before the first look, pass the cap at once
    assert CAPS[capped] < seen[capped] <= (CAPS[capped] + 2 if capped in ("ops", "lines") else 4 * T)
    assert took < 2.0                         # stopped after a few hundred steps, not T of them


def test_a_caught_cap_still_counts_the_loop(styles, batch):
    # swallowing_loop catches WorkCapped and turns to the gather, whose first op is refused too:
    # once past a cap every counted step is, and the count says so whatever the call returns
    seen, _ = count(styles, batch, "swallowing_loop")
    assert seen["capped"] == "ops" and seen["ops"] == CAPS["ops"] + 2


def test_a_T_by_blocks_intermediate_is_its_size(styles, batch):
    seen, _ = count(styles, batch, "row_gather")
    assert seen["capped"] is None and seen["max_alloc_bytes"] == T * W * 4
    seen, _ = count(styles, batch, "row_gather", caps={"max_alloc_bytes": 1 << 20})
    assert seen["capped"] == "max_alloc_bytes"


def test_switching_the_trace_off_is_seen(styles, batch):
    seen, _ = count(styles, batch, "untraced_loop", caps={"ops": 10**9, "lines": 200})
    assert not seen["intact"] and seen["capped"] is None


def test_no_count_unless_asked(batch):
    table, si, pos, _ = batch
    original, outer, seen = torch.Tensor.tolist, sys.gettrace(), {}
    observer = worker.Observer([table, si, pos, BS], {})
    with observer.watching():
        seen.update(tolist=torch.Tensor.tolist, trace=sys.gettrace())
    assert observer.work is None and seen == {"tolist": original, "trace": outer}
