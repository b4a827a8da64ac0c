"""The lesson cites the reference by line number; those lines must stay where it says.

Lesson citations: slot_mapping 15-25, reshape_and_cache_kernel 28-46 with the
interpreter note on 34-36, reshape_and_cache 49-62.
"""
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[2] / "reference" / "l1_paged_kv_write.py"


@pytest.fixture(scope="module")
def line():
    lines = REFERENCE.read_text(encoding="utf-8").splitlines()
    return lambda n: lines[n - 1]  # 1-based, as the lesson counts


def test_slot_mapping_spans_15_to_25(line):
    assert line(15).startswith("def slot_mapping(block_table, seq_idx, positions, block_size):")
    assert line(21).strip() == "### BEGIN SOLUTION"
    assert line(22).lstrip().startswith("logical_block = positions // block_size")
    assert line(23).lstrip().startswith("physical_block = block_table[seq_idx, logical_block].long()")
    assert line(24).strip() == "return physical_block * block_size + positions % block_size"
    assert line(25).strip() == "### END SOLUTION"
    assert line(26) == line(27) == ""


def test_kernel_spans_28_to_46(line):
    assert line(28) == "@triton.jit"
    assert line(29).startswith("def reshape_and_cache_kernel(")
    assert line(32).lstrip().startswith("t = tl.program_id(0).to(tl.int64)")
    assert line(33).lstrip().startswith("slot = tl.load(slot_ptr + t)")
    assert line(37).lstrip().startswith("n_valid = tl.where(slot >= 0, HD, 0)")
    assert line(46).strip() == "### END SOLUTION"
    assert line(47) == line(48) == ""


def test_interpreter_note_is_lines_34_to_36(line):
    note = [line(n) for n in (34, 35, 36)]
    assert all(text.lstrip().startswith("#") for text in note)
    assert line(33).lstrip().startswith("slot =") and line(37).lstrip().startswith("n_valid =")
    assert "(offs < HD) & (slot >= 0)" in note[0]
    assert "TRITON_INTERPRET=1" in note[1]


def test_reshape_and_cache_spans_49_to_62(line):
    assert line(49).startswith("def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):")
    assert line(53).lstrip().startswith("assert k_cache.is_contiguous() and v_cache.is_contiguous()")
    assert line(62).strip() == "### END SOLUTION"
    assert len(REFERENCE.read_text(encoding="utf-8").splitlines()) == 62, "line 62 ends the file"


def test_module_docstring_matches_the_spans():
    text = REFERENCE.read_text(encoding="utf-8")
    for span in ("(lines 15-25)", "(lines 28-46)", "(lines 49-62)"):
        assert span in text
