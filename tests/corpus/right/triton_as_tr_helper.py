"""Right: `import triton as tr`, `@tr.jit`, and the launch inside a helper function.

slot_mapping uses torch.gather on the flattened block table.
"""
import torch
import triton as tr
import triton.language as tl


def slot_mapping(block_table, seq_idx, positions, block_size):
    pos = positions.to(torch.int64)
    index = seq_idx.to(torch.int64) * block_table.size(1) + torch.floor_divide(pos, block_size)
    block = torch.gather(block_table.flatten(), 0, index).to(torch.int64)
    return block * block_size + pos % block_size


@tr.jit
def _write_kernel(k, v, kc, vc, slots, ks, vs, hd, BLOCK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slots + token).to(tl.int64)
    lane = tl.arange(0, BLOCK)
    live = lane < tl.where(slot >= 0, hd, 0)
    tl.store(kc + slot * hd + lane, tl.load(k + token * ks + lane, mask=live), mask=live)
    tl.store(vc + slot * hd + lane, tl.load(v + token * vs + lane, mask=live), mask=live)


reshape_and_cache_kernel = _write_kernel


def _check(key, value, k_cache, v_cache):
    _, H, D = key.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous(), "the caches must be contiguous"
    for name, x in (("key", key), ("value", value)):
        assert x.stride(2) == 1 and x.stride(1) == D, f"{name}: [H, D] must be contiguous"


def _launch(key, value, k_cache, v_cache, slots):
    T, H, D = key.shape
    hd = H * D
    _write_kernel[(T,)](key, value, k_cache, v_cache, slots, key.stride(0), value.stride(0), hd,
                        BLOCK=tr.next_power_of_2(hd))


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    _check(key, value, k_cache, v_cache)
    if key.shape[0] > 0:
        _launch(key, value, k_cache, v_cache, slot_mapping)
