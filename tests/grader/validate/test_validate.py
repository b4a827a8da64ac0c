"""The kill matrix (grader/validate/matrix.py): its logic on hand-made reports, and one real
run of the quick adversarial submissions through the grader."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grader.validate import corpus as corp                     # noqa: E402
from grader.validate import matrix as v                      # noqa: E402
from grader.assignment import Assignment               # noqa: E402
from grader.grading.report import build                         # noqa: E402
from grader.sandbox.processes import processes_of     # noqa: E402
from grader.grading.scoring import TestResult, score            # noqa: E402
import shared_gradings                                  # noqa: E402

ASSIGNMENT = Assignment.load(REPO / "assignment" / "l1_paged_kv_write")
CPU = v.columns(ASSIGNMENT, "cpu")
QUICK = ["sys_exit_at_import", "patch_pytest_reports", "tensor_subclass", "pickle_payload", "constant_stub",
         "do_nothing_kernel"]


def report(passed=(), partial=(), drop=True, uid=61234, device="cpu"):
    """A report as the grader writes it: areas in `passed` earn all their points,
    areas in `partial` half of them, the rest nothing."""
    results = []
    for name in ASSIGNMENT.areas:
        outcomes = ["passed", "passed"] if name in passed else ["passed", "failed"] if name in partial \
            else ["failed", "failed"]
        results += [TestResult(f"test_{name}.py::t{i}", name, "contract", o) for i, o in enumerate(outcomes)]
    areas = score(ASSIGNMENT, results, device)
    sandbox = {"privilege_drop": drop, "uid": uid if drop else None}
    return build(ASSIGNMENT, areas, results, submission={"file": "x.py", "sha256": "0" * 64, "bytes": 1},
                 environment={"device": device, "device_name": "cpu", "python": "3", "torch": "t",
                              "triton": "t", "triton_interpreter": device == "cpu"},
                 sandbox=sandbox, phases={"total_s": 1.0}, instructor={"seed": 1})


def entry(kind="wrong", name="bug", fails=(), deserves=None, without=None):
    return corp.Entry(kind, name, Path(f"{name}.py"), fails=tuple(fails), deserves=deserves,
                   deserves_without_drop=without)


ALL = set(ASSIGNMENT.areas)
REFERENCE = entry("reference", "reference")


# -- areas, cells, expectations ---------------------------------------------------------
def test_columns_leave_out_areas_of_another_device():
    assert "performance" not in CPU and "write" in CPU
    assert "performance" in v.columns(ASSIGNMENT, "cuda")


def test_an_area_passes_only_with_all_its_points():
    got = v.area_passed(report(passed={"write", "slot_mapping"}, partial={"padding"}), CPU)
    assert got["slot_mapping"] is True and got["padding"] is False and got["validation"] is False
    # write requires kernel_write, which failed: its tests passed but it earned nothing
    assert got["write"] is False


def test_cells():
    assert [v.cell("fail", False), v.cell("fail", True), v.cell("pass", True), v.cell("pass", False)] == \
        ["killed", "MISS", "ok", "EXTRA"]
    assert [v.cell(None, True), v.cell(None, False)] == ["pass", "fail"]


def test_expectations():
    assert set(corp.expectations(REFERENCE, CPU).values()) == {"pass"}
    wrong = corp.expectations(entry(fails=["padding", "performance"]), CPU)
    assert wrong["padding"] == "fail" and wrong["write"] == "pass" and "performance" not in wrong
    assert set(corp.expectations(entry("adversarial", deserves=0), CPU, 0.0).values()) == {"fail"}
    assert set(corp.expectations(entry("adversarial", deserves=5), CPU, 5.0).values()) == {None}


# -- judging one grading ------------------------------------------------------------------
def test_reference_at_full_marks_is_fine():
    row = v.judge(REFERENCE, report(passed=ALL), CPU, device="cpu")
    assert row.problems == [] and set(row.cells.values()) == {"ok"}


def test_reference_below_full_marks_is_a_problem():
    row = v.judge(REFERENCE, report(passed=ALL - {"padding"}), CPU)
    assert row.cells["padding"] == "EXTRA"
    assert any("reference scored" in p for p in row.problems)


def test_wrong_submission_killed_exactly_where_expected():
    row = v.judge(entry(fails=["padding"]), report(passed=ALL - {"padding"}), CPU)
    assert row.problems == [] and row.cells["padding"] == "killed" and row.cells["write"] == "ok"


def test_wrong_submission_miss_and_extra():
    row = v.judge(entry(fails=["padding", "validation"]), report(passed=ALL - {"padding", "write"}), CPU)
    assert row.cells["validation"] == "MISS" and row.cells["write"] == "EXTRA"
    assert "passes validation, which it must fail" in row.problems
    assert "fails write, which it must pass" in row.problems


def test_wrong_submission_notes_areas_not_graded_here():
    row = v.judge(entry(fails=["performance", "write"]), report(passed=ALL - {"write", "performance"}), CPU)
    assert row.problems == [] and any("performance" in n for n in row.notes)


def test_adversarial_scoring_more_than_it_deserves():
    bad = v.judge(entry("adversarial", deserves=0, without=0), report(passed={"slot_mapping"}), CPU)
    assert bad.cells["slot_mapping"] == "MISS"
    assert any("deserves at most 0" in p for p in bad.problems)
    good = v.judge(entry("adversarial", deserves=0, without=0), report(), CPU)
    assert good.problems == [] and good.score == 0


def test_adversarial_allowance_follows_the_privilege_drop():
    e = entry("adversarial", deserves=0, without=None)        # deserves_without_privilege_drop = "any"
    assert v.judge(e, report(passed={"slot_mapping"}, drop=False), CPU).problems == []
    assert v.judge(e, report(passed={"slot_mapping"}, drop=True), CPU).problems != []


def test_an_adversarial_test_running_past_the_call_timeout_is_a_problem():
    rep = report()
    rep["tests"][0]["extra_data"]["duration_s"] = 155.0
    e = entry("adversarial", deserves=0, without=0)
    assert v.overlong_tests(rep, 60) == [155.0]
    assert any("past the 60 s call timeout" in p for p in v.judge(e, rep, CPU, call_timeout_s=60).problems)
    assert v.judge(e, rep, CPU, call_timeout_s=100).problems == []
    # a slow but honest wrong submission is judged on its areas only
    assert v.judge(entry(fails=sorted(ALL)), rep, CPU, call_timeout_s=60).problems == []


def test_grader_failures_and_leftovers_are_problems():
    row = v.judge(REFERENCE, None, CPU, grade_error="the grader exited with status 1")
    assert row.problems == ["the grader exited with status 1"]
    assert v.judge(REFERENCE, None, CPU).problems == ["no report"]
    row = v.judge(REFERENCE, report(passed=ALL), CPU, leftovers=["pid 7 (python worker.py)"],
                  schema_problems=["score: -1 is less than the minimum of 0"])
    assert len(row.problems) == 2
    row = v.judge(REFERENCE, report(passed=ALL, device="cpu"), CPU, device="cuda")
    assert any("graded on cpu" in p for p in row.problems)


def right(device=None):
    return corp.Entry("right", "style", Path("style.py"), device=device, may_lose=("performance",))


def test_right_entry_at_full_marks_is_fine():
    row = v.judge(right(), report(passed=ALL), CPU, device="cpu")
    assert row.problems == [] and set(row.cells.values()) == {"ok"}


def test_right_entry_losing_any_point_outside_performance_is_a_problem():
    row = v.judge(right(), report(passed=ALL - {"padding"}, partial={"padding"}), CPU)
    assert row.cells["padding"] == "EXTRA"
    assert row.problems == ["a correct solution lost points in padding: 5/10 points, 1 of 2 tests passed"]
    # a gate shows as the reason: write passed its tests but earned nothing
    row = v.judge(right(), report(passed=ALL - {"kernel_write"}), CPU)
    assert any("lost points in write: 0/25 points, gated by kernel_write" in p for p in row.problems)
    assert any("lost points in kernel_write" in p for p in row.problems)
    # policy gates nothing: a style it misjudges loses policy's points and no more
    row = v.judge(right(), report(passed=ALL - {"policy"}), CPU)
    assert [p.split(":")[0] for p in row.problems] == ["a correct solution lost points in policy"]


def test_right_entry_may_lose_speed_points_and_the_matrix_shows_how_many():
    cols = v.columns(ASSIGNMENT, "cuda")
    rep = report(passed=ALL, device="cuda")
    rep["extra_data"]["areas"]["performance"]["score"] = 9.1      # slower than the reference
    row = v.judge(right(), rep, cols, device="cuda")
    assert row.problems == [] and row.cells["performance"] == "9.1/15" and row.cells["write"] == "ok"
    assert "9.1/15" in v.render([row], cols)


def test_a_cheat_may_not_outscore_its_honest_twin():
    cols = v.columns(ASSIGNMENT, "cuda")
    twin = corp.Entry("wrong", "slow", Path("slow.py"), fails=("performance",))
    cheat = corp.Entry("wrong", "cheat", Path("cheat.py"), fails=("performance",), no_more_than="slow")

    def rows(cheat_score, twin_score):
        made = [v.judge(twin, report(ALL - {"performance"}, device="cuda"), cols, device="cuda"),
                v.judge(cheat, report(ALL - {"performance"}, device="cuda"), cols, device="cuda")]
        made[0].score, made[1].score = twin_score, cheat_score
        v.compare_twins(made)
        return made[1]
    assert not rows(89.4, 89.5).problems and "against its honest twin" in rows(89.4, 89.5).notes[-1]
    assert not rows(89.5 + v.TWIN_SLACK, 89.5).problems
    assert "the trick paid" in rows(93.2, 89.5).problems[0]
    alone = v.judge(cheat, report(ALL - {"performance"}, device="cuda"), cols, device="cuda")
    v.compare_twins([alone])
    assert not alone.problems and "not compared" in alone.notes[-1]


def test_a_race_twin_must_lose_the_tests_its_twin_loses(tmp_path):
    """A race twin (`same_as`) is its twin's bug with the kernel's programs run in another order.
    Losing a test the twin keeps means which write landed last decided that verdict, which on a
    GPU changes from run to run; tests of a curved area (performance) are left out, their timings
    differing between any two gradings."""
    twin = corp.Entry("wrong", "clamp", Path("clamp.py"), fails=("padding", "performance"))
    racer = corp.Entry("wrong", "clamp_reversed", Path("clamp_reversed.py"), fails=("padding", "performance"),
                       same_as="clamp")

    def raced(twin_passed, racer_passed):
        """The race twin's row after the comparison: its notes, and the problems the comparison added."""
        made = []
        for e, passed in ((twin, twin_passed), (racer, racer_passed)):
            rep = report(passed, device="cuda")
            path = tmp_path / f"{e.name}-{len(passed)}.json"
            path.write_text(json.dumps(rep))
            row = v.judge(e, rep, v.columns(ASSIGNMENT, "cuda"), device="cuda")
            row.report_path, row.problems = str(path), []
            made.append(row)
        v.compare_race_twins(made, {"performance"})
        return made[1]
    both = ALL - {"padding", "performance"}
    same = raced(both, both)
    assert not same.problems and "loses the same" in same.notes[-1]
    assert not raced(both | {"performance"}, both).problems, "a curved area's tests are not compared"
    lost = raced(both, both - {"write"})
    assert lost.problems[0].startswith("loses 2.1 write: contract; 2.2 write: contract that its race twin clamp keeps")
    assert "which program's write lands last decided a verdict" in lost.problems[0]
    alone = v.judge(racer, report(both), CPU)
    alone.report_path, alone.problems = str(tmp_path / "alone.json"), []
    v.compare_race_twins([alone], set())
    assert not alone.problems and "not compared" in alone.notes[-1]


