"""The committed student template is exactly what tools/make_template.py generates."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "student_template" / "l1_paged_kv_write.py"
REFERENCE = REPO / "reference" / "l1_paged_kv_write.py"


@pytest.fixture(scope="module")
def make_template(load_tool):
    return load_tool("make_template")


@pytest.fixture(scope="module")
def generated(make_template):
    return make_template.render(REFERENCE.read_text(encoding="utf-8"))


def test_committed_template_is_byte_identical(generated):
    assert TEMPLATE.read_bytes() == generated.encode("utf-8"), \
        "student_template/ is stale: run `make template` and commit it"


def test_template_keeps_signatures_and_clears_bodies(generated):
    for signature in ("def slot_mapping(block_table, seq_idx, positions, block_size):",
                      "def reshape_and_cache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr,",
                      "def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):"):
        assert signature in generated
    # slot_mapping and reshape_and_cache raise; the kernel cannot (see make_template.py)
    assert generated.count("\n    raise NotImplementedError()\n") == 2
    kernel = generated[generated.index("def reshape_and_cache_kernel("):generated.index("def reshape_and_cache(")]
    assert "raise" not in kernel
    assert 'tl.static_assert(False, "NotImplementedError:' in kernel
    for note in ("strides count elements", "HD = H * D", "BLOCK: a tl.constexpr"):
        assert note in kernel
    assert "SOLUTION" not in generated
    assert generated.endswith(")\n") and not generated.endswith("\n\n")


def test_check_mode(make_template, monkeypatch, tmp_path, capsys):
    target = tmp_path / "l1_paged_kv_write.py"
    monkeypatch.setattr(make_template, "REPO", tmp_path)
    monkeypatch.setattr(make_template, "paths", lambda _: (REFERENCE, target))
    argv = ["--assignment", "assignment/l1_paged_kv_write"]

    assert make_template.main(argv + ["--check"]) == 1
    assert "is missing" in capsys.readouterr().err

    assert make_template.main(argv) == 0
    first = target.read_bytes()
    assert make_template.main(argv) == 0
    assert target.read_bytes() == first, "two runs must write the same bytes"
    assert make_template.main(argv + ["--check"]) == 0

    target.write_bytes(first.replace(b"raise NotImplementedError()", b"return None", 1))
    assert make_template.main(argv + ["--check"]) == 1
    assert "make template" in capsys.readouterr().err


@pytest.mark.slow
def test_unwritten_kernel_fails_as_not_implemented_when_launched(run_kernel_check):
    # A student who writes reshape_and_cache first meets the kernel's placeholder at the
    # launch, with a message naming what is missing rather than a Triton syntax complaint.
    proc = run_kernel_check(f"""
import importlib.util, torch
spec = importlib.util.spec_from_file_location("template", {str(TEMPLATE)!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
dev = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.zeros(4, 16, device=dev)
try:
    m.reshape_and_cache_kernel[(1,)](x, x, x, x, torch.zeros(1, dtype=torch.int64, device=dev), 16, 16, 16, BLOCK=16)
except Exception as exc:
    print("raised", type(exc).__name__, exc)
else:
    print("no error")
""")
    assert proc.returncode == 0, proc.stderr
    assert "raised" in proc.stdout and "NotImplementedError: reshape_and_cache_kernel has no body yet" in proc.stdout, \
        proc.stdout
