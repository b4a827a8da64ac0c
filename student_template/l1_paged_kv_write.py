# Student template for L1, generated from the course solution by
# tools/make_template.py. Write each function's body in place of its
# `# YOUR CODE HERE` and the line under it: `raise NotImplementedError(...)`, or in
# the kernel `tl.static_assert(False, ...)` (a `raise` is not Triton). Until you do,
# the tests open with one line, "not written yet: ...", naming what is left, and
# skip the tests that need it. Keep the names and signatures: the tests and the
# grader import them. The line numbers in the docstring below are those of the
# course's solution file, which the L1 lesson reads; that file is not in this bundle.
"""L1 - paged KV-cache write, the step vLLM runs before every forward pass.

k_cache and v_cache are contiguous [num_blocks, block_size, H, D]. Because they
are contiguous, (physical block, offset in block) folds into a single "slot"
index, and slot s owns the H*D values at flat offsets [s*H*D, (s+1)*H*D).
Writing one token therefore needs nothing but its slot; slot -1 marks a padding
token that must be skipped.

  slot_mapping              block-table lookup, pure PyTorch     (lines 15-25)
  reshape_and_cache_kernel  one Triton program per token         (lines 28-46)
  reshape_and_cache         host-side checks, then the launch    (lines 49-62)
"""
import torch, triton, triton.language as tl

def slot_mapping(block_table, seq_idx, positions, block_size):
    """int64 slot of each new token: physical block * block_size + offset.

    block_table[s, i] is the physical block that holds logical block i of
    sequence s; positions are counted inside each token's own sequence.
    Advanced indexing gathers all T entries at once: no Python loop."""
    # YOUR CODE HERE
    raise NotImplementedError("not written yet: slot_mapping")


@triton.jit
def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                             key_stride, value_stride, HD, BLOCK: tl.constexpr):
    # key_ptr, value_ptr: token t's H*D values start at key_ptr + t * key_stride
    #   (value_ptr + t * value_stride); strides count elements, not bytes.
    # k_cache_ptr, v_cache_ptr: contiguous caches; slot s owns the values [s*HD, (s+1)*HD).
    # slot_ptr: one int64 slot per token; -1 is a padding token.
    # HD = H * D; BLOCK: a tl.constexpr, a power of two >= HD (tl.arange needs one).
    # These parameters, the grid and any @triton.autotune/@triton.heuristics are yours to
    # change; reshape_and_cache launches whatever kernel you write.
    # YOUR CODE HERE
    tl.static_assert(False, "not written yet: reshape_and_cache_kernel")


def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):
    """Copy key/value [T, H, D] into k_cache/v_cache at the slots in slot_mapping [T]."""
    # YOUR CODE HERE
    raise NotImplementedError("not written yet: reshape_and_cache")