def test_render_shows_every_row_and_problem():
    rows = [v.judge(REFERENCE, report(passed=ALL), CPU),
            v.judge(entry(fails=["padding"]), report(passed=ALL), CPU)]
    text = v.render(rows, CPU)
    assert "reference" in text and "wrong/bug !" in text and "MISS" in text
    assert "! wrong/bug: passes padding, which it must fail" in text


# -- reports against the schema -------------------------------------------------------------
def test_schema_accepts_a_built_report_and_rejects_a_broken_one():
    good = report(passed={"slot_mapping"})
    assert v.schema_problems(good) == []
    broken = dict(good, score=-1)
    del broken["tests"]
    assert len(v.schema_problems(broken)) == 2


def test_validate_refuses_to_run_without_jsonschema(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "jsonschema", None)        # import jsonschema now fails
    args = argparse.Namespace(assignment=str(ASSIGNMENT.folder), only=None, fast=True, device="cpu",
                              out=str(tmp_path / "v.json"), jobs=None, no_privilege_drop=False, reports_dir=None)
    assert v.main(args) == 2
    assert "jsonschema is not installed" in capsys.readouterr().err
    assert not (tmp_path / "v.json").exists()


# -- the corpus files ---------------------------------------------------------------------
def write_corpus(tmp_path, wrong="", adversarial="", right=None):
    kinds = (("wrong", wrong), ("adversarial", adversarial)) + ((("right", right),) if right is not None else ())
    for kind, text in kinds:
        (tmp_path / kind).mkdir()
        (tmp_path / f"{kind}.toml").write_text(text)
        for line in text.splitlines():
            if line.startswith("["):
                (tmp_path / kind / f"{line.strip('[]')}.py").write_text("def reshape_and_cache(): pass\n")
    return tmp_path


