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
    # slot_mapping and reshape_and_cache raise; the kernel cannot (see make_template.py). Each stub
    # says the line the tests and the grader print for it.
    for name in ("slot_mapping", "reshape_and_cache"):
        assert generated.count(f'\n    raise NotImplementedError("not written yet: {name}")\n') == 1
    kernel = generated[generated.index("def reshape_and_cache_kernel("):generated.index("def reshape_and_cache(")]
    assert "raise" not in kernel
    assert 'tl.static_assert(False, "not written yet: reshape_and_cache_kernel")' in kernel
    header = generated[:generated.index('"""')]
    assert '"not written yet: ..."' in header and "tl.static_assert(False, ...)" in header
    assert "raise NotImplementedError(...)" in header
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

    target.write_bytes(first.replace(b"raise NotImplementedError(", b"return (", 1))
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
    assert "raised" in proc.stdout and "not written yet: reshape_and_cache_kernel" in proc.stdout, proc.stdout


# --- "not written yet": the public tests and the grader read a stub alike ----------------

STUBS = {
    "raise NotImplementedError()": True,
    'raise NotImplementedError("not written yet: f")': True,
    "raise NotImplementedError": True,
    '"""Only a docstring."""': True,
    "pass": True,
    "...": True,
    'tl.static_assert(False, "not written yet: f")': True,
    "assert False": True,
    "return 1": False,
    "x = 1\n    raise NotImplementedError()": False,
    "raise ValueError()": False,
    "tl.static_assert(True)": False,
}


@pytest.fixture(scope="module")
def public_conftest():
    import importlib.util
    spec = importlib.util.spec_from_file_location("public_conftest", REPO / "tests" / "public" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("body, stub", list(STUBS.items()), ids=list(STUBS))
def test_a_stub_is_read_alike_by_the_public_tests_and_the_grader(public_conftest, body, stub):
    from grader.grading.submission_file import unwritten
    source = f"def f(a):\n    {body}\n\ndef g():\n    return 2\n"
    assert public_conftest.unwritten(source, ("f", "g")) == (["f"] if stub else [])
    assert unwritten(source, ("f", "g")) == (["f"] if stub else [])


def test_the_last_definition_counts_and_a_name_bound_otherwise_is_written(public_conftest):
    from grader.grading.submission_file import unwritten
    source = "def f():\n    raise NotImplementedError()\n\ndef f():\n    return 1\n\ng = f\n"
    for read in (public_conftest.unwritten, unwritten):
        assert read(source, ("f", "g")) == []
        assert read(source + "def g():\n    pass\n", ("f", "g")) == ["g"]
        assert read(TEMPLATE.read_text(encoding="utf-8"), ("slot_mapping", "reshape_and_cache_kernel",
                                                           "reshape_and_cache")) == \
            ["slot_mapping", "reshape_and_cache_kernel", "reshape_and_cache"]
        assert read(REFERENCE.read_text(encoding="utf-8"), ("slot_mapping", "reshape_and_cache")) == []


@pytest.mark.slow
def test_the_graders_report_opens_with_the_line_and_runs_nothing(tmp_path):
    """Grading the template runs none of its code: every test fails with the one line, which the
    report puts first under its score."""
    import json
    import subprocess
    import sys
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", "--submission", str(TEMPLATE),
                           "--report", str(report), "--device", "cpu"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    graded = json.loads(report.read_text(encoding="utf-8"))
    line = "not written yet: slot_mapping, reshape_and_cache_kernel, reshape_and_cache"
    assert graded["extra_data"]["problem"] == line
    body = graded["output"].splitlines()
    assert body[2] == f"**{line}**", body[:4]
    # (a gated area's tests add that they score nothing until their gate passes)
    assert {t["output"].split(". ")[-1] for t in graded["tests"] if t.get("status") == "failed"} == {line}
    assert graded["score"] == 0
