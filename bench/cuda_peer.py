"""The write as a user would take it from vLLM instead: a CUDA kernel of the shape of
vLLM's `reshape_and_cache_flash` (csrc/cache_kernels.cu), measured by the bench beside
the reference so that docs/performance.md says where the Triton write stands.

What it keeps from vLLM: one thread block per token with a grid of slot_mapping's length,
the whole block returning at once on slot -1, int64 offsets and strides, and 16-byte
vector copies with a narrower fallback when a row or a pointer is not 16-byte aligned.
It is written here, not copied, and compiled at bench time with
torch.utils.cpp_extension (nvcc is needed; no binary is shipped). It launches on
torch's current stream, so that a CUDA graph captures it.
"""
from __future__ import annotations

import os
import types

import torch

CPP = "void reshape_and_cache(torch::Tensor key, torch::Tensor value, torch::Tensor k_cache, " \
      "torch::Tensor v_cache, torch::Tensor slot_mapping);"

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cstdint>

// Every row moves as a run of copy units U (16, 8, 4, 2 or 1 bytes): the widest unit that
// divides the row, both row strides and every base address.
template <typename U>
__global__ void write_rows(const char* __restrict__ key, const char* __restrict__ value,
                           char* __restrict__ k_cache, char* __restrict__ v_cache,
                           const int64_t* __restrict__ slots, int64_t key_stride, int64_t value_stride,
                           int64_t row_bytes) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slots[token];
  if (slot < 0) return;                       // padding: the whole block leaves, nothing is read
  const U* k_src = reinterpret_cast<const U*>(key + token * key_stride);
  const U* v_src = reinterpret_cast<const U*>(value + token * value_stride);
  U* k_dst = reinterpret_cast<U*>(k_cache + slot * row_bytes);
  U* v_dst = reinterpret_cast<U*>(v_cache + slot * row_bytes);
  const int64_t n = row_bytes / static_cast<int64_t>(sizeof(U));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    k_dst[i] = k_src[i];
    v_dst[i] = v_src[i];
  }
}

static int64_t widest_unit(std::initializer_list<int64_t> values) {
  for (int64_t unit : {16, 8, 4, 2}) {
    bool ok = true;
    for (int64_t v : values) ok = ok && (v % unit == 0);
    if (ok) return unit;
  }
  return 1;
}

void reshape_and_cache(torch::Tensor key, torch::Tensor value, torch::Tensor k_cache,
                       torch::Tensor v_cache, torch::Tensor slot_mapping) {
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "caches must be contiguous");
  TORCH_CHECK(slot_mapping.scalar_type() == torch::kInt64, "slot_mapping must be int64");
  const int64_t H = key.size(1), D = key.size(2), elem = key.element_size();
  for (const auto& x : {key, value})
    TORCH_CHECK(x.stride(2) == 1 && x.stride(1) == D, "key/value's [H, D] must be contiguous");
  const int64_t tokens = slot_mapping.size(0);    // the slots drive the grid, as in vLLM
  if (tokens == 0) return;
  const int64_t row_bytes = H * D * elem;
  const int64_t key_stride = key.stride(0) * elem, value_stride = value.stride(0) * elem;
  const int64_t unit = widest_unit({row_bytes, key_stride, value_stride,
                                    reinterpret_cast<int64_t>(key.data_ptr()),
                                    reinterpret_cast<int64_t>(value.data_ptr()),
                                    reinterpret_cast<int64_t>(k_cache.data_ptr()),
                                    reinterpret_cast<int64_t>(v_cache.data_ptr())});
  const int threads = static_cast<int>(std::min<int64_t>(512, ((row_bytes / unit) + 31) / 32 * 32));
  auto stream = at::cuda::getCurrentCUDAStream();
  auto args = std::make_tuple(static_cast<const char*>(key.data_ptr()),
                              static_cast<const char*>(value.data_ptr()),
                              static_cast<char*>(k_cache.data_ptr()), static_cast<char*>(v_cache.data_ptr()),
                              slot_mapping.data_ptr<int64_t>(), key_stride, value_stride, row_bytes);
  auto launch = [&](auto kernel) {
    std::apply([&](auto... a) { kernel<<<tokens, threads, 0, stream>>>(a...); }, args);
  };
  switch (unit) {
    case 16: launch(write_rows<uint4>); break;
    case 8: launch(write_rows<uint2>); break;
    case 4: launch(write_rows<uint32_t>); break;
    case 2: launch(write_rows<uint16_t>); break;
    default: launch(write_rows<uint8_t>); break;
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""


def build(verbose: bool = False) -> types.SimpleNamespace:
    """Compile the peer for this machine's GPU and return a module-like object with
    reshape_and_cache(key, value, k_cache, v_cache, slot_mapping)."""
    import tempfile
    from torch.utils.cpp_extension import load_inline
    if "TORCH_CUDA_ARCH_LIST" not in os.environ:     # this GPU only: a quarter of the compile time
        major, minor = torch.cuda.get_device_capability()
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    # A build folder of its own: every bench compiles the source it ships, never a stale cached build.
    ext = load_inline(name="l1_cuda_peer", cpp_sources=CPP, cuda_sources=CUDA,
                      functions=["reshape_and_cache"], extra_cuda_cflags=["-O3", "-std=c++17"],
                      build_directory=tempfile.mkdtemp(prefix="l1_cuda_peer_"), verbose=verbose)
    return types.SimpleNamespace(reshape_and_cache=ext.reshape_and_cache)
