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
