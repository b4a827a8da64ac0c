"""strided_qkv: key and value may be views whose tokens are any distance apart (a fused QKV
projection, padded rows), as long as each token's [H, D] is contiguous. The kernel reads
token t at t * stride(0), with key's and value's strides passed separately."""
import pytest
import torch

from paged import GuardedCache, fused_qkv, padded_rows, random_slots, token_rows, write_and_compare

pytestmark = pytest.mark.area("strided_qkv")

H, D, BS, NB, T = 4, 64, 16, 64, 48
DTYPE = torch.bfloat16


def _caches(rng, shared, device):
    return (GuardedCache(rng, shared, device, NB, BS, H, D, DTYPE),
            GuardedCache(rng, shared, device, NB, BS, H, D, DTYPE))


def _stride_hint(strided):
    """The hint for rows read from the wrong place, given which of key/value is strided."""
    def hint(findings):
        bad = {f.cache for f in findings if f.kind == "wrong_values"}
        if strided == {"key", "value"} or not bad:
            return ("the rows were read as if key and value were contiguous: token t starts at "
                    "t * key.stride(0) (and t * value.stride(0)), which for a view of a fused "
                    "QKV tensor or a padded buffer is more than H*D.")
        tensor = "value" if bad == {"v_cache"} else "key" if bad == {"k_cache"} else None
        if tensor and tensor not in strided:
            return (f"{tensor} is contiguous but was read with the other tensor's token stride: "
                    "pass key.stride(0) and value.stride(0) to the kernel separately.")
        if tensor:
            return (f"{tensor} was read as if it were contiguous: token t starts at "
                    f"t * {tensor}.stride(0), not t * H * D.")
        return None
    return hint


def test_fused_qkv_views(submission, rng, shared, device, record_property):
    """key and value as qkv[:, 1] and qkv[:, 2] of a fused [T, 3, H, D] tensor are copied exactly"""
    kc, vc = _caches(rng, shared, device)
    _, key, value = fused_qkv(rng, T, H, D, DTYPE, device)
    slots = random_slots(rng, T, NB * BS)
    hint = _stride_hint({"key", "value"})
    msg = write_and_compare(submission, key, value, kc, vc, slots, record_property,
                            hints={"wrong_values": hint})
    assert msg is None, msg


@pytest.mark.parametrize("strided", ["key", "value"])
def test_one_strided_one_contiguous(strided, submission, rng, shared, device, record_property):
    """One of key/value is a strided view and the other contiguous: each is read with its own stride"""
    kc, vc = _caches(rng, shared, device)
    _, view = fused_qkv(rng, T, H, D, DTYPE, device)[:2]
    plain, _ = token_rows(rng, T, H, D, DTYPE, device)
    key, value = (view, plain) if strided == "key" else (plain, view)
    slots = random_slots(rng, T, NB * BS)
    hint = _stride_hint({strided})
    msg = write_and_compare(submission, key, value, kc, vc, slots, record_property,
                            hints={"wrong_values": hint})
    assert msg is None, msg


def test_rows_padded_beyond_hd(submission, rng, shared, device, record_property):
    """Rows padded past H*D (the first H*D columns of a wider buffer) are copied without the padding"""
    kc, vc = _caches(rng, shared, device)
    _, key = padded_rows(rng, T, H, D, DTYPE, device, extra=64)
    _, value = padded_rows(rng, T, H, D, DTYPE, device, extra=32)
    slots = random_slots(rng, T, NB * BS)
    hint = _stride_hint({"key", "value"})
    msg = write_and_compare(submission, key, value, kc, vc, slots, record_property,
                            hints={"wrong_values": hint})
    assert msg is None, msg