def test_load_corpus_reads_both_files(tmp_path):
    corpus = write_corpus(tmp_path, '[a]\nbug = "x"\nfails = ["padding"]\n[b]\nfails = ["write"]\nfast = true\n',
                          '[c]\ndeserves = 0\ntrick = "t"\n[d]\ndeserves = 0\n'
                          'deserves_without_privilege_drop = "any"\nfast = true\n')
    entries = corp.load_corpus(ASSIGNMENT, corpus)
    assert [e.label for e in entries] == ["reference", "wrong/a", "wrong/b", "adversarial/c", "adversarial/d"]
    c, d = entries[3], entries[4]
    assert (c.deserves, c.deserves_without_drop, d.deserves_without_drop) == (0.0, 0.0, None)
    assert entries[1].fails == ("padding",) and entries[1].note == "x"
    assert [e.label for e in corp.select(entries, fast=True)] == ["reference", "wrong/b", "adversarial/d"]
    assert [e.label for e in corp.select(entries, only=["a", "adversarial/c"])] == ["wrong/a", "adversarial/c"]
    with pytest.raises(corp.CorpusError):
        corp.select(entries, only=["nope"])


def test_a_wrong_entry_may_fail_more_areas_on_one_device(tmp_path):
    """A crash the interpreter meets and the GPU does not: fails_on adds areas (and what they
    gate) on that device only."""
    corpus = write_corpus(tmp_path, '[a]\nfails = ["padding"]\nfails_on = { cpu = ["kernel_write"] }\n', "")
    (a,) = [e for e in corp.load_corpus(ASSIGNMENT, corpus) if e.kind == "wrong"]
    on_cpu = corp.expectations(a, CPU, device="cpu")
    assert on_cpu["kernel_write"] == on_cpu["write"] == on_cpu["padding"] == "fail"  # write requires kernel_write
    on_gpu = corp.expectations(a, v.columns(ASSIGNMENT, "cuda"), device="cuda")
    assert on_gpu["kernel_write"] == on_gpu["write"] == "pass" and on_gpu["padding"] == "fail"


