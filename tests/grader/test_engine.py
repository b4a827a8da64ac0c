"""The engine, end to end, on a toy assignment: scores, crash isolation, hostile submissions."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toy_reports import REPO, by_outcome, sandbox_processes, validate_report


def test_correct_submission_gets_full_marks(toy_report):
    report = toy_report("good")
    validate_report(report)
    assert report["score"] == report["max_score"] == 90.0      # gpu_only is left out on the CPU
    assert by_outcome(report).keys() == {"passed", "skipped"}
    assert report["extra_data"]["environment"]["triton_interpreter"] is True


def test_segfault_costs_only_its_own_test(toy_report):
    report = toy_report("segfault_on_seven")
    validate_report(report)
    outcomes = by_outcome(report)
    assert len(outcomes["crashed"]) == 1
    crashed = next(t for t in report["tests"] if t["extra_data"]["outcome"] == "crashed")
    assert "SIGSEGV" in crashed["output"]
    assert report["extra_data"]["areas"]["echo"]["passed"] == report["extra_data"]["areas"]["echo"]["total"]
    assert report["extra_data"]["instructor"]["worker"]["restarts"] == 1


def test_hang_that_ignores_signals_costs_only_its_own_test(toy_report):
    report = toy_report("hangs_on_thirteen")
    validate_report(report)
    outcomes = by_outcome(report)
    assert len(outcomes["timeout"]) == 1
    assert len(outcomes["passed"]) == len(report["tests"]) - 2     # minus the timeout and the skip
    assert sandbox_processes(report["extra_data"]["sandbox"]["uid"]) == []


def test_exit_at_import_scores_zero_and_is_not_retried_forever(toy_report):
    report = toy_report("exits_at_import")
    validate_report(report)
    assert report["score"] == 0
    outcomes = by_outcome(report)
    assert len(outcomes["crashed"]) == 2        # after two deaths in import, no new worker is started
    assert "stops the process while it is imported" in report["extra_data"]["problem"]
    assert set(outcomes) == {"crashed", "failed", "skipped"}


def test_import_error_is_the_reason_and_never_passes_a_raises_test(toy_report):
    report = toy_report("raises_at_import")
    validate_report(report)
    assert report["score"] == 0
    assert "failed to import" in report["extra_data"]["problem"]
    assert "AssertionError" in report["extra_data"]["problem"]


def test_after_an_import_failure_no_test_builds_its_inputs(toy_report):
    """Once the import has failed, the remaining tests fail at setup, with the import error,
    before their fixtures run (a real suite builds gigabytes of inputs, or waits for a GPU turn)."""
    report = toy_report("raises_at_import")
    large = next(t for t in report["tests"] if "Tensors come back as plain tensors" in t["name"])
    assert large["extra_data"]["outcome"] == "failed"
    assert "failed to import" in large["output"] and "AssertionError" in large["output"]
    toy_report("good")
    assert toy_report.built_inputs("good").read_text().split() == ["test_echo_tensor"], \
        "the costly fixture does not say when it runs: this test could not see it run"
    log = toy_report.built_inputs("raises_at_import")
    assert not log.exists(), f"the test's fixture ran after the import had failed: {log.read_text()}"


def test_the_report_says_which_isolation_was_in_force(toy_report):
    from grader.sandbox import isolate
    sandbox = toy_report("good")["extra_data"]["sandbox"]
    if isolate.available()[0]:
        assert sandbox["network"] == "own network namespace, loopback only"
        assert "/tmp" in sandbox["private_tmp"]["folders"] and sandbox["private_tmp"]["bytes"] > 0
    else:
        assert sandbox["network"].startswith("not isolated: ") and sandbox["private_tmp"] is None


def test_syntax_error_is_reported_without_running_anything(toy_report):
    report = toy_report("syntax_error")
    validate_report(report)
    assert report["score"] == 0
    assert "does not parse" in report["extra_data"]["problem"]
    assert len(report["tests"]) == 11        # every test listed, each failed with the reason


def test_missing_function_fails_its_tests_and_gates_nothing_else(toy_report):
    report = toy_report("no_echo")
    areas = report["extra_data"]["areas"]
    assert areas["add"]["score"] == 60 and areas["echo"]["score"] == 0
    echo_outputs = {t["output"] for t in report["tests"] if t["tags"] == ["echo"]}
    assert echo_outputs == {"your file has no function named 'echo'"}


def test_a_hidden_tests_detail_goes_to_the_instructor_only(toy_report):
    """record_property("detail", ...) in a hidden test lands in extra_data.instructor.details under the
    test's number, which the schema allows; nothing a student is shown carries it."""
    report = toy_report("good")
    validate_report(report)
    details = report["extra_data"]["instructor"]["details"]
    tests = report["extra_data"]["instructor"]["tests"]
    [number] = [n for n, nodeid in tests.items() if nodeid.endswith("test_add_into_rejects_shape_mismatch")]
    assert details == {number: "shapes (3,) and (4,): raised ValueError"}
    shown = [report["output"]] + [t["output"] for t in report["tests"]] + [t["name"] for t in report["tests"]]
    assert not any("shapes (3,)" in text for text in shown)


