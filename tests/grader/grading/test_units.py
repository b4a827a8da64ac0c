"""Small pieces of the engine: the wire's strictness and the scoring rules."""
import socket

import pytest
import torch

from grader.assignment import REPO, Assignment
from grader.sandbox import wire
from grader.sandbox.exchange import tensor_from_wire
from grader.grading.scoring import TestResult, score, totals

TOY = Assignment.load(REPO / "tests/grader/toy")


@pytest.mark.parametrize("bad", [
    {"tensor": {"dtype": "object", "shape": [1], "blob": 0}},
    {"tensor": {"dtype": "float32", "shape": [2], "blob": 0}},          # 4 bytes for 2 floats
    {"tensor": {"dtype": "float32", "shape": [-1], "blob": 0}},
    {"tensor": {"dtype": "float32", "shape": [1], "blob": 5}},
    {"seq": "set", "items": []},
    {"__reduce__": "os.system"},
])
def test_results_that_are_not_plain_values_are_refused(bad):
    with pytest.raises(wire.WireError):
        wire.decode(bad, lambda d: tensor_from_wire(d, [b"\0\0\0\0"], torch.device("cpu")))


def test_result_tensor_is_rebuilt_plain():
    data = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    blob = data.view(torch.uint8).numpy().tobytes()
    t = wire.decode({"tensor": {"dtype": "bfloat16", "shape": [2], "blob": 0}},
                    lambda d: tensor_from_wire(d, [blob], torch.device("cpu")))
    assert type(t) is torch.Tensor and torch.equal(t, data)


def test_oversized_header_is_refused():
    a, b = socket.socketpair()
    a.sendall((wire.MAX_HEADER + 1).to_bytes(8, "big"))
    with pytest.raises(wire.WireError):
        wire.recv(b)


def _results(outcomes: dict[str, list[str]]) -> list[TestResult]:
    return [TestResult(f"{area}-{i}", area, "c", o) for area, os_ in outcomes.items() for i, o in enumerate(os_)]


def test_points_are_shared_within_an_area():
    results = _results({"add": ["passed", "failed", "passed"], "echo": ["passed"], "gpu_only": ["skipped"]})
    areas = score(TOY, results, "cpu")
    assert areas["add"].score == pytest.approx(40.0)
    assert areas["echo"].score == 0 and areas["echo"].gated_by == ["add"]
    assert totals(areas) == (pytest.approx(40.0), 90.0)


def test_gpu_area_counts_on_gpu_and_missing_tests_score_nothing():
    areas = score(TOY, _results({"add": ["passed"], "echo": ["passed"]}), "cuda")
    assert areas["gpu_only"].graded and areas["gpu_only"].score == 0
    assert areas["gpu_only"].note == "no test of this area ran"
    assert totals(areas) == (90.0, 100.0)


def test_gates_pass_on_through_gated_areas():
    l1 = Assignment.load(REPO / "assignment/l1_paged_kv_write")
    assert l1.with_dependents(["padding"]) == ("padding",)
    assert l1.with_dependents(["write"]) == ("write", "performance")
    assert set(l1.with_dependents(["kernel_write"])) == {"kernel_write", "write", "padding", "strided_qkv",
                                                         "int64_overflow", "performance"}
    assert l1.with_dependents(["kernel_write"], through=["kernel_write"]) == \
        l1.with_dependents(["kernel_write"])[:-1]
    # policy judges who wrote what and gates nothing: a style it misjudges loses its points only
    assert l1.with_dependents(["policy"]) == ("policy",)


def test_a_gated_area_gates_what_requires_it():
    """A pure-PyTorch write passes the write tests but fails kernel_write: write is gated, and
    so is performance, which requires write in full."""
    l1 = Assignment.load(REPO / "assignment/l1_paged_kv_write")
    results = [TestResult("k", "kernel_write", "", "failed", ""), TestResult("w", "write", "", "passed", ""),
               TestResult("f", "performance", "", "passed", "", measure=1.0)]
    areas = score(l1, results, "cuda")
    assert areas["write"].gated_by == ["kernel_write"] and areas["write"].score == 0
    assert areas["performance"].gated_by == ["write"] and areas["performance"].score == 0


def test_a_uid_is_trusted_once_it_worked_and_its_failure_is_asked_of_the_probe(tmp_path, monkeypatch):
    """A uid is not probed ahead of its first worker: that worker's hello proves it and is
    remembered per interpreter and device. A worker that did not say hello sends the question
    to the probe, which alone decides whether workers run as root from then on."""
    import sys
    import tempfile

    from grader.sandbox import confine
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    calls = []
    outcome = [(True, "")]
    monkeypatch.setattr(confine, "_probe", lambda uid, python, device, conf: calls.append(uid) or outcome[0])
    record = confine._unproven(sys.executable, "cpu", None)
    assert record is not None                      # nothing remembered yet: the first worker proves it
    conf = confine.Confinement(device="cpu", uid=61001, unproven=record)
    conf.proven()
    assert conf.unproven is None and confine._unproven(sys.executable, "cpu", None) is None
    assert confine._unproven(sys.executable, "cuda", None) is not None      # another device: asked anew
    assert calls == []                             # a hello is the probe's answer: none was run

    conf = confine.Confinement(device="cuda", uid=61002, unproven=confine._unproven(sys.executable, "cuda", None))
    assert conf.doubt() is False and conf.uid == 61002 and calls == [61002]   # the worker's own failure
    assert confine._unproven(sys.executable, "cuda", None) is None             # ... and the probe's pass is kept
    assert conf.doubt() is False and calls == [61002]                          # asked once per confinement

    record.unlink()
    outcome[0] = (False, "no torch for this uid")
    conf = confine.Confinement(device="cpu", uid=61003, unproven=confine._unproven(sys.executable, "cpu", None))
    assert conf.doubt() is True
    assert conf.uid is None and "uid 61003 cannot work here: no torch for this uid" in conf.reason
    assert confine._unproven(sys.executable, "cpu", None) is not None          # a failure is not remembered


