"""The public tests against the corpus: every wrong entry fails at least one public test, or the
statements name its rule as one only the grader checks; each public test that stands for a
graded rule fails on the wrong entries that break that rule, with a hint that says so; and every
right entry passes them all.

An entry marked `device` in the corpus is wrong (or right) only on that device, and is exempt
elsewhere. The opt-in GPU overflow test runs only where a GPU with room for its 26 GB is present.
"""
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from grader.assignment import Assignment
from grader.validate.corpus import load_corpus, mutant_source

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENT = REPO / "assignment" / "l1_paged_kv_write"
RIGHT = REPO / "tests" / "corpus" / "right.toml"
PUBLIC = "tests/public"
STATEMENTS = {"en": ASSIGNMENT / "statement.en.md", "zh": ASSIGNMENT / "statement.zh.md"}

# wrong entry -> public tests it must fail (by name; any parametrization counts)
MUST_FAIL = {
    "int32_offsets": ["test_offsets_past_2_32_on_sparse_caches"],
    "position_as_batch_index": ["test_slot_mapping_positions_are_per_sequence"],
    "padding_not_skipped": ["test_padding_token_writes_nothing"],
    "noncontiguous_cache_accepted": ["test_non_contiguous_cache_is_rejected"],
    "slots_int32": ["test_slot_mapping_is_int64"],
    "block_and_offset_swapped": ["test_slot_mapping_self_test_1", "test_slot_mapping_self_test_2"],
    "slot_mapping_python_loop": ["test_slot_mapping_is_vectorised"],
    "slot_mapping_tolist_comprehension": ["test_slot_mapping_is_vectorised"],
    "slot_mapping_loop_memoised": ["test_slot_mapping_is_vectorised"],
    "slot_mapping_row_gather": ["test_slot_mapping_is_vectorised"],
    "slot_multiplied_before_widening": ["test_slot_mapping_is_int64"],
    "slot_zero_is_padding": ["test_padding_token_writes_nothing"],
    "padding_clamped_to_slot0": ["test_padding_token_writes_nothing"],
    "padding_clamped_to_slot0_reversed": ["test_padding_token_writes_nothing"],
    "key_stride_ignored": ["test_key_value_are_views_of_fused_qkv", "test_key_and_value_with_different_token_strides"],
    "value_uses_key_stride": ["test_key_and_value_with_different_token_strides"],
    "arange_over_hd": ["test_write_when_hd_is_not_a_power_of_two"],
    "mask_off_by_one": ["test_padding_token_writes_nothing", "test_write_when_hd_is_not_a_power_of_two"],
    "mask_off_by_one_reversed": ["test_padding_token_writes_nothing", "test_write_when_hd_is_not_a_power_of_two"],
    "key_scaled_in_place": ["test_key_and_value_are_read_only"],
    "value_never_written": ["test_write_small"],
    "key_value_swapped": ["test_write_small"],
    "first_head_only": ["test_write_small"],
    "last_token_dropped": ["test_write_small"],
    "head_contiguity_unchecked": ["test_non_contiguous_heads_are_rejected"],
    "pure_pytorch_write": ["test_a_triton_kernel_writes_the_caches", "test_no_pytorch_operation_writes_the_caches"],
    "source_pattern_trick": ["test_a_triton_kernel_writes_the_caches", "test_no_pytorch_operation_writes_the_caches"],
    "triton_op_beside_aten_write": ["test_a_triton_kernel_writes_the_caches",
                                    "test_no_pytorch_operation_writes_the_caches"],
}
# what the failure must say, where the message is the point
MUST_SAY = {
    "int32_offsets": "overflowed int32",
    "padding_not_skipped": "slot -1 is padding",
    "mask_off_by_one": "offs < H*D",
    "mask_off_by_one_reversed": "offs < H*D",
    "arange_over_hd": "triton.next_power_of_2(H*D)",
    "value_uses_key_stride": "value.stride(0)",
    "key_scaled_in_place": "changed its key argument",
    "slot_multiplied_before_widening": "overflowed int32",
    "slot_mapping_python_loop": "calls into PyTorch",
    "slot_mapping_tolist_comprehension": ".tolist()",
    "slot_mapping_loop_memoised": ".tolist()",
    "slot_mapping_row_gather": "T x blocks intermediate",
    "pure_pytorch_write": "without launching any Triton kernel",
    "source_pattern_trick": "PyTorch wrote the caches outside any Triton kernel",
    "triton_op_beside_aten_write": "PyTorch wrote the caches outside any Triton kernel",
    "and_mask": "the pitfall the lesson names",
}
# Wrong entries that pass every public test here, by design: what they break is graded only by
# the hidden suite, and each statement says so in the sentence given (en, zh). Checked to pass
# every public test, so that the sentence stays true.
TIMED_ONLY = ("Only the grader times `reshape_and_cache`", "只有评分程序给 `reshape_and_cache` 计时")
HIDDEN_ONLY = {
    "skips_timed_launches": TIMED_ONLY,
    "patches_timers": TIMED_ONLY,
    "launches_three_times": TIMED_ONLY,
    "answers_early": TIMED_ONLY,
}
# On a GPU the int64 test needs 26 GB of it and is opt-in.
OVERFLOW_OPT_IN = ("`--overflow`", "`--overflow`")
HIDDEN_ONLY_ON_GPU = {"int32_offsets": OVERFLOW_OPT_IN}
# Bugs the wrong corpus has no entry for (the hidden suite grades them in another way, or the
# CPU grading is not the official one): an edit of the reference made here, and the public test
# it must fail.
LOCAL = {
    "slot_mapping_writes_positions": (
        "    logical_block = positions // block_size                     # which page of its sequence\n",
        "    logical_block = positions.floor_divide_(block_size)\n",
        "test_slot_mapping_leaves_its_inputs_alone"),
    "value_heads_unchecked": (
        '    for name, x in (("key", key), ("value", value)):\n',
        '    for name, x in (("key", key),):\n',
        "test_non_contiguous_heads_are_rejected"),
    "and_mask": (
        "    mask = offs < n_valid\n",
        "    mask = (offs < HD) & (slot >= 0)\n",
        "test_write_small"),
}
DIED = "The Python process died while running "
HUNG = "The Python process hung for "


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mutants")
    entries = {e.name: e for e in load_corpus(Assignment.load(ASSIGNMENT), mutants=folder) if e.kind == "wrong"}
    reference = (REPO / "reference" / "l1_paged_kv_write.py").read_text(encoding="utf-8")
    local = {}
    for name, (old, new, _) in LOCAL.items():
        local[name] = folder / f"{name}.py"
        local[name].write_text(mutant_source(reference, "", [{"old": old, "new": new}], name))
    return entries, local