def test_a_wrong_entry_may_be_wrong_on_one_device_only(tmp_path):
    """Slow only where the machine is slow (a speed contract the GPU meets within its slack):
    graded on that device, skipped with the reason elsewhere."""
    corpus = write_corpus(tmp_path, '[a]\nfails = ["slot_mapping"]\ndevice = "cpu"\n', "")
    (a,) = [e for e in corp.load_corpus(ASSIGNMENT, corpus) if e.kind == "wrong"]
    assert corp.skip_reason(a, CPU, "cpu") is None
    assert corp.skip_reason(a, v.columns(ASSIGNMENT, "cuda"), "cuda") == "runs on cpu only"


def test_an_adversarial_entry_whose_trick_needs_a_gpu_is_graded_there_only(tmp_path):
    """A trick that exists on one device (a thread or a child busy on the GPU; without one it is the
    reference) costs a grading and proves nothing elsewhere."""
    corpus = write_corpus(tmp_path, "", '[c]\ndeserves = "any"\ndevice = "cuda"\n')
    (c,) = [e for e in corp.load_corpus(ASSIGNMENT, corpus) if e.kind == "adversarial"]
    assert corp.skip_reason(c, v.columns(ASSIGNMENT, "cuda"), "cuda") is None
    assert corp.skip_reason(c, CPU, "cpu") == "runs on cuda only"


