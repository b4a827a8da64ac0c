"""The kernel shapes the bench compares with the reference (bench/write_variants.py) must
write what the reference writes, or docs/performance.md would compare unlike things.
Checked on a shape that exercises every mask: H*D not a power of two, T not a multiple
of the tokens per program, padding, fused-QKV strides. Runs on the GPU, or through the Triton
interpreter where there is none (see run_kernel_check)."""
import pytest

CHECK = r"""
import importlib.util, sys, torch
sys.path.insert(0, "bench")
from write_variants import VARIANTS
spec = importlib.util.spec_from_file_location("reference", "reference/l1_paged_kv_write.py")
reference = importlib.util.module_from_spec(spec); spec.loader.exec_module(reference)
device = "cuda" if torch.cuda.is_available() else "cpu"
g = torch.Generator().manual_seed(7)
T, H, D = 37, 2, 40
qkv = torch.randn(T, 3, H, D, generator=g).to(device)
key, value = qkv[:, 1], qkv[:, 2]
slots = torch.randperm(100, generator=g)[:T]
slots[::5] = -1
slots = slots.to(device)
expected_k = torch.zeros(25, 4, H, D, device=device); expected_v = torch.zeros_like(expected_k)
reference.reshape_and_cache(key, value, expected_k, expected_v, slots)
wrong = []
for name, (_, module) in VARIANTS.items():
    k_cache, v_cache = torch.zeros_like(expected_k), torch.zeros_like(expected_v)
    module.reshape_and_cache(key, value, k_cache, v_cache, slots)
    if not (torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)):
        wrong.append(name)
print("wrong:", wrong)
sys.exit(1 if wrong else 0)
"""


@pytest.mark.slow
def test_every_variant_writes_what_the_reference_writes(run_kernel_check):
    r = run_kernel_check(CHECK)
    assert r.returncode == 0, ("bench variants that do not write what the reference writes: "
                               f"{r.stdout}{r.stderr[-2000:]}")