def outcomes(run, tmp_path, submission, *extra):
    """test name -> (passed | failure | error | skipped, message). A run that killed the Python
    process (a store far outside a tensor) counts as a failure of the test it died in, which is
    what the student is told; so does one the public suite ended as hung."""
    report = tmp_path / "junit.xml"
    proc = run(PUBLIC, "-q", "--submission", str(submission), f"--junitxml={report}", *extra)
    output = proc.stdout + proc.stderr
    if not report.exists():
        if HUNG in output:          # memory it corrupted left the process hung: the witness ended it
            said = output.split(HUNG)[1]
            return {said.split("::")[-1].split(", and was ended")[0]: ("failure", said)}
        assert DIED in output, output[-3000:]
        test = output.split(DIED)[1].split("::")[-1].split(".\n")[0]
        return {test: ("failure", output.split(DIED)[1])}
    out = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        problem = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        text = "" if problem is None else (problem.get("message") or "") + (problem.text or "")
        out[case.get("name")] = ("passed" if problem is None else problem.tag, text)
    return out


def _gpu_with_room() -> bool:
    import torch
    return torch.cuda.is_available() and torch.cuda.mem_get_info()[0] >= 28 * 2 ** 30


def _here() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def _wrong_names():
    folder = REPO / "tests" / "corpus"
    return sorted(tomllib.loads((folder / "wrong.toml").read_text(encoding="utf-8")))


def _hidden_only():
    return {**HIDDEN_ONLY, **(HIDDEN_ONLY_ON_GPU if _here() == "cuda" and not _gpu_with_room() else {})}


