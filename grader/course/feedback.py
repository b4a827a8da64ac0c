"""A student's feedback as Markdown, made only of the report's student-facing parts
(never extra_data, where the inputs, seed and worker logs are)."""
from __future__ import annotations

import re


def markdown(report: dict, student: str) -> str:
    summary = report.get("output", "").strip() or f"**Score: {report['score']:.2f} / {report['max_score']:.2f}**"
    lines = [f"# Feedback for {_text(student)}", "", summary, ""]   # the summary opens with the score
    failed = [t for t in report.get("tests", []) if t.get("status") == "failed"]
    if not failed:
        lines.append("Every graded test passed.")
        return "\n".join(lines) + "\n"
    lines += ["## Tests that did not pass", ""]
    hints = [_text(str(t.get("output", ""))) or "no further detail" for t in failed]
    # A file that does not parse, or is refused, fails every test for the one reason the summary
    # states (some with a gate's note before it): said once, not once per test, so that the
    # student reads it. Tests that failed each on their own are listed, names and all.
    reason = min(hints, key=len)
    if len(failed) > 1 and reason in _text(summary) and all(h.endswith(reason) for h in hints):
        lines.append(f"All {len(failed)} tests failed for the reason above.")
    else:
        lines += [f"- **{_text(t['number'])} {_text(t['name'])}**: {hint}" for t, hint in zip(failed, hints)]
    return "\n".join(lines) + "\n"


def _text(s: str) -> str:
    """One line of literal text: test names and hints hold `2**32`, `slot*H*D`, `[T, H, D]`.
    Underscores are left alone: inside a word (area names) Markdown keeps them."""
    return re.sub(r"([\\`*\[\]<])", r"\\\1", " ".join(s.split()))
