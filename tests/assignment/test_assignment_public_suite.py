"""The public tests, run the way a student runs them: in a child pytest process."""
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PUBLIC = "tests/public"


def junit_cases(path):
    return list(ET.parse(path).getroot().iter("testcase"))


# The one public test that skips on a CPU (and on a GPU unless asked for): 26 GB of caches.
OPT_IN = "test_offsets_past_2_31_on_the_graded_cache"


def problems(case):
    return [child for child in case if child.tag in ("failure", "error", "skipped")
            and not (child.tag == "skipped" and case.get("name") == OPT_IN)]


@pytest.mark.slow
def test_passes_against_the_reference(run_pytest, tmp_path):
    report = tmp_path / "junit.xml"
    proc = run_pytest(PUBLIC, "-q", "--submission", "reference/l1_paged_kv_write.py",
                      f"--junitxml={report}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = junit_cases(report)
    assert len(cases) >= 10
    assert not [c.get("name") for c in cases if problems(c)]


NOT_WRITTEN = "not written yet: "


@pytest.mark.slow
def test_the_template_prints_one_line_and_runs_nothing(run_pytest, tmp_path):
    report = tmp_path / "junit.xml"
    proc = run_pytest(PUBLIC, "-q", "--submission", "student_template/l1_paged_kv_write.py",
                      f"--junitxml={report}")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    lines = output.splitlines()
    assert lines[0] == NOT_WRITTEN + "slot_mapping, reshape_and_cache_kernel, reshape_and_cache", lines[:3]
    assert len(lines) < 40, output
    assert "NotImplementedError" not in output and "Traceback" not in output, output
    assert junit_cases(report) == [], "a test ran although every function is unwritten"


def wrapper_only():
    """The template with reshape_and_cache written (the reference's) and the rest left as it is."""
    template = (REPO / "student_template" / "l1_paged_kv_write.py").read_text(encoding="utf-8")
    reference = (REPO / "reference" / "l1_paged_kv_write.py").read_text(encoding="utf-8")
    wrapper = reference[reference.index("def reshape_and_cache("):]
    return template[:template.index("def reshape_and_cache(")] + wrapper


@pytest.mark.slow
def test_a_written_wrapper_with_the_templates_kernel_runs_only_its_checks(run_pytest, tmp_path):
    """The wrapper's own checks (validation) run; nothing that launches the kernel stub does."""
    submission = tmp_path / "l1_paged_kv_write.py"
    submission.write_text(wrapper_only(), encoding="utf-8")
    report = tmp_path / "junit.xml"
    proc = run_pytest(PUBLIC, "-q", "--submission", str(submission), f"--junitxml={report}")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert output.splitlines()[0] == NOT_WRITTEN + "slot_mapping, reshape_and_cache_kernel", output
    assert len(output.splitlines()) < 40, output
    ran = junit_cases(report)
    assert ran and all("rejected" in c.get("name") for c in ran), [c.get("name") for c in ran]
    assert not [c.get("name") for c in ran if problems(c)], output


SYNTAX_ERROR = "def slot_mapping(block_table, seq_idx, positions, block_size)\n    return 0\n"


def without_reshape_and_cache():
    text = (REPO / "student_template" / "l1_paged_kv_write.py").read_text(encoding="utf-8")
    return text[:text.index("def reshape_and_cache(")]


@pytest.mark.parametrize("content, expected", [
    (None, "no submission at"),
    (SYNTAX_ERROR, "does not compile: line 1"),
    (without_reshape_and_cache(), "does not define reshape_and_cache"),
], ids=["missing-file", "syntax-error", "no-reshape_and_cache"])
@pytest.mark.slow
def test_bad_submission_gives_one_clear_line(run_pytest, tmp_path, content, expected):
    submission = tmp_path / "l1_paged_kv_write.py"
    if content is not None:
        submission.write_text(content, encoding="utf-8")
    proc = run_pytest(PUBLIC, "-q", "--submission", str(submission))
    output = proc.stdout + proc.stderr
    assert proc.returncode not in (0, 1), output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert any(expected in line for line in lines), output
    # pytest prints the exit reason once on stdout and once on stderr; nothing else.
    assert all(expected in line for line in lines), output


@pytest.mark.slow
def test_a_test_that_hangs_ends_the_run_naming_it(run_pytest, tmp_path):
    """A kernel that writes far outside its tensors under the interpreter can leave the process
    hung on memory it corrupted instead of dead: the run is ended after L1_TEST_HANG_S seconds
    in one test, and the student is told which test hung, not left waiting."""
    source = (REPO / "reference" / "l1_paged_kv_write.py").read_text()
    head = source.index(":\n", source.index("def slot_mapping(")) + 2
    hangs = tmp_path / "l1_paged_kv_write.py"
    hangs.write_text(source[:head] + "    while True:\n        pass\n" + source[head:])
    proc = run_pytest(PUBLIC, "-q", "--submission", str(hangs), extra_env={"L1_TEST_HANG_S": "3"})
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "The Python process hung for 3 s while running tests/public/" in said, said[-2000:]
    assert "::test_slot_mapping" in said.split("hung for 3 s while running ")[1].split(", and was ended")[0]