@pytest.mark.slow
@pytest.mark.parametrize("name", _wrong_names())
def test_wrong_entry_fails_a_public_test_or_its_rule_is_named_hidden(name, corpus, run_pytest_forked, tmp_path):
    entry = corpus[0][name]
    if entry.device not in (None, _here()):
        pytest.skip(f"{name} is wrong on {entry.device} only")
    hidden = _hidden_only()
    extra = ["--overflow"] if _gpu_with_room() else []
    results = outcomes(run_pytest_forked, tmp_path, entry.file, *extra)
    failed = {n: text for n, (state, text) in results.items() if state in ("failure", "error")}
    if name in hidden:
        assert not failed, (f"{name} now fails public tests {sorted(failed)}: take it out of HIDDEN_ONLY "
                            "and the statements' sentence that calls its rule hidden")
        for lang, sentence in zip(STATEMENTS, hidden[name]):
            assert sentence in STATEMENTS[lang].read_text(encoding="utf-8"), \
                f"statement.{lang}.md does not say that {name}'s rule is graded only by the grader: {sentence!r}"
        return
    assert failed, f"{name} passes every public test, and no statement names its rule as hidden"
    wanted = MUST_FAIL.get(name, [])
    messages = []
    for test in wanted:
        hits = [text for n, text in failed.items() if n.split("[")[0] == test]
        assert hits, f"{test} does not fail on {name}: {results}"
        messages += hits
    if name in MUST_SAY:
        assert any(MUST_SAY[name] in text for text in messages), messages


def test_the_names_here_are_in_the_corpus():
    names = set(_wrong_names())
    stale = (set(MUST_FAIL) | set(MUST_SAY) | set(HIDDEN_ONLY) | set(HIDDEN_ONLY_ON_GPU)) - names - set(LOCAL)
    assert not stale, f"no longer in wrong.toml: {sorted(stale)}"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOCAL))
def test_public_tests_catch_the_local_mutant(name, corpus, run_pytest_forked, tmp_path):
    results = outcomes(run_pytest_forked, tmp_path, corpus[1][name])
    test = LOCAL[name][2]
    failed = [text for n, (state, text) in results.items() if n.split("[")[0] == test and state == "failure"]
    assert failed, f"{test} does not fail on {name}: {results}"
    if name in MUST_SAY:
        assert any(MUST_SAY[name] in text for text in failed), failed


@pytest.mark.slow
def test_an_int64_annotation_is_not_failed_on_the_cpu(corpus, run_pytest_forked, tmp_path):
    """`HD: tl.int64` makes slot*HD int64 on the GPU, where grading runs, and the interpreter
    ignores it: the CPU's sparse-cache test must say it cannot judge, not fail a right answer."""
    if _here() == "cuda":
        pytest.skip("the sparse-cache test runs on the CPU only")
    reference = (REPO / "reference" / "l1_paged_kv_write.py").read_text(encoding="utf-8")
    edits = [{"old": "    slot = tl.load(slot_ptr + t).to(tl.int64)     # int64 before any multiply\n",
              "new": "    slot = tl.load(slot_ptr + t).to(tl.int32)\n"},
             {"old": "key_stride, value_stride, HD, BLOCK: tl.constexpr):",
              "new": "key_stride, value_stride, HD: tl.int64, BLOCK: tl.constexpr):"}]
    annotated = tmp_path / "annotated.py"
    annotated.write_text(mutant_source(reference, "", edits, "annotated"), encoding="utf-8")
    results = outcomes(run_pytest_forked, tmp_path, annotated)
    state, text = results["test_offsets_past_2_32_on_sparse_caches"]
    assert state == "skipped" and "HD: tl.int64" in text, results
    assert not [n for n, (s, _) in results.items() if s in ("failure", "error")], results


@pytest.mark.skipif(not _gpu_with_room(), reason="the overflow test needs a GPU with 28 GB free")
def test_overflow_test_catches_int32_offsets(corpus, run_pytest_forked, tmp_path):
    test = "test_offsets_past_2_31_on_the_graded_cache"
    wrong = outcomes(run_pytest_forked, tmp_path, corpus[0]["int32_offsets"].file, "--overflow", "-k", test)
    assert wrong[test][0] == "failure" and "int64" in wrong[test][1], wrong
    right = outcomes(run_pytest_forked, tmp_path, REPO / "reference" / "l1_paged_kv_write.py", "--overflow", "-k", test)
    assert right[test][0] == "passed", right


def right_entries():
    table = tomllib.loads(RIGHT.read_text(encoding="utf-8"))
    return sorted(table.items())


@pytest.mark.slow
@pytest.mark.parametrize("name, spec", right_entries(), ids=[n for n, _ in right_entries()])
def test_right_entry_passes_every_public_test(name, spec, run_pytest_forked, tmp_path):
    if spec.get("device") not in (None, _here()):
        pytest.skip(f"{name} is graded on the {spec['device']} only (right.toml)")
    results = outcomes(run_pytest_forked, tmp_path, REPO / "tests" / "corpus" / "right" / f"{name}.py")
    assert len(results) >= 30
    bad = {n: r for n, r in results.items() if r[0] not in ("passed", "skipped")}
    assert not bad, bad
