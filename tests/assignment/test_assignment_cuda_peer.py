"""The CUDA peer the bench measures the reference against (bench/cuda_peer.py) must write
what the reference writes, or docs/performance.md would compare unlike things. Checked
where its copy unit changes: rows of 16-byte multiples (vector copies), rows of 4-byte
multiples (the narrow fallback), fused-QKV strides, padding, fp16 and fp32. The peer is
CUDA source compiled on the spot, so this runs only on a GPU with nvcc."""
import pytest

CHECK = r"""
import importlib.util, sys, torch
sys.path.insert(0, "bench")
import cuda_peer
spec = importlib.util.spec_from_file_location("reference", "reference/l1_paged_kv_write.py")
reference = importlib.util.module_from_spec(spec); spec.loader.exec_module(reference)
peer = cuda_peer.build()
g = torch.Generator().manual_seed(11)
wrong = []
for T, H, D, dtype in ((37, 2, 40, torch.float16), (37, 2, 41, torch.float16), (5, 3, 7, torch.float32),
                       (300, 8, 128, torch.float16), (0, 8, 128, torch.float16)):
    qkv = torch.randn(T, 3, H, D, generator=g).to("cuda", dtype)
    key, value = qkv[:, 1], qkv[:, 2]
    slots = torch.randperm(4 * max(T, 1), generator=g)[:T]
    slots[::5] = -1
    slots = slots.cuda()
    blocks = -(-4 * max(T, 1) // 4)
    expected_k = torch.zeros(blocks, 4, H, D, device="cuda", dtype=dtype); expected_v = torch.zeros_like(expected_k)
    reference.reshape_and_cache(key, value, expected_k, expected_v, slots)
    k_cache, v_cache = torch.zeros_like(expected_k), torch.zeros_like(expected_v)
    peer.reshape_and_cache(key, value, k_cache, v_cache, slots)
    torch.cuda.synchronize()
    if not (torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)):
        wrong.append((T, H, D, str(dtype)))
print("wrong:", wrong)
sys.exit(1 if wrong else 0)
"""


def test_cuda_peer_writes_what_the_reference_writes(run_kernel_check):
    torch = pytest.importorskip("torch")
    from torch.utils.cpp_extension import CUDA_HOME
    if not torch.cuda.is_available() or CUDA_HOME is None:
        pytest.skip("the CUDA peer is compiled with nvcc for a GPU: this machine has no GPU or no CUDA toolkit")
    r = run_kernel_check(CHECK)
    assert r.returncode == 0, f"the CUDA peer does not write what the reference writes: {r.stdout}{r.stderr[-3000:]}"