def test_fingerprint_does_not_depend_on_how_the_folder_was_named(monkeypatch):
    """`make grade-all` names the assignment relative to the repository, the grading
    processes absolutely: both must agree, or every report reads as stale."""
    monkeypatch.chdir(REPO)
    relative = Assignment.load("assignment/l1_paged_kv_write")
    absolute = Assignment.load(REPO / "assignment/l1_paged_kv_write")
    assert relative.fingerprint() == absolute.fingerprint()


def test_figures_behind_a_measure_reach_the_report_and_fit_the_schema():
    from grader.grading import report
    from grader.validate.matrix import schema_problems
    l1 = Assignment.load(REPO / "assignment/l1_paged_kv_write")
    results = [TestResult("f", "performance", "speed", "passed", "", 1.0, 0.93,
                          {"t_mine_s": 0.00213456789, "gbps_ref": 3990.0})]
    areas = score(l1, results, "cuda")
    built = report.build(l1, areas, results, submission={}, environment={}, sandbox={}, phases={},
                         instructor={})
    assert built["tests"][0]["extra_data"]["figures"] == {"t_mine_s": 0.00213457, "gbps_ref": 3990.0}
    assert [p for p in schema_problems(built) if p.startswith("tests")] == []
    built["tests"][0]["extra_data"]["figures"]["t_mine_s"] = "fast"
    assert [p for p in schema_problems(built) if p.startswith("tests")]


def test_start_up_counts_from_the_start_of_the_process():
    """The report's start-up phase includes the interpreter and the imports (torch's take seconds)."""
    import subprocess
    import sys
    code = "import time; time.sleep(0.5); from grader.grading.grade_one import process_age; print(process_age())"
    age = float(subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout)
    assert 0.5 <= age < 30


def test_the_graders_own_process_does_not_import_torch():
    """Only the test process and the workers need torch; importing it in the process that
    spawns them and writes the report would add seconds to every grading. The test process
    itself loads the plugin and the sandbox without it, so that the worker is spawned first."""
    import subprocess
    import sys
    code = ("import sys; from grader import cli; from grader.grading import grade_one, pytest_plugin, session; "
            "from grader.course import batch; from grader.validate import matrix; from grader.gpu import machines; "
            "from grader.sandbox import Submission, Confinement; "
            "from grader.sandbox.processes import kill_tree; "
            "machines.resolve_device('auto'); grade_one.environment('cpu'); grade_one.precheck(grade_one.REPO / 'reference' / "
            "'l1_paged_kv_write.py', cli.Assignment.load('assignment/l1_paged_kv_write')); "
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"imported by the grader's own process: {out}"


def test_a_timing_not_measured_costs_no_point_and_asks_for_a_regrade(tmp_path):
    """A busy GPU leaves the timed area out of the grading, as a machine without the device
    would, and the report is not current: grade-all grades the file again on its next run."""
    import hashlib

    from grader import __version__
    from grader.grading import report, report_reader as reading
    from grader.course.folder import Course
    from grader.validate.matrix import schema_problems
    l1 = Assignment.load(REPO / "assignment/l1_paged_kv_write")
    busy = "not measured: the GPU was busy with work outside this grading (pid 7 at 93% for 1.0 s)"
    tests = [TestResult("w", "write", "rows", "passed"),
             TestResult("p1", "performance", "speed", "passed", "", 1.0, 0.95),
             TestResult("p2", "performance", "speed", "not_measured", busy)]
    areas = score(l1, tests, "cuda")
    assert not areas["performance"].graded and areas["performance"].note.startswith("not measured")
    _, top = totals(areas)
    assert top == sum(a.points for a in l1.areas.values()) - l1.areas["performance"].points
    sha = hashlib.sha256(b"x = 1\n").hexdigest()
    built = report.build(l1, areas, tests, submission={"sha256": sha}, environment={"device": "cuda"},
                         sandbox={}, phases={}, instructor={})
    assert [p for p in schema_problems(built) if "regrade" in p or "outcome" in p] == []
    assert "busy" in reading.regrade(built) and "Partly graded" in built["output"]
    assert "status" not in built["tests"][-1]           # neither passed nor failed
    course = Course(tmp_path, l1)
    assert built["extra_data"]["grader_version"] == __version__
    assert not course.is_current(built, sha)
    built["extra_data"]["regrade"] = None
    assert course.is_current(built, sha)                # the same report, measured, is current


def test_the_suites_seconds_are_split_around_pytests_session():
    """Where a slot's first grading loses its time (before pytest's session, in it, after it):
    from pytest-json-report's start and end; a record that does not fit the grading's own
    clock (tampered with, or from another run) splits nothing."""
    from grader.grading.grade_one import _session_split
    split = _session_split([102.0, 110.5], 100.0, 111.0)
    assert split == pytest.approx({"before_session_s": 2.0, "session_s": 8.5, "after_session_s": 0.5})
    for wall in (None, [99.0, 105.0], [105.0, 104.0], [101.0, 130.0], "x"):
        assert _session_split(wall, 100.0, 111.0) == {}
