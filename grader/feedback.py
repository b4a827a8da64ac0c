"""A student's feedback as Markdown, made only of the report's student-facing parts
(never extra_data, where the inputs, seed and worker logs are)."""
from __future__ import annotations

import re


def markdown(report: dict, student: str) -> str:
    summary = report.get("output", "").strip() or f"**Score: {report['score']:.2f} / {report['max_score']:.2f}**"
    lines = [f"# Feedback for {_text(student)}", "", summary, ""]   # the summary opens with the score
    failed = [t for t in report.get("tests", []) if t.get("status") == "failed"]
    if failed:
        lines += ["## Tests that did not pass", ""]
        for t in failed:
            hint = _text(str(t.get("output", ""))) or "no further detail"
            lines.append(f"- **{_text(t['number'])} {_text(t['name'])}**: {hint}")
    else:
        lines.append("Every graded test passed.")
    return "\n".join(lines) + "\n"


def _text(s: str) -> str:
    """One line of literal text: test names and hints hold `2**32`, `slot*H*D`, `[T, H, D]`.
    Underscores are left alone: inside a word (area names) Markdown keeps them."""
    return re.sub(r"([\\`*\[\]<])", r"\\\1", " ".join(s.split()))
