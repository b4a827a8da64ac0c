"""The student bundle holds what students need and none of the solution, and names no file it lacks."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "reference" / "l1_paged_kv_write.py"
PRIVATE = [REPO / "reference", REPO / "tests" / "hidden", REPO / "tests" / "corpus", REPO / "grader"]
# The one file of grader/ that is public by design: the grading service's client.
CLIENT = REPO / "grader" / "service" / "submit_client.py"
EXPECTED = {"l1_paged_kv_write.py", "statement.en.md", "statement.zh.md", "Makefile", "README.md", "submit.py",
            "bench_mine.py", "performance.md", "tests/conftest.py", "tests/l1_watch.py",
            "tests/test_l1_paged_kv_write.py"}


@pytest.fixture(scope="module")
def bundle(load_tool, tmp_path_factory):
    out = tmp_path_factory.mktemp("release")
    return load_tool("make_release").build(REPO / "assignment" / "l1_paged_kv_write", out)


def bundle_files(bundle):
    return {p.relative_to(bundle).as_posix(): p for p in bundle.rglob("*") if p.is_file()}


def solution_lines():
    """Code lines between the reference's solution markers, comments dropped."""
    lines, inside = [], False
    for raw in REFERENCE.read_text(encoding="utf-8").splitlines():
        if raw.strip() in ("### BEGIN SOLUTION", "### END SOLUTION"):
            inside = raw.strip() == "### BEGIN SOLUTION"
            continue
        code = raw.split("#")[0].strip()
        if inside and len(code) >= 12:  # shorter lines (`return`, `HD = H * D`) are not telling
            lines.append(code)
    return lines


def test_bundle_has_exactly_the_expected_files(bundle):
    assert set(bundle_files(bundle)) == EXPECTED
    assert bundle.name == "l1_paged_kv_write"


def test_bundle_carries_the_committed_template(bundle):
    template = REPO / "student_template" / "l1_paged_kv_write.py"
    assert (bundle / "l1_paged_kv_write.py").read_bytes() == template.read_bytes()


def test_no_solution_code_in_the_bundle(bundle):
    forbidden = ["### BEGIN SOLUTION", "### END SOLUTION",
                 "tl.where(slot >= 0, HD, 0)", "block_table[seq_idx, logical_block]"]
    forbidden += solution_lines()
    assert len(forbidden) > 10, "the reference's solution regions were not found"
    for name, path in bundle_files(bundle).items():
        text = path.read_text(encoding="utf-8")
        leaked = [line for line in forbidden if line in text]
        assert not leaked, f"{name} contains solution code: {leaked}"


def test_no_private_file_in_the_bundle(bundle):
    private = {p.read_bytes() for root in PRIVATE if root.exists()
               for p in root.rglob("*") if p.is_file() and p != CLIENT}
    for name, path in bundle_files(bundle).items():
        assert path.read_bytes() not in private, f"{name} is a copy of a private file"
        assert not {"reference", "hidden", "corpus", "grader"} & set(Path(name).parts)


def test_rebuild_starts_from_scratch(load_tool, tmp_path):
    stale = tmp_path / "l1_paged_kv_write" / "solution_notes.txt"
    stale.parent.mkdir()
    stale.write_text("left over", encoding="utf-8")
    bundle = load_tool("make_release").build(REPO / "assignment" / "l1_paged_kv_write", tmp_path)
    assert set(bundle_files(bundle)) == EXPECTED


def test_makefile_runs_the_tests_with_a_chosen_python(bundle):
    makefile = (bundle / "Makefile").read_text(encoding="utf-8")
    assert "PYTHON ?= python3" in makefile
    assert "\t$(PYTHON) -m pytest tests -q" in makefile


def test_bundle_carries_the_client_as_it_is(bundle):
    # Copied, not rewritten: the client students run is the one tests/grader/service/test_submit_client.py tests.
    assert (bundle / "submit.py").read_bytes() == CLIENT.read_bytes()
    client = (bundle / "submit.py").read_text(encoding="utf-8")
    # Standard library only: a student's bare python3 must run it.
    assert "import torch" not in client and "from grader" not in client and "from ." not in client


def test_makefile_checks_and_hands_in_with_the_client(bundle):
    makefile = (bundle / "Makefile").read_text(encoding="utf-8")
    assert "SUBMISSION ?= l1_paged_kv_write.py" in makefile
    assert "check:\n\t@$(PYTHON) submit.py submit $(SUBMISSION)\n" in makefile
    # LATE=1: after the deadline the service asks for the student's --late before a hand-in counts
    assert "submit:\n\t@$(PYTHON) submit.py submit $(SUBMISSION) --hand-in $(if $(LATE),--late)\n" in makefile
    # No token on a command line, where `ps` would show it to everyone on the machine.
    assert "--token" not in makefile