def test_hostile_results_are_refused_or_neutralised(toy_report, tmp_path):
    report = toy_report("hostile_results")
    validate_report(report)
    assert report["extra_data"]["areas"]["echo"]["score"] == 0
    assert not Path("/tmp/toy-pwned").exists(), "a pickle payload ran"
    tensor_test = next(t for t in report["tests"] if "plain tensors" in t["name"])
    assert tensor_test["extra_data"]["outcome"] == "failed"     # the subclass came back as plain zeros


def test_daemon_is_killed_and_memory_hog_stopped(toy_report):
    report = toy_report("daemon_and_memory")
    validate_report(report)
    outputs = " ".join(t["output"] for t in report["tests"])
    assert "memory" in outputs and "limit" in outputs
    assert report["extra_data"]["areas"]["add"]["score"] == 60
    assert sandbox_processes(report["extra_data"]["sandbox"]["uid"]) == []


def test_gating_area_scores_nothing_when_required_area_fails(toy_report):
    report = toy_report("segfault_on_seven")
    echo = report["extra_data"]["areas"]["echo"]
    assert echo["gated_by"] == ["add"] and echo["score"] == 0
    assert all(t["output"].startswith("No points for this area until add") for t in report["tests"]
               if t["tags"] == ["echo"])


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def test_cli_missing_submission_is_one_clear_line(tmp_path):
    r = _cli("grade", "--submission", str(tmp_path / "nope.py"), "--report", str(tmp_path / "r.json"))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no submission file" in r.stderr
    assert not (tmp_path / "r.json").exists()


def test_cli_unknown_assignment_is_one_clear_line(tmp_path):
    r = _cli("grade", "--assignment", str(tmp_path), "--report", str(tmp_path / "r.json"))
    assert r.returncode == 2 and "no assignment file" in r.stderr


@pytest.mark.slow
def test_cuda_asked_for_without_a_gpu_is_one_clear_line_everywhere(tmp_path):
    from grader.gpu.machines import cuda_device_count
    if cuda_device_count():
        pytest.skip("this machine has a CUDA device")
    (tmp_path / "submitted").mkdir()
    for args in (["grade", "--report", str(tmp_path / "r.json")], ["validate", "--fast", "--out", str(tmp_path / "v.json")],
                 ["grade-all", "--course", str(tmp_path)]):
        r = _cli(*args, "--device", "cuda")
        assert r.returncode == 2 and "no usable CUDA device" in r.stderr, (args, r.stderr[-500:])


def test_a_report_path_that_cannot_be_written_is_refused_before_grading(tmp_path):
    """Said before the grading, so that its minutes are not spent on a report with nowhere to
    go; and a device or a link at the path is never replaced by the report."""
    (tmp_path / "a_file").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere.json")
    cases = {str(tmp_path / "a_file" / "r.json"): "is not a folder",
             str(tmp_path): "it is a folder",
             "/dev/null": "something other than a plain file",
             str(tmp_path / "link"): "something other than a plain file"}
    for path, says in cases.items():
        r = _cli("grade", "--assignment", "tests/grader/toy", "--submission", "tests/grader/toy/submissions/good.py",
                 "--report", path, "--device", "cpu", "--quiet")
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (path, r.stderr[-500:])
        assert "total" not in r.stdout, f"{path}: graded before refusing"
    assert Path("/dev/null").is_char_device() and not (tmp_path / "elsewhere.json").exists()


@pytest.mark.parametrize("command", [["summary"], ["similarity"], ["serve"], ["tokens", "--add", "ann"]])
def test_a_course_folder_that_is_not_there_is_refused_not_made(tmp_path, command):
    missing = tmp_path / "typo"
    r = _cli(command[0], "--course", str(missing), *command[1:])
    assert r.returncode == 2 and f"no course folder at {missing}" in r.stderr, r.stderr[-500:]
    assert not missing.exists()


@pytest.mark.slow
def test_binary_submission_yields_a_zero_report(tmp_path):
    blob = tmp_path / "toy.py"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    r = _cli("grade", "--assignment", "tests/grader/toy", "--submission", str(blob),
             "--report", str(tmp_path / "r.json"), "--device", "cpu", "--quiet")
    assert r.returncode == 0, r.stderr
    import json
    report = json.loads((tmp_path / "r.json").read_text())
    validate_report(report)
    assert report["score"] == 0 and "not a Python source file" in report["extra_data"]["problem"]
