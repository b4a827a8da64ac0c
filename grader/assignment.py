"""An assignment as data: paths, the functions a submission exposes, and the rubric."""
from __future__ import annotations

import hashlib
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ASSIGNMENTS = REPO / "assignment"       # where --assignment looks when it is not given


def grader_env(base=None) -> dict[str, str]:
    """`base` (default: this process's environment) with this checkout first on PYTHONPATH, so
    that a grader process started from anywhere imports this grader."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env

# Every key assignment.toml may hold, per table: a misspelt key would otherwise be a silent default.
TOP_KEYS = {"assignment", "rubric", "leaderboard", "service"}
ASSIGNMENT_KEYS = {"id", "title", "submission", "functions", "reference", "template", "public_tests",
                   "hidden_tests", "corpus", "call_timeout_s", "time_budget_s", "worker_memory_mb",
                   "gpu_memory_gib", "protect"}
AREA_KEYS = {"points", "summary", "requires", "device", "curve", "budget_s"}
DEVICES = ("cpu", "cuda")
LEADERBOARD_KEYS = {"enabled", "columns"}
COLUMN_KEYS = {"name", "test", "figure", "order"}
SERVICE_KEYS = {"visibility"}
# What a grading service's check shows before the deadline, in Gradescope's words where they fit:
# "visible" everything feedback.md shows, "areas" the score and the area table, "hidden" the score.
VISIBILITIES = ("visible", "areas", "hidden")


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
    # What grading the reference may cost in this area, in seconds, by device: `validate`
    # holds the reference to it and every other entry to a few times it.
    budget_s: tuple[tuple[str, float], ...] = ()

    def budget_on(self, device: str) -> float | None:
        return dict(self.budget_s).get(device)

    def credit(self, measure: float | None) -> float:
        """Fraction of a passed test's points: 1 without a curve, else the curve at `measure`
        (piecewise linear, flat beyond its ends); no measure, no credit, and none for a NaN,
        which compares false against every point and so would fall through to the top."""
        if not self.curve:
            return 1.0
        if measure is None or math.isnan(measure):
            return 0.0
        (x0, y0), *rest = self.curve
        if measure <= x0:
            return y0
        for x1, y1 in rest:
            if measure <= x1:
                return y0 + (y1 - y0) * (measure - x0) / (x1 - x0)
            x0, y0 = x1, y1
        return y0

    def full_credit_from(self) -> float | None:
        """The least measure the curve gives full credit at; None without a curve (or one that
        never reaches it)."""
        return next((x for x, y in self.curve if y >= 1.0), None)

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
    call_timeout_s: tuple[tuple[str, float], ...]   # what one call may take, by device
    time_budget_s: float
    template: Path | None = None             # the file students start from
    public_tests: Path | None = None         # the tests students get
    corpus: Path | None = None               # what `validate` grades (grader/validate/corpus.py)
    worker_memory_bytes: int | None = None   # None: the confinement's default
    grading_gpu_bytes: int | None = None     # the most GPU memory one grading uses at once
    protect: tuple[Path, ...] = ()           # more folders a submission must not read
    leaderboard: tuple[LeaderboardColumn, ...] = ()   # empty: the report carries no leaderboard
    visibility: str = "visible"              # [service]: what a check shows before the deadline

    def call_timeout_on(self, device: str) -> float:
        return dict(self.call_timeout_s)[device]

    def protected_paths(self) -> list[Path]:
        """Closed to the worker's uid: the solution, the hidden suites, the repository's
        history (which holds both), the corpus (near-solutions a submission could borrow
        from) and whatever the assignment adds."""
        corpus = [self.corpus] if self.corpus else []
        return [self.reference.parent, self.hidden_tests, REPO / ".git", *corpus, *self.protect]
    areas: dict[str, Area] = field(default_factory=dict)

    @classmethod
    def find(cls, folder: str | Path | None = None) -> "Assignment":
        """`folder`'s assignment, or when None the only one under assignment/."""
        if folder is not None:
            return cls.load(folder)
        found = sorted(p.parent for p in ASSIGNMENTS.glob("*/assignment.toml"))
        if len(found) != 1:
            listed = ", ".join(str(p.relative_to(REPO)) for p in found) or "none"
            raise AssignmentError(f"give --assignment: {len(found)} assignments under {ASSIGNMENTS} ({listed})")
        return cls.load(found[0])

    @classmethod
    def load(cls, folder: str | Path) -> "Assignment":
        """Paths in the file are relative to its own folder, so an assignment can live anywhere."""
        folder = Path(folder)
        path = folder / "assignment.toml" if folder.is_dir() else folder
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise AssignmentError(f"no assignment file at {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise AssignmentError(f"{path}: {exc}") from None
        _known(data, TOP_KEYS, "", path)
        meta = _known(data.get("assignment", {}), ASSIGNMENT_KEYS, "[assignment] ", path)
        rubric = _known(data.get("rubric", {}), None, "[rubric] ", path)
        here = path.parent

        def at(key: str) -> Path | None:
            return (here / meta[key]).resolve() if key in meta else None

        try:
            areas = {name: _area(name, _known(spec, AREA_KEYS, f"[rubric.{name}] ", path), path)
                     for name, spec in rubric.items()}
            assignment = cls(
                id=meta["id"], title=meta.get("title", meta["id"]), folder=path.parent,
                submission=meta["submission"], functions=tuple(meta["functions"]),
                reference=(here / meta["reference"]).resolve(), hidden_tests=(here / meta["hidden_tests"]).resolve(),
                call_timeout_s=_call_timeout(meta.get("call_timeout_s", 60), path),
                time_budget_s=float(meta.get("time_budget_s", 900)),
                template=at("template"), public_tests=at("public_tests"), corpus=at("corpus"),
                worker_memory_bytes=int(meta["worker_memory_mb"]) << 20 if "worker_memory_mb" in meta else None,
                grading_gpu_bytes=int(float(meta["gpu_memory_gib"]) * 2**30) if "gpu_memory_gib" in meta else None,
                protect=tuple((here / p).resolve() for p in meta.get("protect", ())),
                leaderboard=_leaderboard(data.get("leaderboard", {}), path),
                visibility=_visibility(data.get("service", {}), path),
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

    def requirements(self, name: str) -> tuple[str, ...]:
        """Every area `name` requires, directly or through another, in rubric order."""
        return tuple(a for a in self.areas if a != name and name in self.with_dependents([a]))

    @property
    def timed_area(self) -> str | None:
        """The area scored on a measure (its curve), which the class page plots; None if none is."""
        return next((name for name, a in self.areas.items() if a.curve), None)

    @property
    def total_points(self) -> float:
        return sum(a.points for a in self.areas.values())


def _known(table, keys: set[str] | None, where: str, path: Path) -> dict:
    """`table`, once it is a table whose keys are all in `keys` (None: any key)."""
    if not isinstance(table, dict):
        raise AssignmentError(f"{path}: {where.strip() or 'the file'} must be a table")
    unknown = sorted(set(table) - keys) if keys is not None else []
    if unknown:
        raise AssignmentError(f"{path}: unknown key {where}{unknown[0]!r} (known: {', '.join(sorted(keys))})")
    return table


def _seconds(value) -> bool:
    """A positive number of seconds (TOML's true is no number)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _budget(name: str, spec: dict, path: Path) -> tuple[tuple[str, float], ...]:
    budget = spec.get("budget_s", {})
    if not (isinstance(budget, dict) and set(budget) <= set(DEVICES) and all(map(_seconds, budget.values()))):
        raise AssignmentError(f"{path}: [rubric.{name}] budget_s must be a table of positive seconds by device "
                              f"({', '.join(DEVICES)}), such as {{ cpu = 4, cuda = 1.5 }}; it is {budget!r}")
    return tuple((device, float(v)) for device, v in budget.items())


def _call_timeout(value, path: Path) -> tuple[tuple[str, float], ...]:
    """`call_timeout_s`: seconds for every device, or a table giving each device its own."""
    table = value if isinstance(value, dict) else dict.fromkeys(DEVICES, value)
    if not (set(table) == set(DEVICES) and all(map(_seconds, table.values()))):
        raise AssignmentError(f"{path}: call_timeout_s must be positive seconds, or a table of them for "
                              f"every device ({', '.join(DEVICES)}), such as {{ cpu = 30, cuda = 60 }}; "
                              f"it is {value!r}")
    return tuple((device, float(table[device])) for device in DEVICES)


def _area(name: str, spec: dict, path: Path) -> Area:
    return Area(name=name, points=float(spec["points"]), summary=spec.get("summary", ""),
                requires=tuple(spec.get("requires", ())), device=spec.get("device"),
                curve=tuple((float(x), float(y)) for x, y in spec.get("curve", ())),
                budget_s=_budget(name, spec, path))


def _leaderboard(spec: dict, path: Path) -> tuple[LeaderboardColumn, ...]:
    """[leaderboard] enabled = true/false, columns = [{name, test, figure, order}]: off unless enabled."""
    _known(spec, LEADERBOARD_KEYS, "[leaderboard] ", path)
    for i, col in enumerate(spec.get("columns", ())):
        _known(col, COLUMN_KEYS, f"[leaderboard] column {i + 1}: ", path)
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


def _visibility(spec: dict, path: Path) -> str:
    """[service] visibility = "visible" | "areas" | "hidden" (default "visible")."""
    _known(spec, SERVICE_KEYS, "[service] ", path)
    value = spec.get("visibility", "visible")
    if value not in VISIBILITIES:
        raise AssignmentError(f"{path}: [service] visibility must be one of {', '.join(map(repr, VISIBILITIES))}, "
                              f"not {value!r}")
    return value
