"""Both statements list the rubric exactly as assignment.toml defines it, every graded shape as
the hidden suites use it, and only what is graded."""
import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENT_DIR = REPO / "assignment" / "l1_paged_kv_write"
HIDDEN = REPO / "tests" / "hidden" / "l1_paged_kv_write"
ROW = re.compile(r"^\|\s*`(\w+)`\s*\|\s*(\d+)\s*\|", re.MULTILINE)


def generated(text, begin, end):
    return text[text.index(begin):text.index(end)]


@pytest.mark.parametrize("name", ["statement.en.md", "statement.zh.md"])
def test_statement_rubric_matches_the_toml(assignment, name, tables):
    text = generated((ASSIGNMENT_DIR / name).read_text(encoding="utf-8"), tables.BEGIN, tables.END)
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


def _assignment_copy(tmp_path):
    """The assignment folder and its hidden suite copied under tmp_path, its other paths absolute."""
    folder = tmp_path / "assignment" / "l1_paged_kv_write"
    folder.mkdir(parents=True)
    for f in ASSIGNMENT_DIR.iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    hidden = tmp_path / "hidden"
    shutil.copytree(HIDDEN, hidden, ignore=shutil.ignore_patterns("__pycache__"))
    toml = folder / "assignment.toml"
    text = toml.read_text(encoding="utf-8").replace('"../../tests/hidden/l1_paged_kv_write"', f'"{hidden}"')
    toml.write_text(text.replace('../../', str(REPO) + "/"), encoding="utf-8")
    return folder, hidden


def test_check_mode_finds_a_stale_block(tables, tmp_path, monkeypatch, capsys):
    folder, _ = _assignment_copy(tmp_path)
    toml = folder / "assignment.toml"
    monkeypatch.setattr(tables, "REPO", tmp_path)
    argv = ["--assignment", "assignment/l1_paged_kv_write"]
    assert tables.main(argv + ["--check"]) == 0
    toml.write_text(toml.read_text(encoding="utf-8").replace("points = 25", "points = 24"), encoding="utf-8")
    assert tables.main(argv + ["--check"]) == 1
    assert "statement.en.md, statement.zh.md" in capsys.readouterr().err
    assert tables.main(argv) == 0
    assert "| `write` | 24 |" in (folder / "statement.en.md").read_text(encoding="utf-8")
    assert tables.main(argv + ["--check"]) == 0


def test_check_mode_finds_a_graded_shape_the_statements_lack(tables, tmp_path, monkeypatch, capsys):
    """A shape a hidden test starts to use is a stale statement in both languages until regenerated."""
    folder, hidden = _assignment_copy(tmp_path)
    monkeypatch.setattr(tables, "REPO", tmp_path)
    argv = ["--assignment", "assignment/l1_paged_kv_write"]
    assert tables.main(argv + ["--check"]) == 0
    padding = hidden / "test_padding.py"
    old = "H, D, BS, NB, T = 4, 64, 16, 64, 40"
    assert old in padding.read_text(encoding="utf-8")
    padding.write_text(padding.read_text(encoding="utf-8").replace(old, "H, D, BS, NB, T = 4, 64, 16, 96, 50"),
                       encoding="utf-8")
    assert tables.main(argv + ["--check"]) == 1
    assert "statement.en.md, statement.zh.md" in capsys.readouterr().err
    assert tables.main(argv) == 0
    for name in ("statement.en.md", "statement.zh.md"):
        assert "| `padding` | 16–50 | 4 | 64 | 256 | 16 | 16, 96 | fp16 |" in (folder / name).read_text(encoding="utf-8")
    assert tables.main(argv + ["--check"]) == 0


def test_the_shapes_table_holds_every_graded_shape(tables):
    """Spot checks of what the suites' source says against the table: the largest write, the int64
    cache, the timed cases, the block sizes of slot_mapping."""
    from grader.assignment import Assignment
    text = (ASSIGNMENT_DIR / "statement.en.md").read_text(encoding="utf-8")
    block = generated(text, tables.SHAPES_BEGIN, tables.SHAPES_END)
    assert tables.shapes_block(Assignment.load(ASSIGNMENT_DIR), "en") in text
    rows = {m.group(1): line for line in block.splitlines() if (m := re.match(r"\| `(\w+)` \|", line))}
    assert set(rows) == set(Assignment.load(ASSIGNMENT_DIR).areas)
    assert "| 0–2,048 | 1–8 | 64–256 | 64–1,024 | 8–32 | 4–10,000 | fp16, bf16, fp32 |" in rows["write"]
    assert "| 32 | 128 | 4,096 | 16 | 100,000 | fp16 |" in rows["int64_overflow"]
    assert "| 0–2,000,000 |" in rows["slot_mapping"] and "| 1–32 |" in rows["slot_mapping"]
    assert "| 4,096, 65,536 | 8, 32 | 80, 128 | 640–4,096 | 16 |" in rows["performance"]


def test_the_timed_cases_carry_the_figures_of_performance_md(tables):
    figures, ceiling, _ = tables.reference_figures()
    text = (ASSIGNMENT_DIR / "statement.en.md").read_text(encoding="utf-8")
    gbps = figures[(65536, 8, 128, "fp16", "fused")][0]
    assert f"| prefill | 65,536 | 8 | 128 | fp16 | views of a fused QKV tensor | {gbps:,} GB/s |" in text
    assert f"about {gbps:,} GB/s on the prefill case" in text and f"{ceiling:,} GB/s" in text


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
                   "`key.stride(0)`", "`value.stride(0)`", "numpy", "`bench_mine.py`", "`performance.md`",
                   "`not written yet: slot_mapping, reshape_and_cache_kernel`", "mask has unsupported dtype",
                   "`(offs < HD) & (slot >= 0)`", "test_slot_mapping_is_vectorised", "2,000,000",
                   "test_offsets_past_2_32_on_sparse_caches", "L1 提示与讲解"):
        assert needed in text, f"{name} does not mention {needed}"
    assert f'**{assignment["assignment"]["call_timeout_s"]["cuda"]} ' in text      # the H200's, which grades


# What the statements used to say that is not graded, or names a file students do not have.
NOT_SO = ("returns `None`", "-> None", "slot_mapping` are **read-only**", "slot_mapping` 都是**只读**",
          "docs/performance.md", "course repository", "课程仓库", "solutions/", "mine/",
          "template's version runs one program", "模板里的写法是每个 token 一个 program",
          "must also run under the CPU interpreter", "还必须能在 CPU 解释器", "so do not rely on one",
          "timed against one gather", "与一次 gather 比较用时", "no cache on which an int32 offset goes wrong fits",
          "All offsets in **int64**: the token index", "偏移一律用 **int64**：token 下标")


@pytest.mark.parametrize("name", STATEMENTS)
def test_statement_says_nothing_it_should_not(name):
    # The generated blocks' markers are HTML comments for the statement's maintainers, which the
    # bundle's copy leaves out (tools/make_release.py).
    text = re.sub(r"<!--.*?-->", "", (ASSIGNMENT_DIR / name).read_text(encoding="utf-8"))
    found = [phrase for phrase in NOT_SO if phrase in text]
    assert not found, f"{name} says {found}"


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
