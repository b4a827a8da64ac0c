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
    assert generated.count("\n    raise NotImplementedError()\n") == 3
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