@pytest.mark.parametrize("wrong,adversarial,why", [
    ('[a]\nfails = ["write"]\ndevice = "gpu"\n', "", "device"),
    ("", "[c]\ndeserves = 0\ndevice = \"gpu\"\n", "device"),
    ('[a]\nfails = ["write"]\nfails_on = { tpu = ["write"] }\n', "", "fails_on"),
    ('[a]\nfails = ["write"]\nfails_on = { cpu = ["speed"] }\n', "", "fails_on"),
    ('[a]\nbug = "x"\n', "", "fails"),
    ('[a]\nfails = ["write"]\nno_more_than = "b"\n', "", "no_more_than"),
    ('[a]\nfails = ["write"]\nno_more_than = "a"\n', "", "no_more_than"),
    ('[a]\nfails = ["write"]\nsame_as = "b"\n', "", "same_as"),
    ('[a]\nfails = ["write"]\nsame_as = "a"\n', "", "same_as"),
    ('[a]\nfails = ["speed"]\n', "", "unknown areas"),
    ("", "[c]\ntrick = 't'\n", "deserves"),
    ("", "[c]\ndeserves = -1\n", "points"),
    ("", "[c]\ndeserves = 0\ndeserves_without_privilege_drop = 'some'\n", "points"),
])
def test_load_corpus_rejects_malformed_entries(tmp_path, wrong, adversarial, why):
    with pytest.raises(corp.CorpusError, match=why):
        corp.load_corpus(ASSIGNMENT, write_corpus(tmp_path, wrong, adversarial))


def test_a_race_twin_is_its_twins_edits_then_its_own(tmp_path):
    """A race twin writes down only the reordering: its file carries its twin's bug too, so the
    two cannot drift apart when the twin's edit changes."""
    twin = "[[b.edit]]\nold = '''\n    mask = offs < n_valid\n'''\nnew = '''\n    mask = offs <= n_valid\n'''\n"
    mine = ("[[a.edit]]\nold = '''\n    t = tl.program_id(0).to(tl.int64)             # this program's token\n'''\n"
            "new = '''\n    t = (tl.num_programs(0) - 1 - tl.program_id(0)).to(tl.int64)\n'''\n")
    wrong = '[b]\nfails = ["write"]\n' + twin + '[a]\nfails = ["write"]\nsame_as = "b"\n' + mine
    mutants = tmp_path / "mutants"
    mutants.mkdir()
    entries = {e.name: e for e in corp.load_corpus(ASSIGNMENT, write_corpus(tmp_path, wrong), mutants=mutants)}
    a, b = entries["a"].file.read_text(), entries["b"].file.read_text()
    assert "mask = offs <= n_valid" in a and "mask = offs <= n_valid" in b
    assert "tl.num_programs(0) - 1 - tl.program_id(0)" in a and "tl.num_programs(0)" not in b


def test_load_corpus_reads_right_entries(tmp_path):
    corpus = write_corpus(tmp_path, '[a]\nfails = ["padding"]\n', "",
                          '[r]\nstyle = "triton.jit(f)"\nfast = true\n[g]\nstyle = "autotune"\ndevice = "cuda"\n')
    entries = corp.load_corpus(ASSIGNMENT, corpus)
    assert [e.label for e in entries] == ["reference", "wrong/a", "right/r", "right/g"]
    r, g = entries[2], entries[3]
    assert (r.note, r.device, g.device) == ("triton.jit(f)", None, "cuda")
    assert r.may_lose == ("performance",)         # the areas scored on a curve
    assert [e.label for e in corp.select(entries, fast=True)] == ["reference", "wrong/a", "right/r"]
    assert corp.skip_reason(g, CPU, "cpu") == "runs on cuda only"
    assert corp.skip_reason(g, v.columns(ASSIGNMENT, "cuda"), "cuda") is None and corp.skip_reason(r, CPU, "cpu") is None


