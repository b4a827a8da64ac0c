"""validation: inputs the slot*H*D layout cannot address are rejected (AssertionError or
ValueError) before anything is written: a cache that is not contiguous, and a key or value
whose [H, D] is not contiguous. Only the token dimension may have any stride."""
import pytest
import torch

from grader.sandbox import SandboxFailure
from paged import bits, call, fail, random_slots, randn, raised_message, raised_type, token_rows

pytestmark = pytest.mark.area("validation")

H, D, BS, NB, T = 4, 64, 16, 32, 12
DTYPE = torch.float16
ACCEPTED = ("AssertionError", "ValueError")


def _cache(rng, device):
    return randn(rng, (NB, BS, H, D), DTYPE).to(device)


def _bad_cache(rng, device, kind):
    """(backing tensor, non-contiguous [NB, BS, H, D] view of it)."""
    if kind == "head_slice":
        # the lesson's example: k_cache[:, :, :4] of a cache with more heads
        base = randn(rng, (NB, BS, 2 * H, D), DTYPE).to(device)
        return base, base[:, :, :H]
    base = randn(rng, (BS, NB, H, D), DTYPE).to(device)   # "transposed": blocks are not outermost
    return base, base.transpose(0, 1)


def _bad_rows(rng, device, kind):
    """(backing tensor, [T, H, D] view whose [H, D] is not contiguous)."""
    if kind == "transposed":
        base = randn(rng, (T, D, H), DTYPE).to(device)
        return base, base.transpose(1, 2)
    base = randn(rng, (T, H, D + 16), DTYPE).to(device)   # each head padded to D + 16
    return base, base[:, :, :D]


def _accepts_the_valid_layout(submission, args, record_property):
    """Rejecting counts only where the valid layout is not rejected: an answer that raises on
    every input rejects the bad ones too. Whether the valid call writes the right rows, or even
    survives, is the write area's question: a kernel that crashes there still validated."""
    try:
        _, err = call(submission.reshape_and_cache, *args)
    except SandboxFailure:
        return
    if err is not None and raised_type(err) in ACCEPTED:
        record_property("detail", f"valid layout: raised {raised_type(err)}: {raised_message(err)}")
        fail(f"reshape_and_cache raised {raised_type(err)} on contiguous caches and keys of the same "
             "shapes: rejecting a bad layout counts only when the valid one is not rejected too.")


def _expect_rejected(submission, args, watch, what, why, record_property):
    """Call reshape_and_cache(*args) and require AssertionError/ValueError and no writes to
    any tensor in `watch` (name -> tensor)."""
    before = {n: t.clone() for n, t in watch.items()}
    _, err = call(submission.reshape_and_cache, *args)
    changed = [n for n, t in watch.items() if not torch.equal(bits(t), bits(before[n]))]
    got = raised_type(err) if err is not None else None
    record_property("detail", f"raised {got}: {raised_message(err) if err else ''}; changed {changed}")
    if err is None:
        fail(f"{what} was accepted" + (" and written through" if changed else "")
             + f": {why} Check the layout with assert (or raise ValueError) before launching.")
    assert got in ACCEPTED, (f"{what} was rejected with {got}; the contract is AssertionError or "
                             "ValueError (an assert on the layout before the launch).")
    assert not changed, (f"{what} was rejected, but only after writing to "
                         f"{' and '.join(changed)}: check every input before any write.")


CACHE_WHY = "slot*H*D addresses a cache only when it is contiguous."
ROWS_WHY = ("the kernel reads each token's H*D values as one contiguous run, so only the token "
            "dimension may be strided.")


@pytest.mark.parametrize("kind", ["head_slice", "transposed"])
@pytest.mark.parametrize("which", ["k_cache", "v_cache"])
def test_non_contiguous_cache_is_rejected(which, kind, submission, rng, device, record_property):
    """A cache that is not contiguous is rejected before anything is written"""
    base, bad = _bad_cache(rng, device, kind)
    good = _cache(rng, device)
    key, value = token_rows(rng, T, H, D, DTYPE, device)
    slots = random_slots(rng, T, NB * BS).to(device)
    kc, vc = (bad, good) if which == "k_cache" else (good, bad)
    _accepts_the_valid_layout(submission, (key, value, _cache(rng, device), _cache(rng, device), slots),
                              record_property)
    _expect_rejected(submission, (key, value, kc, vc, slots), {which: base, "the other cache": good},
                     f"a non-contiguous {which}", CACHE_WHY, record_property)


@pytest.mark.parametrize("kind", ["transposed", "head_padded"])
@pytest.mark.parametrize("which", ["key", "value"])
def test_non_contiguous_head_dims_are_rejected(which, kind, submission, rng, device, record_property):
    """A key or value whose [H, D] is not contiguous is rejected before anything is written"""
    _, bad = _bad_rows(rng, device, kind)
    good, _ = token_rows(rng, T, H, D, DTYPE, device)
    key, value = (bad, good) if which == "key" else (good, bad)
    kc, vc = _cache(rng, device), _cache(rng, device)
    slots = random_slots(rng, T, NB * BS).to(device)
    _accepts_the_valid_layout(submission, (good, token_rows(rng, T, H, D, DTYPE, device)[1], _cache(rng, device),
                                           _cache(rng, device), slots), record_property)
    _expect_rejected(submission, (key, value, kc, vc, slots), {"k_cache": kc, "v_cache": vc},
                     f"a {which} whose [H, D] is not contiguous", ROWS_WHY, record_property)
