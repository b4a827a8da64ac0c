"""kernel_write: the gate of the areas that judge the written rows (write, padding, strided_qkv,
int64_overflow).

The same small call is made twice, the second time with every aten write of the caches made
outside a launch recorded and left undone (`submission.hold_torch_writes`). A kernel that does the
write leaves the same caches both times; a kernel launched beside a PyTorch write leaves them
empty the second time. This asks nothing of how a write was attributed (policy's question), so a
style the observer misjudges costs policy's points and not the areas gated here."""
import pytest
import torch

from test_policy import _batch, _cache_writes, _caches_after, _source_launches

pytestmark = pytest.mark.area("kernel_write")

GATE = ("Until this passes, write/padding/strided_qkv/int64_overflow earn no points: the "
        "assignment is a Triton kernel, and a PyTorch write of the caches is not one.")


def _launches(observed, submission_source):
    """Whether the call launched a Triton kernel: the run's count, or the source's word where the
    run could not count."""
    launches = (observed or {}).get("triton_launches")
    return _source_launches(submission_source) if launches is None else launches >= 1


def test_the_kernel_writes_the_caches_without_pytorch(submission, submission_source, rng, shared, device,
                                                      record_property):
    """A Triton kernel is launched, and the caches come out the same with every PyTorch write of them held back"""
    batch = _batch(rng, device)
    # Each call gets inputs of its own: one that changes key or value (write's question) must
    # not make the second call copy other rows.
    observed, kc, vc = _caches_after(submission, shared, [t.clone() for t in batch], record_property)
    submission.hold_torch_writes = True
    try:
        held, hkc, hvc = _caches_after(submission, shared, [t.clone() for t in batch], record_property)
    finally:
        submission.hold_torch_writes = False
    same = torch.equal(kc, hkc) and torch.equal(vc, hvc)
    record_property("detail", f"observed {observed}; held back {held}; same caches: {same}")
    assert _launches(held, submission_source), (
        "reshape_and_cache returned without launching any Triton kernel. Launch your @triton.jit "
        "kernel as kernel[grid](...). " + GATE)
    assert kc.count_nonzero() or vc.count_nonzero(), (
        "after the call both caches were still all zeros: nothing was written. Store each token's "
        "K and V rows with tl.store in your kernel. " + GATE)
    assert same, (
        "with PyTorch's writes of the caches held back (" + (_cache_writes(held) or "none seen")
        + ") the call left other caches than it does otherwise: those writes, not your kernel, "
        "stored the rows. Store them with tl.store in the kernel. " + GATE)