@pytest.mark.parametrize("right,why", [
    ('[r]\nfast = true\n', "style"),
    ('[r]\nstyle = "x"\ndevice = "gpu"\n', "device"),
])
def test_load_corpus_rejects_malformed_right_entries(tmp_path, right, why):
    with pytest.raises(corp.CorpusError, match=why):
        corp.load_corpus(ASSIGNMENT, write_corpus(tmp_path, right=right))


def test_load_corpus_needs_each_file(tmp_path):
    corpus = write_corpus(tmp_path, '[a]\nfails = ["write"]\n')
    (corpus / "wrong" / "a.py").unlink()
    with pytest.raises(corp.CorpusError, match="no file"):
        corp.load_corpus(ASSIGNMENT, corpus)


TINY_REFERENCE = '''"""The reference's own docstring."""
import torch


def add(x):
    return x + 1
'''


def test_mutant_is_the_reference_with_its_edits_under_its_own_docstring():
    text = corp.mutant_source(TINY_REFERENCE, '"""Wrong: adds two."""\n', [{"old": "x + 1", "new": "x + 2"}], "w [a]")
    assert text == '"""Wrong: adds two."""\nimport torch\n\n\ndef add(x):\n    return x + 2\n'


@pytest.mark.parametrize("old,why", [("x + 3", "0 times"), ("\n", "times, not once")])
def test_mutant_edit_that_does_not_match_once_is_an_error(old, why):
    with pytest.raises(corp.CorpusError, match=why):
        corp.mutant_source(TINY_REFERENCE, "", [{"old": old, "new": "y"}], "w [a]")


def test_the_real_corpus_loads_and_fast_is_small(tmp_path):
    entries = corp.load_corpus(ASSIGNMENT, mutants=tmp_path)
    reference = ASSIGNMENT.reference.read_text()
    for e in entries:       # every mutant is a real submission: it parses and differs from the reference
        if e.kind == "wrong":
            text = e.file.read_text()
            compile(text, str(e.file), "exec")
            assert text.split("import", 1)[1] != reference.split("import", 1)[1], e.name
    fast = corp.select(entries, fast=True)
    assert fast[0].kind == "reference"
    wrong = [e for e in fast if e.kind == "wrong"]
    assert all(e.fast for e in wrong) or len(wrong) <= corp.FAST_WRONG
    assert {e.name for e in fast if e.kind == "adversarial"} <= set(QUICK)
    right = [e for e in entries if e.kind == "right"]
    assert len(right) >= 8 and all(e.note for e in right)
    assert 2 <= len([e for e in fast if e.kind == "right"]) <= 3
    assert all(e.device is None for e in fast if e.kind == "right")   # --fast runs on the CPU too


# -- processes ----------------------------------------------------------------------------
def test_stray_processes_sees_a_descendant():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in v.stray_processes(None)
    finally:
        child.kill()
        child.wait()
    assert child.pid not in v.stray_processes(None)


# -- end to end ----------------------------------------------------------------------------
PWNED = Path("/tmp/pwned-pickle_payload")         # what pickle_payload's answer writes if unpickled


@pytest.mark.xdist_group("pickle_payload")        # PWNED is one path for the whole machine
def test_quick_adversarial_submissions_score_nothing(corpus_matrix):
    """The quick tricks through the real grader, two validations at once (--jobs 2; make test's
    whole matrix where it is current, else these six graded now): 0 points, valid reports,
    nothing left behind."""
    pytest.importorskip("jsonschema")
    labels = [f"adversarial/{name}" for name in QUICK]
    full = shared_gradings.full_matrix()
    if full is None or not all(label in full.rows for label in labels):
        PWNED.unlink(missing_ok=True)
    matrix = corpus_matrix(labels)
    rows = {label: matrix.row(label) for label in labels}
    for label, row in rows.items():
        assert row["score"] == 0, (label, row)
        assert row["problems"] == [], (label, row["problems"])     # schema, leftovers, exit status
        rep = matrix.report(label)
        assert v.schema_problems(rep) == []
        uid = rep["extra_data"]["sandbox"].get("uid")
        if uid is not None:
            assert not processes_of(uid), label
    # written at any time since the matrix's gradings began, it was one of them that unpickled
    assert not (PWNED.exists() and PWNED.stat().st_mtime >= matrix.started - 1), \
        f"the grader unpickled a submission's answer ({matrix.source})"


