"""From per-test outcomes to points: each area's points are shared by its tests,
an area scores only when the areas it requires passed completely, and a test
the run never reported scores nothing."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..assignment import Assignment

DETAIL_CHARS = 2000      # a test's recorded detail, kept for the instructor, is cut to this

# not_measured: a timing found no quiet window on the GPU (grader/gpu/quiet.py). Its area is left out
# of the grading, as on a machine without the device, and the report asks for a regrade.
OUTCOMES = ("passed", "failed", "error", "crashed", "timeout", "skipped", "not_measured")
# Not an area: seconds charged to it (the submission's worker starting, before the first test)
# are taken out of that test's area and reported as a phase, worker_start_s (report.build).
WORKER_START = "(worker start)"
# Nor this: seconds a session fixture waited for other gradings on a shared GPU (another's making
# of a figure they share, a turn or a quiet window taken outside a test), reported as the phase
# gpu_neighbours_wait_s. A test's own waits stay in its area and in its figures (validate
# leaves them out of the budgets).
NEIGHBOURS = "(neighbours' work)"
# Nor this: seconds spent making a figure every grading on this GPU reads (a GPU memo, such as the
# reference's timings), once per GPU for the memo's lifetime, in whichever grading needs it first.
# It is the GPU's cost, not this file's, so no budget pays for it: the phase gpu_shared_figure_s.
SHARED_FIGURE = "(a figure shared on this GPU)"


@dataclass
class TestResult:
    __test__ = False    # a record, not a pytest test class

    nodeid: str
    area: str
    contract: str
    outcome: str
    hint: str = ""
    duration_s: float = 0.0
    measure: float | None = None       # for areas scored on a curve (e.g. speed vs the reference)
    figures: dict[str, float] | None = None   # what the measure was computed from, for instructors
    score: float = 0.0
    max_score: float = 0.0
    gated_by: list[str] = field(default_factory=list)
    # Seconds of this test's time that were another area's work (a session fixture set up for
    # that area in this test's setup): counted there, not here, in each area's seconds.
    charged: dict[str, float] = field(default_factory=dict)
    # What the test recorded for the instructor (record_property("detail", ...)); never shown to students.
    detail: str | None = None


@dataclass
class AreaResult:
    name: str
    points: float
    graded: bool             # False where the area does not apply on this device
    passed: int = 0
    total: int = 0
    score: float = 0.0
    gated_by: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def complete(self) -> bool:
        """Every test passed (a curve's partial credit still counts as passed)."""
        return self.total > 0 and self.passed == self.total


def score(assignment: Assignment, results: list[TestResult], device: str) -> dict[str, AreaResult]:
    areas = {name: AreaResult(name, a.points, a.applies_on(device)) for name, a in assignment.areas.items()}
    for r in results:
        areas[r.area].total += 1
        areas[r.area].passed += r.outcome == "passed"
        if r.outcome == "not_measured" and areas[r.area].graded:
            areas[r.area].graded = False
            areas[r.area].note = f"not measured, to be regraded: {r.hint}"
    # An area passes in full only when complete and not gated itself, so gates pass on:
    # a write gated by kernel_write gates performance too.
    graded = [name for name, a in areas.items() if a.graded]
    short = set(assignment.with_dependents([n for n in graded if not areas[n].complete], through=graded))
    for area in areas.values():
        spec = assignment.areas[area.name]
        if not area.graded:
            # not a failure: said so, lest "0/3" beside it read as one
            area.note = area.note or f"{'GPU' if spec.device == 'cuda' else spec.device} only: not graded on this machine"
            continue
        if area.total == 0:
            area.note = "no test of this area ran"
            continue
        area.gated_by = [req for req in spec.requires if areas[req].graded and req in short]
        if area.gated_by:
            area.note = "no points until " + ", ".join(area.gated_by) + " passes completely"
    for r in results:
        area = areas[r.area]
        r.max_score = area.points / area.total if area.graded else 0.0
        r.gated_by = list(area.gated_by)
        passed = r.outcome == "passed" and not area.gated_by
        r.score = r.max_score * assignment.areas[r.area].credit(r.measure) if passed else 0.0
        area.score += r.score
    return areas


def regrade(areas: dict[str, AreaResult]) -> str | None:
    """Why the grading must be made again (an area was not measured), or None."""
    notes = [f"{a.name}: {a.note}" for a in areas.values() if a.note.startswith("not measured")]
    return "; ".join(notes) or None


def totals(areas: dict[str, AreaResult]) -> tuple[float, float]:
    graded = [a for a in areas.values() if a.graded]
    return sum(a.score for a in graded), sum(a.points for a in graded)
