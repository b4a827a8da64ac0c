"""Both statements list the rubric exactly as assignment.toml defines it."""
import re
from pathlib import Path

import pytest

ASSIGNMENT_DIR = Path(__file__).resolve().parents[2] / "assignment" / "l1_paged_kv_write"
ROW = re.compile(r"^\|\s*`(\w+)`\s*\|\s*(\d+)\s*\|", re.MULTILINE)


@pytest.mark.parametrize("name", ["statement.en.md", "statement.zh.md"])
def test_statement_rubric_matches_the_toml(assignment, name):
    text = (ASSIGNMENT_DIR / name).read_text(encoding="utf-8")
    listed = {area: int(points) for area, points in ROW.findall(text)}
    rubric = assignment["rubric"]
    assert listed == {area: spec["points"] for area, spec in rubric.items()}

    total = sum(spec["points"] for spec in rubric.values())
    without_gpu = sum(spec["points"] for spec in rubric.values() if spec.get("device") != "cuda")
    assert str(total) in text and str(without_gpu) in text
    for area, spec in rubric.items():
        for needed in spec.get("requires", []):
            assert f"`{needed}`" in text, f"{name} does not say that {area} requires {needed}"


STATEMENTS = ("statement.en.md", "statement.zh.md")
# Numbers each language writes in its own way: English billions, Chinese 亿.
SPELLED = {"statement.en.md": ("1.6 billion", "2.15 billion"), "statement.zh.md": ("16 亿", "21.5 亿")}


@pytest.fixture(scope="module")
def tables(load_tool):
    return load_tool("statement_tables")


@pytest.mark.parametrize("name", STATEMENTS)
def test_generated_block_matches_the_toml(tables, name):
    from grader.assignment import Assignment
    text = (ASSIGNMENT_DIR / name).read_text(encoding="utf-8")
    lang = name.split(".")[1]
    want = tables.block(Assignment.load(ASSIGNMENT_DIR), lang)
    assert want in text, f"{name}: the grading table differs from assignment.toml; run tools/statement_tables.py"


def test_check_mode_finds_a_stale_block(tables, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "assignment" / "l1_paged_kv_write"
    folder.mkdir(parents=True)
    for f in ASSIGNMENT_DIR.iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    toml = folder / "assignment.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace('../../', str(ASSIGNMENT_DIR.parents[1]) + "/"),
                    encoding="utf-8")
    monkeypatch.setattr(tables, "REPO", tmp_path)
    argv = ["--assignment", "assignment/l1_paged_kv_write"]
    assert tables.main(argv + ["--check"]) == 0
    toml.write_text(toml.read_text(encoding="utf-8").replace("points = 25", "points = 24"), encoding="utf-8")
    assert tables.main(argv + ["--check"]) == 1
    assert "statement.en.md, statement.zh.md" in capsys.readouterr().err
    assert tables.main(argv) == 0
    assert "| `write` | 24 |" in (folder / "statement.en.md").read_text(encoding="utf-8")
    assert tables.main(argv + ["--check"]) == 0


def _headings(text):
    return [line.split()[0] for line in text.splitlines() if line.startswith("#")]


def _numbers(name, text):
    for phrase in SPELLED[name]:
        text = text.replace(phrase, "")
    return {n.rstrip(",.") for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)}


def test_both_languages_have_the_same_sections_and_numbers():
    en, zh = ((ASSIGNMENT_DIR / n).read_text(encoding="utf-8") for n in STATEMENTS)
    assert _headings(en) == _headings(zh)
    assert _numbers(STATEMENTS[0], en) == _numbers(STATEMENTS[1], zh)


@pytest.mark.parametrize("name", STATEMENTS)
def test_statement_says_every_graded_rule(assignment, name):
    text = (ASSIGNMENT_DIR / name).read_text(encoding="utf-8")
    for needed in ("fp16", "bf16", "fp32", "60", "H200", "@triton.autotune", "@triton.heuristics",
                   ".item()", "100,000", "× 16 × 32", "128", "1254", "3,995", "--overflow",
                   "`key.stride(0)`", "`value.stride(0)`", "numpy"):
        assert needed in text, f"{name} does not mention {needed}"
    assert str(assignment["assignment"]["call_timeout_s"]) in text


def test_statement_times_the_cases_the_suite_times():
    import sys
    sys.path.insert(0, str(ASSIGNMENT_DIR.parents[1] / "tests" / "hidden" / "l1_paged_kv_write"))
    try:
        from timing import CASES
    finally:
        sys.path.pop(0)
    for name in STATEMENTS:
        text = (ASSIGNMENT_DIR / name).read_text(encoding="utf-8")
        for T, H, D, dtype, _layout, _n in CASES.values():
            short = {"torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32"}[str(dtype)]
            row = f"| {T:,} | {H} | {D} | {short} |"
            assert row in text, f"{name} lacks the timed case {row}"
