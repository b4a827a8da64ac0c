"""The public tests against the corpus: each public test that stands for a graded rule fails
on the wrong entry that breaks that rule, and every right entry passes them all.

A right entry marked `device = "cuda"` in right.toml is exempt where there is no GPU; the
opt-in overflow test runs only where a GPU with room for its 26 GB is present."""
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from grader.assignment import Assignment
from grader.corpus import load_corpus, mutant_source

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENT = REPO / "assignment" / "l1_paged_kv_write"
RIGHT = REPO / "tests" / "corpus" / "right.toml"
PUBLIC = "tests/public"
TESTS = "test_l1_paged_kv_write.py::"

# wrong entry -> public tests it must fail (by name; any parametrization counts)
MUST_FAIL = {
    "padding_not_skipped": ["test_padding_token_writes_nothing"],
    "mask_off_by_one": ["test_padding_token_writes_nothing", "test_write_when_hd_is_not_a_power_of_two"],
    "arange_over_hd": ["test_write_when_hd_is_not_a_power_of_two"],
    "value_uses_key_stride": ["test_key_and_value_with_different_token_strides"],
    "key_stride_ignored": ["test_key_value_are_views_of_fused_qkv", "test_key_and_value_with_different_token_strides"],
    "key_scaled_in_place": ["test_inputs_are_read_only"],
    "block_and_offset_swapped": ["test_slot_mapping_self_test_1", "test_slot_mapping_self_test_2"],
    "slot_multiplied_before_widening": ["test_slot_mapping_is_int64"],
}
# what the failure must say, where the message is the point
MUST_SAY = {
    "padding_not_skipped": "slot -1 is padding",
    "mask_off_by_one": "offs < H*D",
    "arange_over_hd": "triton.next_power_of_2(H*D)",
    "value_uses_key_stride": "value.stride(0)",
    "key_scaled_in_place": "changed its key argument",
    "slot_multiplied_before_widening": "overflowed int32",
}
# Bugs the wrong corpus has no entry for (the hidden suite grades them in another way): an
# edit of the reference made here, and the public test it must fail.
LOCAL = {
    "slot_mapping_writes_positions": (
        "    logical_block = positions // block_size                     # which page of its sequence\n",
        "    logical_block = positions.floor_divide_(block_size)\n",
        "test_slot_mapping_leaves_its_inputs_alone"),
}


@pytest.fixture(scope="module")
def mutants(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mutants")
    entries = load_corpus(Assignment.load(ASSIGNMENT), mutants=folder)
    files = {e.name: e.file for e in entries if e.kind == "wrong"}
    reference = (REPO / "reference" / "l1_paged_kv_write.py").read_text(encoding="utf-8")
    for name, (old, new, _) in LOCAL.items():
        files[name] = folder / f"{name}.py"
        files[name].write_text(mutant_source(reference, "", [{"old": old, "new": new}], name))
    return files


def outcomes(run_pytest, tmp_path, submission, *extra):
    report = tmp_path / "junit.xml"
    proc = run_pytest(PUBLIC, "-q", "--submission", str(submission), f"--junitxml={report}", *extra)
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    out = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        problem = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        text = "" if problem is None else (problem.get("message") or "") + (problem.text or "")
        out[case.get("name")] = ("passed" if problem is None else problem.tag, text)
    return out


def _gpu_with_room() -> bool:
    import torch
    return torch.cuda.is_available() and torch.cuda.mem_get_info()[0] >= 28 * 2 ** 30


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MUST_FAIL) + sorted(LOCAL))
def test_public_tests_catch_the_wrong_entry(name, mutants, run_pytest, tmp_path):
    results = outcomes(run_pytest, tmp_path, mutants[name])
    wanted = MUST_FAIL.get(name) or [LOCAL[name][2]]
    messages = []
    for test in wanted:
        failed = [text for n, (state, text) in results.items()
                  if n.split("[")[0] == test and state == "failure"]
        assert failed, f"{test} does not fail on {name}: {results}"
        messages += failed
    if name in MUST_SAY:
        assert any(MUST_SAY[name] in text for text in messages), messages


@pytest.mark.skipif(not _gpu_with_room(), reason="the overflow test needs a GPU with 28 GB free")
def test_overflow_test_catches_int32_offsets(mutants, run_pytest, tmp_path):
    test = "test_offsets_past_2_31_on_the_graded_cache"
    wrong = outcomes(run_pytest, tmp_path, mutants["int32_offsets"], "--overflow", "-k", test)
    assert wrong[test][0] == "failure" and "int64" in wrong[test][1], wrong
    right = outcomes(run_pytest, tmp_path, REPO / "reference" / "l1_paged_kv_write.py", "--overflow", "-k", test)
    assert right[test][0] == "passed", right


def right_entries():
    table = tomllib.loads(RIGHT.read_text(encoding="utf-8"))
    return sorted(table.items())


@pytest.mark.slow
@pytest.mark.parametrize("name, spec", right_entries(), ids=[n for n, _ in right_entries()])
def test_right_entry_passes_every_public_test(name, spec, run_pytest, tmp_path):
    import torch
    if spec.get("device") == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"{name} is graded on the GPU only (right.toml)")
    results = outcomes(run_pytest, tmp_path, REPO / "tests" / "corpus" / "right" / f"{name}.py")
    assert len(results) >= 20
    bad = {n: r for n, r in results.items() if r[0] not in ("passed", "skipped")}
    assert not bad, bad
