"""policy: the write is done by a Triton kernel launched from reshape_and_cache.

Judged on what one call did, not on how the file is written: the worker that runs the
call counts the Triton kernels it launched and records every PyTorch operation that wrote
one of its tensor arguments outside a launch (`submission.last_observed`). Any way of
making and launching a kernel therefore counts (decorator or `triton.jit(f)`, aliases,
autotune/heuristics, helpers, classes, `.run`), and a PyTorch write of the caches does
not, even with a Triton kernel launched beside it. PyTorch's extension points are looked
through: a torch.library.custom_op or triton_op whose body launches the kernel, a
torch.compile'd launch, autotune's restore_value/reset_to_zero copies are Triton work; an aten
write inside a custom op's body is still a PyTorch write.

This area gates nothing: the areas that judge the written rows are gated on kernel_write
(test_kernel_write.py), which needs no judgment of who wrote what.

Where the worker could not see launches (no Triton launch hook on that machine), the
launch test falls back to the source: a function made with triton.jit and a
`kernel[grid](...)` or `.run(...)` call anywhere in the file."""
import ast

import pytest
import torch

from paged import call, error_hint, fail, random_slots, raised_message, raised_type, token_rows

pytestmark = pytest.mark.area("policy")

H, D, BS, NB, T = 2, 32, 4, 8, 6
CACHES = {2: "k_cache", 3: "v_cache", "k_cache": "k_cache", "v_cache": "v_cache"}


def _batch(rng, device):
    key, value = token_rows(rng, T, H, D, torch.float32, device)
    return key, value, random_slots(rng, T, NB * BS).to(device)


def _caches_after(submission, shared, batch, record_property):
    """reshape_and_cache of `batch` into zeroed caches: (the worker's account of the call, the
    caches as it left them)."""
    kc, vc = shared.zeros((NB, BS, H, D), torch.float32), shared.zeros((NB, BS, H, D), torch.float32)
    key, value, slots = batch
    _, err = call(submission.reshape_and_cache, key, value, kc, vc, slots)
    if err is not None:
        record_property("detail", f"raised {raised_type(err)}: {raised_message(err, 1000)}")
        fail(error_hint("reshape_and_cache", err))
    return submission.last_observed, kc.cpu(), vc.cpu()


def _one_call(submission, rng, shared, device, record_property):
    """reshape_and_cache on a small valid batch: (the worker's account of that call, whether
    it wrote anything into the caches). Whether it wrote the right rows is the write area's
    question: here a wrong kernel is still a Triton kernel."""
    observed, kc, vc = _caches_after(submission, shared, _batch(rng, device), record_property)
    written = bool(kc.count_nonzero() or vc.count_nonzero())      # the caches start as zeros
    record_property("detail", f"observed {observed}; caches written: {written}")
    return observed, written


def _source_launches(source: str) -> bool:
    """A function made with triton.jit (any alias, decorator or call) and a kernel[grid](...)
    or .run(...) call somewhere: the source's word, used only where the run gave none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    jit = any(isinstance(n, (ast.Attribute, ast.Name)) and getattr(n, "attr", getattr(n, "id", None)) == "jit"
              for n in ast.walk(tree))
    launch = any(isinstance(n, ast.Call) and (isinstance(n.func, ast.Subscript)
                                              or (isinstance(n.func, ast.Attribute) and n.func.attr == "run"))
                 for n in ast.walk(tree))
    return jit and launch


def test_reshape_and_cache_launches_a_triton_kernel(submission, submission_source, rng, shared, device,
                                                    record_property):
    """A call of reshape_and_cache launches at least one Triton kernel that writes the caches"""
    observed, written = _one_call(submission, rng, shared, device, record_property)
    # A launch that writes nothing is not the assignment's kernel, and costs nothing to fake.
    assert written, ("after the call both caches were still all zeros: the kernel launched, if any, "
                     "wrote nothing. Store each token's K and V rows with tl.store.")
    launches = (observed or {}).get("triton_launches")
    if launches is None:
        assert _source_launches(submission_source), (
            "no Triton kernel made with triton.jit and launched as kernel[grid](...) was found in "
            "your file.")
        return
    assert launches >= 1, (
        "reshape_and_cache returned without launching any Triton kernel (the grader counted the "
        "launches during the call: none). Launch your @triton.jit kernel as kernel[grid](...).")


def test_the_caches_are_written_by_the_kernel(submission, rng, shared, device, record_property):
    """The call writes both caches, and no PyTorch operation writes them: the Triton kernel does"""
    observed, written = _one_call(submission, rng, shared, device, record_property)
    assert written, ("after the call both caches were still all zeros: nothing was written, so "
                     "there is no write to judge. Store each token's K and V rows with tl.store in "
                     "your kernel.")
    writes = _cache_writes(observed)
    assert not writes, (
        "PyTorch wrote the caches outside any Triton kernel: " + writes
        + ". The stores into k_cache and v_cache must be tl.store in your kernel; a kernel launched "
        "beside a PyTorch write does not make it a Triton write. (A torch.library.custom_op or "
        "triton_op whose body launches the kernel counts as the kernel's write.)")


def _cache_writes(observed) -> str:
    writes = [(CACHES[w], op) for w, op in (observed or {}).get("torch_writes", []) if w in CACHES]
    return ", ".join(sorted({f"{op} on {name}" for name, op in writes}))
