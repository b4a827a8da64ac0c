"""An assignment as data: paths, the functions a submission exposes, and the rubric."""
from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class AssignmentError(ValueError):
    """The assignment's own files are wrong: an instructor's mistake, not a student's."""


@dataclass(frozen=True)
class Area:
    name: str
    points: float
    summary: str = ""
    requires: tuple[str, ...] = ()
    device: str | None = None           # "cuda": graded only where a GPU is present
    curve: tuple[tuple[float, float], ...] = ()   # measure -> fraction of a test's points

    def credit(self, measure: float | None) -> float:
        """Fraction of a passed test's points: 1 without a curve, else the curve at `measure`
        (piecewise linear, flat beyond its ends); no measure, no credit."""
        if not self.curve:
            return 1.0
        if measure is None:
            return 0.0
        (x0, y0), *rest = self.curve
        if measure <= x0:
            return y0
        for x1, y1 in rest:
            if measure <= x1:
                return y0 + (y1 - y0) * (measure - x0) / (x1 - x0)
            x0, y0 = x1, y1
        return y0

    def applies_on(self, device: str) -> bool:
        return self.device is None or self.device == device


@dataclass(frozen=True)
class LeaderboardColumn:
    """One column of Gradescope's leaderboard: a number a hidden test recorded, on gradings
    where that test passed."""
    name: str
    test: str                 # the test's name as pytest shows it, parameters included: test_x[case]
    figure: str               # "measure" (what the area's curve scores) or one of the test's figures
    order: str = "desc"       # Gradescope's sort order: "desc" (larger is better) or "asc"


@dataclass(frozen=True)
class Assignment:
    id: str
    title: str
    folder: Path
    submission: str
    functions: tuple[str, ...]
    reference: Path
    hidden_tests: Path
    call_timeout_s: float
    time_budget_s: float
    worker_memory_bytes: int | None = None   # None: the confinement's default
    grading_gpu_bytes: int | None = None     # the most GPU memory one grading uses at once
    protect: tuple[Path, ...] = ()           # more folders a submission must not read
    leaderboard: tuple[LeaderboardColumn, ...] = ()   # empty: the report carries no leaderboard

    def protected_paths(self) -> list[Path]:
        """Closed to the worker's uid: the solution, the hidden suites, the repository's
        history (which holds both) and whatever the assignment adds."""
        return [self.reference.parent, self.hidden_tests, REPO / ".git", *self.protect]
    areas: dict[str, Area] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: str | Path) -> "Assignment":
        folder = Path(folder)
        path = folder / "assignment.toml" if folder.is_dir() else folder
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise AssignmentError(f"no assignment file at {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise AssignmentError(f"{path}: {exc}") from None
        meta = data.get("assignment", {})
        try:
            areas = {name: Area(name=name, points=float(spec["points"]), summary=spec.get("summary", ""),
                                requires=tuple(spec.get("requires", ())), device=spec.get("device"),
                                curve=tuple((float(x), float(y)) for x, y in spec.get("curve", ())))
                     for name, spec in data.get("rubric", {}).items()}
            assignment = cls(
                id=meta["id"], title=meta.get("title", meta["id"]), folder=path.parent,
                submission=meta["submission"], functions=tuple(meta["functions"]),
                reference=REPO / meta["reference"], hidden_tests=REPO / meta["hidden_tests"],
                call_timeout_s=float(meta.get("call_timeout_s", 60)),
                time_budget_s=float(meta.get("time_budget_s", 900)),
                worker_memory_bytes=int(meta["worker_memory_mb"]) << 20 if "worker_memory_mb" in meta else None,
                grading_gpu_bytes=int(float(meta["gpu_memory_gib"]) * 2**30) if "gpu_memory_gib" in meta else None,
                protect=tuple(REPO / p for p in meta.get("protect", ())),
                leaderboard=_leaderboard(data.get("leaderboard", {}), path),
                areas=areas)
        except KeyError as exc:
            raise AssignmentError(f"{path}: missing key {exc}") from None
        for area in areas.values():
            unknown = set(area.requires) - set(areas)
            if unknown:
                raise AssignmentError(f"{path}: area {area.name} requires unknown {sorted(unknown)}")
        return assignment

    def fingerprint(self) -> str:
        """sha256 over assignment.toml and the hidden suites: a report graded under other
        tests or another rubric is stale even when the grader's version is the same."""
        digest = hashlib.sha256()
        files = [self.folder / "assignment.toml", *sorted(self.hidden_tests.rglob("*.py"))]
        for path in files:
            path = path.resolve()           # the same digest whether the folder was given relative or not
            digest.update(str(path.relative_to(REPO) if path.is_relative_to(REPO) else path.name).encode())
            digest.update(path.read_bytes())
        return digest.hexdigest()

    def with_dependents(self, names, through=None) -> tuple[str, ...]:
        """`names` and every area that requires one of them, directly or through another
        (an area gated by a gated area is gated too), in rubric order. A gate passes on only
        through areas in `through` (default: every area)."""
        reached = set(names)
        changed = True
        while changed:
            changed = False
            for name, area in self.areas.items():
                gates = reached if through is None else reached & set(through)
                if name not in reached and gates & set(area.requires):
                    reached.add(name)
                    changed = True
        return tuple(a for a in self.areas if a in reached)

    @property
    def total_points(self) -> float:
        return sum(a.points for a in self.areas.values())


def _leaderboard(spec: dict, path: Path) -> tuple[LeaderboardColumn, ...]:
    """[leaderboard] enabled = true/false, columns = [{name, test, figure, order}]: off unless enabled."""
    if not spec.get("enabled", False):
        return ()
    columns = []
    for i, col in enumerate(spec.get("columns", ())):
        try:
            column = LeaderboardColumn(name=col["name"], test=col["test"], figure=col["figure"],
                                       order=col.get("order", "desc"))
        except (KeyError, TypeError) as exc:
            raise AssignmentError(f"{path}: leaderboard column {i + 1} needs name, test and figure ({exc})") from None
        if column.order not in ("asc", "desc"):
            raise AssignmentError(f"{path}: leaderboard column {column.name!r}: order must be \"asc\" or \"desc\", "
                                  f"not {column.order!r}")
        columns.append(column)
    if not columns:
        raise AssignmentError(f"{path}: the leaderboard is enabled but has no columns")
    return tuple(columns)