def test_readme_tells_where_the_token_goes(bundle):
    readme = (bundle / "README.md").read_text(encoding="utf-8")
    for needed in (".grader", "token = ", "server = ", "GRADER_TOKEN", "make check", "make submit",
                   "score: X / Y", "per hour", "marked late"):
        assert needed in readme, needed


@pytest.mark.slow
def test_bundle_tests_find_the_file_beside_them(bundle, run_pytest, tmp_path):
    # A solved copy of the bundle, tested from another directory with no
    # --submission: the tests must pick up the l1_paged_kv_write.py next to them.
    solved = tmp_path / "solved"
    shutil.copytree(bundle, solved)
    shutil.copyfile(REFERENCE, solved / "l1_paged_kv_write.py")
    proc = run_pytest(str(solved / "tests"), "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout and "failed" not in proc.stdout


def test_readme_installs_what_the_interpreter_needs(bundle):
    readme = (bundle / "README.md").read_text(encoding="utf-8")
    assert "pip install torch triton numpy pytest" in readme


def test_bundle_statements_carry_the_curve(bundle):
    for name in ("statement.en.md", "statement.zh.md"):
        text = (bundle / name).read_text(encoding="utf-8")
        assert "| 0.25 | 0.00 | 0.00 |" in text and "| 0.7 | 1.00 | 15.00 |" in text, name


@pytest.mark.slow
@pytest.mark.parametrize("style", ["heuristics_block", "autotune_configs"])
def test_bundle_tests_pass_a_decorated_kernel(bundle, run_pytest, tmp_path, style):
    # @triton.heuristics and @triton.autotune make objects that are not callable, and
    # autotune cannot time configs under the interpreter: both must still run to green.
    solved = tmp_path / "solved"
    shutil.copytree(bundle, solved)
    shutil.copyfile(REPO / "tests" / "corpus" / "right" / f"{style}.py", solved / "l1_paged_kv_write.py")
    proc = run_pytest(str(solved / "tests"), "-q", cwd=solved)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout and "failed" not in proc.stdout


@pytest.mark.slow
def test_missing_numpy_is_named_not_blamed_on_the_file(bundle, run_pytest, tmp_path):
    blocker = tmp_path / "blocked" / "numpy"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n", encoding="utf-8")
    solved = tmp_path / "solved"
    shutil.copytree(bundle, solved)
    shutil.copyfile(REFERENCE, solved / "l1_paged_kv_write.py")
    proc = run_pytest(str(solved / "tests"), "-q", cwd=solved, extra_env={"PYTHONPATH": str(blocker.parent)})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "numpy is missing: pip install numpy" in output
    assert "line " not in output, output


@pytest.mark.slow
def test_a_crash_of_the_process_names_the_test_it_died_in(bundle, run_pytest, tmp_path):
    """A store far outside a tensor kills the process under the interpreter, and under -q the
    dump names no test: the bundle's tests say which one it died in. The crash here is a real
    segmentation fault in the write, as a wild store makes one."""
    solved = tmp_path / "solved"
    shutil.copytree(bundle, solved)
    crashing = REFERENCE.read_text(encoding="utf-8") + (
        "\n\n_write = reshape_and_cache\n\n\n"
        "def reshape_and_cache(key, value, k_cache, v_cache, slot_mapping):\n"
        "    if key.shape[0] == 3:\n"
        "        import ctypes\n"
        "        ctypes.string_at(0)          # reads address 0: SIGSEGV\n"
        "    return _write(key, value, k_cache, v_cache, slot_mapping)\n")
    (solved / "l1_paged_kv_write.py").write_text(crashing, encoding="utf-8")
    proc = run_pytest(str(solved / "tests"), "-q", cwd=solved)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "The Python process died while running " in output and "::test_" in output.split("died while running ")[1], \
        output[-3000:]


# --- what the bundle cites, it carries ---------------------------------------------

# A file name in backticks: a path with a slash, or a name with a file's extension.
FILE_NAME = re.compile(r"`([\w.-]*/[\w./-]*|[\w.-]+\.(?:py|md|toml|json|txt|sh))`")
# Named in the bundle but not part of it by design: what the student makes (.grader), and folders
# that the name of a test file inside the bundle stands in for.
MADE_BY_THE_STUDENT = {".grader"}


@pytest.mark.parametrize("name", ["statement.en.md", "statement.zh.md", "README.md", "performance.md"])
def test_every_file_the_bundle_names_is_in_it(bundle, name):
    text = (bundle / name).read_text(encoding="utf-8")
    cited = set(FILE_NAME.findall(text)) - MADE_BY_THE_STUDENT
    assert cited, f"{name} names no file at all: the pattern is wrong"
    missing = sorted(c for c in cited if not (bundle / c).exists())
    assert not missing, f"{name} names files the bundle does not carry: {missing}"


def test_the_statements_cite_the_bundles_own_files(bundle):
    for name in ("statement.en.md", "statement.zh.md"):
        text = (bundle / name).read_text(encoding="utf-8")
        for cited in ("`bench_mine.py`", "`performance.md`", "`l1_paged_kv_write.py`",
                      "`tests/test_l1_paged_kv_write.py`"):
            assert cited in text, f"{name} does not cite {cited}"
        assert "<!--" not in text, f"{name} ships the generated blocks' markers"
        for lesson_only in ("solutions/", "mine/", "drills", "docs/"):
            assert lesson_only not in text, f"{name} names {lesson_only}, which students do not have"


def test_the_performance_figures_ship_with_the_bundle(bundle, load_tool):
    tables = load_tool("statement_tables")
    figures, ceiling, measured = tables.reference_figures(bundle / "performance.md")
    assert (figures, ceiling, measured) == tables.reference_figures()
    for name in ("statement.en.md", "statement.zh.md"):
        text = (bundle / name).read_text(encoding="utf-8")
        assert f"{figures[(65536, 8, 128, 'fp16', 'fused')][0]:,} GB/s" in text and f"{ceiling:,} GB/s" in text


def test_bench_mine_help_runs_without_a_gpu(bundle):
    """bench_mine.py answers --help anywhere, before it imports torch."""
    proc = subprocess.run([sys.executable, str(bundle / "bench_mine.py"), "--help"], capture_output=True,
                          text=True, timeout=60, cwd=bundle, env={"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "usage: bench_mine.py" in proc.stdout and "--submission" in proc.stdout and "--launches" in proc.stdout


def test_bench_mine_holds_the_graders_cases_curve_and_the_statements_figures(bundle, load_tool, assignment):
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_mine", bundle / "bench_mine.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tables = load_tool("statement_tables")
    cases = tables.timed_cases(REPO / "tests" / "hidden" / "l1_paged_kv_write")
    assert bench.CASES == cases
    figures, ceiling, _ = tables.reference_figures()
    assert bench.REFERENCE_GBPS == {case: figures[(T, H, D, dt, layout)][0]
                                    for case, (T, H, D, dt, layout, _n) in cases.items()}
    assert bench.H200_CEILING_GBPS == ceiling
    performance = assignment["rubric"]["performance"]
    assert bench.POINTS == performance["points"]
    assert [list(p) for p in bench.CURVE] == performance["curve"]
    assert bench.credit(0.7) == 1.0 and bench.credit(0.25) == 0.0 and bench.credit(0.475) == 0.5


@pytest.mark.slow
def test_the_unwritten_template_prints_one_line(bundle, run_pytest, tmp_path):
    """The bundle as students get it: its public run opens with the one line and runs nothing."""
    fresh = tmp_path / "fresh"
    shutil.copytree(bundle, fresh)
    proc = run_pytest(str(fresh / "tests"), "-q", cwd=fresh)
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert lines[0] == "not written yet: slot_mapping, reshape_and_cache_kernel, reshape_and_cache", lines[:3]
    assert len(lines) < 40, "\n".join(lines)
    assert "Traceback" not in proc.stdout and "NotImplementedError" not in proc.stdout


@pytest.mark.slow
def test_bench_mine_times_and_checks_a_small_case_on_the_cpu(bundle, run_kernel_check):
    """Its batches, its check of the written rows and its PyTorch scatter, on a case small enough for
    the interpreter (its clock means nothing there): the reference and the scatter write the rows
    right, a kernel that never stores V does not, and the points follow the curve."""
    proc = run_kernel_check(f"""
import importlib.util, sys, torch
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
bench = load("bench_mine", {str(bundle / "bench_mine.py")!r})
ref = load("ref", {str(REFERENCE)!r})
device = "cuda" if torch.cuda.is_available() else "cpu"
bench.CASES["tiny"] = (48, 2, 32, "fp16", "fused", 2)
bench.CASES["tiny-plain"] = (40, 2, 40, "bf16", "plain", 3)
def no_values(key, value, k_cache, v_cache, slots):
    ref.reshape_and_cache(key, value, k_cache, torch.zeros_like(v_cache), slots)
for case in ("tiny", "tiny-plain"):
    batch = bench.Batch(torch, case, bench.CASES[case][5], device=device)
    for name, fn in (("ref", ref.reshape_and_cache), ("scatter", bench.pytorch_scatter), ("no_values", no_values)):
        seconds, right = bench.timed(torch, fn, batch, 2)
        print(case, name, right, seconds > 0)
    print(case, "bytes", batch.bytes_moved)
""")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    for case in ("tiny", "tiny-plain"):
        assert f"{case} ref True True" in lines and f"{case} scatter True True" in lines, proc.stdout
        assert f"{case} no_values False True" in lines, proc.stdout
    assert f"tiny bytes {2 * (4 * 48 * 64 * 2 + 8 * 48)}" in lines     # the grader's count: K, V read and written