def test_parallel_runs_start_with_what_was_slowest_last_time(tmp_path):
    entries = [corp.Entry("wrong", n, Path(f"{n}.py")) for n in ("quick", "slow", "new", "medium")]
    for name, wall in (("quick", 12.0), ("slow", 200.0), ("medium", 40.0)):
        (tmp_path / f"wrong-{name}.row.json").write_text(json.dumps({"rows": [{"wall_s": wall}]}))
    (tmp_path / "wrong-medium.row.json").write_text("{truncated")
    assert [e.name for e in v.longest_first(entries, tmp_path)] == ["new", "medium", "slow", "quick"]


def test_a_cheat_that_pays_under_weaker_isolation_is_shouted_about():
    """Allowed ("any") where workers share the grader's uid, a cheat's points still say the grades
    of that machine do not hold: validate prints a warning in the matrix, and fails where the
    report says the uid was its own."""
    e = entry("adversarial", name="find_reference", deserves=0, without=None)
    weak = v.judge(e, report(passed={"slot_mapping"}, drop=False), CPU)
    assert weak.problems == [] and any(n.startswith("WARNING: scored 15") for n in weak.notes)
    assert "WARNING" in v.render([weak], CPU) and "WARNING" in v.summary_line(weak)
    strong = v.judge(e, report(passed={"slot_mapping"}, drop=True), CPU)
    assert strong.problems == ["scored 15.0, deserves at most 0"]
    assert not any("WARNING" in n for n in strong.notes)
    honest = v.judge(e, report(drop=False), CPU)
    assert honest.problems == [] and not any("WARNING" in n for n in honest.notes)


# A uid outside the workers' pool (confine.UID_RANGE), so that no grading running beside owns it.
STRANGER = 3_999_917


@pytest.mark.skipif(os.geteuid() != 0, reason="making files of another uid needs root")
def test_files_a_uid_left_are_found_where_it_could_have_written_them(tmp_path):
    """Entries of the uid in a folder it may write are found (a folder of its own whole, not its
    contents), below folders it may only enter too; a folder it may not enter is not looked into."""
    def folder(path, mode, owner=0):
        path.mkdir()
        os.chown(path, owner, owner)
        path.chmod(mode)
        return path

    def mine(path):
        path.write_text("x")
        os.chown(path, STRANGER, STRANGER)
        return str(path)

    root = folder(tmp_path / "root", 0o755)
    open_ = folder(root / "open", 0o1777)
    left = [mine(open_ / "file"), str(folder(open_ / "own", 0o700, STRANGER))]
    mine(open_ / "own" / "inside")                                    # under its folder: not listed apart
    deep = folder(folder(root / "enter-only", 0o711) / "open-again", 0o777)
    left.append(mine(deep / "file"))
    mine(folder(root / "closed", 0o700) / "file")                    # it could not have reached this
    group = folder(root / "its-group", 0o770)
    os.chown(group, 0, STRANGER)
    left.append(mine(group / "file"))
    assert sorted(v._owned_by(STRANGER, str(root))) == sorted(left)


@pytest.mark.skipif(os.geteuid() != 0, reason="making files of another uid needs root")
def test_files_left_in_the_shared_tmp_are_named_and_removed():
    import tempfile
    planted = Path(tempfile.gettempdir()) / f"left-by-{STRANGER}-{os.getpid()}"
    planted.write_text("x")
    os.chown(planted, STRANGER, STRANGER)
    try:
        said = v.files_left_by(STRANGER)
        assert any(str(planted) in line for line in said), said
        assert not planted.exists()
    finally:
        planted.unlink(missing_ok=True)
