"""A student's feedback as Markdown, made only of the report's student-facing parts
(never extra_data, where the inputs, seed and worker logs are)."""
from __future__ import annotations


def markdown(report: dict, student: str) -> str:
    lines = [f"# Feedback for {student}", "", f"**Score: {report['score']:.2f} / {report['max_score']:.2f}**", "",
             report.get("output", "").strip(), ""]
    failed = [t for t in report.get("tests", []) if t.get("status") == "failed"]
    if failed:
        lines += ["## Tests that did not pass", ""]
        for t in failed:
            hint = " ".join(str(t.get("output", "")).split()) or "no further detail"
            lines.append(f"- **{t['number']} {t['name']}**: {hint}")
    else:
        lines.append("Every graded test passed.")
    return "\n".join(lines) + "\n"
