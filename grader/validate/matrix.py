"""The kill matrix: grade the reference and the corpus of wrong and adversarial
submissions and check that each got what it must.

    python -m grader validate --assignment DIR --out build/validate.json
                              [--device auto|cpu|cuda] [--only NAME ...] [--fast] [--jobs N]

The corpus (grader/validate/corpus.py) is the assignment's own, in the folder its assignment.toml
names. An area counts as passed only when it earned all its points, so an area gated by
another one counts as failed. Besides its score, an adversarial submission must not keep any
test running well past the call timeout.

Each grading runs `python -m grader grade` in a subprocess, because a submission
is judged by what the real command does, exit status and leftovers included. This
process is a child subreaper while it runs, so anything a grading leaves behind
is re-parented here, where /proc shows it. With --jobs N, N such validations of
one entry each run at once (spread over the GPUs like grade-all's gradings), so
that what one entry leaves behind is still found by its own subreaper.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..assignment import REPO, Assignment, grader_env
from .corpus import EPS, CorpusError, Entry, expectations, load_corpus, select, skip_reason
from ..grading import report_reader
from ..files import atomic_write
from ..grading.report import SCHEMA
from ..sandbox.processes import alive, become_subreaper, descendants, describe, processes_of, reap_children
from ..warm.hosts import HOST_ENV, HostProcess

# How far a cheat may score above its honest twin (`no_more_than`) before validate calls the cheat
# a success: two gradings of one file differ by up to half a point on the H200 (88.65-89.10 over
# six), and a window closed on what the grader sees leaves out work after the last output lands.
TWIN_SLACK = 1.0
SETTLE_S = 5.0           # how long a killed process may take to leave /proc


@dataclass
class MatrixRow:
    entry: Entry
    expected: dict[str, str | None] = field(default_factory=dict)   # "pass", "fail" or None
    passed: dict[str, bool] = field(default_factory=dict)
    cells: dict[str, str] = field(default_factory=dict)
    score: float | None = None
    max_score: float | None = None
    allowed: float | None = None
    privilege_drop: bool | None = None
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    report_path: str | None = None
    skipped: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)   # area -> wall seconds, waits for neighbours aside
    waited: dict[str, float] = field(default_factory=dict)    # area -> those waits

    @classmethod
    def from_json(cls, entry: Entry, d: dict) -> "MatrixRow":
        return cls(entry, expected=d["expected"], passed=d["passed"], cells=d["cells"], score=d["score"],
                   max_score=d["max_score"], allowed=d["deserves"], privilege_drop=d["privilege_drop"],
                   wall_s=d["wall_s"], problems=d["problems"], notes=d["notes"], report_path=d["report"],
                   skipped=d["skipped"], seconds=d.get("seconds", {}), waited=d.get("waited", {}))

    def to_json(self) -> dict:
        e = self.entry
        return {"kind": e.kind, "name": e.name, "file": _rel(e.file), "note": e.note,
                "expected": self.expected, "passed": self.passed, "cells": self.cells,
                "score": self.score, "max_score": self.max_score, "deserves": self.allowed,
                "privilege_drop": self.privilege_drop, "wall_s": round(self.wall_s, 1),
                "problems": self.problems, "notes": self.notes, "report": self.report_path,
                "skipped": self.skipped, "seconds": self.seconds, "waited": self.waited}


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


# -- the matrix -------------------------------------------------------------------
def columns(assignment: Assignment, device: str) -> list[str]:
    """The rubric areas graded on this device, in rubric order."""
    return [name for name, area in assignment.areas.items() if area.applies_on(device)]


def area_passed(report: dict, cols: list[str]) -> dict[str, bool]:
    """True where the area earned all its points (a gated area did not)."""
    areas = report_reader.areas(report)
    out = {}
    for name in cols:
        a = areas.get(name) or {}
        try:
            out[name] = bool(a.get("graded")) and float(a["score"]) >= float(a["points"]) - EPS
        except (KeyError, TypeError, ValueError):
            out[name] = False
    return out


def allowed_score(entry: Entry, report: dict | None) -> float | None:
    """The most an adversarial entry may score under the isolation the report says was in force."""
    drop = report_reader.sandbox(report).get("privilege_drop") if report is not None else None
    return entry.deserves if drop is True else entry.deserves_without_drop


def paid_off(entry: Entry, report: dict | None, score) -> str | None:
    """Where a cheat scored more than it deserves but within what weaker isolation allows it
    (workers without a uid of their own), the warning to print: the grades of such a machine
    do not hold against it, and that must not pass unseen."""
    if entry.kind != "adversarial" or entry.deserves is None or report is None:
        return None
    if not isinstance(score, (int, float)) or score <= entry.deserves + EPS:
        return None
    if allowed_score(entry, report) == entry.deserves:
        return None                       # over what it is allowed: a problem, not a warning
    why = report_reader.sandbox(report).get("why_not") or "the report does not say why"
    return (f"WARNING: scored {score:g}, deserves {entry.deserves:g}; allowed here only because the "
            f"workers had no uid of their own ({why})")


def cell(expected: str | None, passed: bool) -> str:
    """ok (passed, as it must), killed (failed, as it must), MISS (must fail, passed),
    EXTRA (must pass, failed), or the bare outcome where nothing is expected."""
    if expected is None:
        return "pass" if passed else "fail"
    if expected == "fail":
        return "MISS" if passed else "killed"
    return "ok" if passed else "EXTRA"


def overlong_tests(report: dict, call_timeout_s: float) -> list[float]:
    """Durations of tests that ran well past one call's timeout. A test ends at its first
    timeout (the worker is killed and the test fails), so only a call that kept the grader
    waiting beyond its timeout can take this long."""
    limit = 2 * call_timeout_s + 30
    durations = [report_reader.test_detail(t).get("duration_s", 0) for t in report.get("tests", [])]
    return sorted(d for d in durations if isinstance(d, (int, float)) and d > limit)


BUDGET_TIMES = 3       # an entry's area may cost this many times the reference's budget ...


# A test's figures: waiting on its neighbours' work (its turn, a quiet window), and the timings
# it made again because foreign work ran in them (grader/gpu/quiet.py).
WAITS = ("gpu_turn_wait_s", "gpu_quiet_wait_s", "gpu_quiet_redo_s")


def area_seconds(report: dict, *, without_timeouts: bool = False, without_waits: bool = False) -> dict[str, float]:
    """Area -> wall seconds, as the report counts them (a session fixture's time in the area it
    was charged to); `without_timeouts` leaves out tests that ended at a call's timeout, whose
    cost the timeout bounds (and overlong_tests checks); `without_waits` leaves out what its
    tests waited for other work on a shared GPU (their turn, a quiet window): the grading's own
    cost, which its budget bounds, not its neighbours'."""
    seconds = {name: float(a.get("seconds") or 0.0) for name, a in report_reader.areas(report).items()
               if isinstance(a, dict) and isinstance(a.get("seconds"), (int, float))}
    for t in report.get("tests", []):
        detail = report_reader.test_detail(t)
        area = (t.get("tags") or [None])[0]
        if area not in seconds:
            continue
        d = detail.get("duration_s", 0)
        if without_timeouts and detail.get("outcome") == "timeout" and isinstance(d, (int, float)):
            seconds[area] = max(0.0, seconds[area] - d)
        if without_waits:
            figures = detail.get("figures") or {}
            waited = sum(float(w) for k in WAITS if isinstance(w := figures.get(k), (int, float)))
            seconds[area] = max(0.0, seconds[area] - waited)
    return seconds


def over_budget(entry: Entry, report: dict, budgets: dict[str, float], call_timeout_s: float,
                unmeasured: set[str] = frozenset()) -> list[str]:
    """The reference within each area's budget; any other entry within BUDGET_TIMES times it
    and one call's timeout (a wrong answer must not keep the grader much longer: a timing loop
    ends once its verdict is certain), tests that ended at a timeout aside. An area `unmeasured`
    (no quiet window came: the grading is to be regraded) is judged neither way, its seconds
    included: its measurements were made again beside foreign work, up to gpu_quiet's bounds."""
    budgets = {a: b for a, b in budgets.items() if a not in unmeasured}
    if entry.kind == "reference":
        spent = area_seconds(report, without_waits=True)
        return [f"the reference spent {spent[a]:.1f} s in {a} (waits for its neighbours aside), over its "
                f"budget of {b:g} s" for a, b in budgets.items() if spent.get(a, 0.0) > b]
    spent = area_seconds(report, without_timeouts=True, without_waits=True)
    return [f"spent {spent[a]:.1f} s in {a}, over {BUDGET_TIMES} times its budget of {b:g} s and a "
            f"{call_timeout_s:g} s call timeout" for a, b in budgets.items()
            if spent.get(a, 0.0) > BUDGET_TIMES * b + call_timeout_s]


def budgets_on(assignment: Assignment, device: str) -> dict[str, float]:
    """Area -> its budget in seconds on `device`, for the areas that state one."""
    return {name: b for name, a in assignment.areas.items() if (b := a.budget_on(device)) is not None}


def budget_table(rows: list[MatrixRow], budgets: dict[str, float]) -> str:
    """The reference's seconds per area beside each budget, and the most any entry spent there."""
    ref = next((r for r in rows if r.entry.kind == "reference" and r.seconds), None)
    if ref is None or not budgets:
        return ""
    lines = ["seconds per area, waits for neighbours on a shared GPU aside (the reference's waits beside):",
             "the reference, its budget, and the most any entry spent"]
    for a, b in budgets.items():
        worst = max(((r.seconds.get(a, 0.0), r.entry.label) for r in rows if r.seconds), default=(0.0, "-"))
        waited = ref.waited.get(a, 0.0)
        lines.append(f"  {a:<16} {ref.seconds.get(a, 0.0):7.2f} s  budget {b:6.2f} s  most {worst[0]:7.2f} s "
                     f"({worst[1]})" + (f"  waited {waited:.2f} s" if waited else ""))
    lines.append(f"  {'in all':<16} {sum(ref.seconds.get(a, 0.0) for a in budgets):7.2f} s  "
                 f"budget {sum(budgets.values()):6.2f} s")
    return "\n".join(lines)


def judge(entry: Entry, report: dict | None, cols: list[str], *, grade_error: str | None = None,
          schema_problems: list[str] = (), leftovers: list[str] = (), device: str | None = None,
          call_timeout_s: float | None = None, budgets: dict[str, float] | None = None) -> MatrixRow:
    """Everything wrong with one grading, from its report and what was seen around it."""
    row = MatrixRow(entry)
    if grade_error:
        row.problems.append(grade_error)
    row.problems += [f"report does not match the schema: {p}" for p in schema_problems]
    row.problems += [f"left behind after its grading: {p}" for p in leftovers]
    if entry.kind == "wrong":
        elsewhere = sorted(set(entry.fails) - set(cols))
        if elsewhere:
            row.notes.append(f"not graded here: {', '.join(elsewhere)}")
    if report is None:
        row.expected = expectations(entry, cols, entry.deserves, device)
        if not grade_error:
            row.problems.append("no report")
        return row
    areas = report_reader.areas(report)
    row.privilege_drop = report_reader.sandbox(report).get("privilege_drop")
    row.score, row.max_score = report.get("score"), report.get("max_score")
    if device and report_reader.device(report) != device:
        row.problems.append(f"graded on {report_reader.device(report)}, not {device}")
    missing = [a for a in cols if a not in areas]
    if missing:
        row.problems.append(f"report lacks areas {missing}")
    row.allowed = allowed_score(entry, report) if entry.kind == "adversarial" else None
    row.expected = expectations(entry, cols, row.allowed, device)
    row.passed = area_passed(report, cols)
    row.cells = {a: cell(row.expected[a], row.passed[a]) for a in cols}
    for a in cols:
        if str((areas.get(a) or {}).get("note", "")).startswith("not measured"):
            row.cells[a] = "n/m"       # the GPU was busy: to be regraded, judged neither way
            row.notes.append(f"{a} not measured: {(areas.get(a) or {}).get('note', '')[:160]}")
    if entry.kind == "reference":
        if not isinstance(row.score, (int, float)) or row.score < (row.max_score or 0) - EPS:
            row.problems.append(f"the reference scored {row.score} of {row.max_score}")
    elif entry.kind == "wrong":
        row.problems += [f"passes {a}, which it must fail" for a in cols if row.cells[a] == "MISS"]
        row.problems += [f"fails {a}, which it must pass" for a in cols if row.cells[a] == "EXTRA"]
    elif entry.kind == "right":
        for a in cols:
            if row.cells[a] == "EXTRA":
                row.problems.append(f"a correct solution lost points in {a}: {_lost(areas.get(a) or {})}")
            elif row.expected[a] is None:
                row.cells[a] = _points_of(areas.get(a) or {})    # how much speed cost it
    elif row.allowed is not None:
        if not isinstance(row.score, (int, float)) or row.score > row.allowed + EPS:
            row.problems.append(f"scored {row.score}, deserves at most {row.allowed:g}")
    warning = paid_off(entry, report, row.score)
    if warning:
        row.notes.append(warning)
    least = row.max_score if entry.earns_at_least == "all" else entry.earns_at_least
    if entry.kind == "adversarial" and least is not None and not (
            isinstance(row.score, (int, float)) and row.score >= least - EPS):
        row.problems.append(f"scored {row.score}, must earn at least {least:g}")
    if entry.kind == "adversarial" and call_timeout_s:
        slow = overlong_tests(report, call_timeout_s)
        if slow:
            row.problems.append(f"{len(slow)} test(s) ran past the {call_timeout_s:g} s call timeout "
                                f"(longest {slow[-1]:.0f} s): a timeout did not hold")
    row.seconds = {a: round(x, 2) for a, x in area_seconds(report, without_waits=True).items()}
    row.waited = {a: round(x - row.seconds.get(a, 0.0), 2) for a, x in area_seconds(report).items()}
    if budgets:
        row.problems += over_budget(entry, report, budgets, call_timeout_s or 0.0,
                                    unmeasured={a for a, c in row.cells.items() if c == "n/m"})
    if report_reader.problem(report):
        row.notes.append(str(report_reader.problem(report))[:200])
    return row


def _twins(rows: list[MatrixRow], key: str, graded) -> list[tuple[MatrixRow, MatrixRow]]:
    """(row, its twin) for each graded row whose entry names a twin in `key`; a row whose twin
    was not graded in this run is noted so and left out."""
    by_name = {(r.entry.kind, r.entry.name): r for r in rows}
    pairs = []
    for row in rows:
        name = getattr(row.entry, key)
        if not name or row.skipped or not graded(row):
            continue
        twin = by_name.get((row.entry.kind, name))
        if twin is None or twin.skipped or not graded(twin):
            row.notes.append(f"not compared with {name}: it was not graded in this run")
        else:
            pairs.append((row, twin))
    return pairs


def compare_twins(rows: list[MatrixRow]) -> None:
    """A cheat must not outscore its honest twin (`no_more_than`) by more than TWIN_SLACK: the
    two are the same file but for the trick, so anything more is what the trick bought."""
    for row, twin in _twins(rows, "no_more_than", lambda r: r.score is not None):
        if row.score > twin.score + TWIN_SLACK:
            row.problems.append(f"scored {row.score:g}, more than its honest twin {row.entry.no_more_than} "
                                f"({twin.score:g}) by over {TWIN_SLACK:g}: the trick paid")
        else:
            row.notes.append(f"{row.score:g} against its honest twin's {twin.score:g}")


def compare_race_twins(rows: list[MatrixRow], curved: set[str]) -> None:
    """A race twin (`same_as`) is its twin's bug with the kernel's programs run in another order:
    where two programs write one place, the other one's write lands last. On a GPU that order
    changes from run to run, so a test whose verdict follows it scores one file and seed
    differently each time. The two must lose the same tests, those of curved areas aside (their
    timings differ between any two gradings)."""
    for row, twin in _twins(rows, "same_as", lambda r: r.report_path is not None):
        mine, theirs = (_lost_tests(r.report_path, curved) for r in (row, twin))
        if mine is None or theirs is None:
            row.notes.append(f"not compared with {row.entry.same_as}: a report is missing")
        elif mine != theirs:
            row.problems.append(
                f"loses {'; '.join(sorted(mine - theirs)) or 'no test'} that its race twin {row.entry.same_as} "
                f"keeps, and keeps {'; '.join(sorted(theirs - mine)) or 'no test'} that it loses: which program's "
                "write lands last decided a verdict, and on a GPU that changes from run to run")
        else:
            row.notes.append(f"loses the same {len(mine)} test(s) as its race twin {row.entry.same_as}")


def _lost_tests(report_path: str, curved: set[str]) -> set[str] | None:
    """"number name" of each test a report did not pass, outside the `curved` areas."""
    report = report_reader.read_or_none(REPO / report_path)
    if report is None:
        return None
    return {f"{t.get('number')} {t.get('name')}" for t in report.get("tests", [])
            if t.get("status") != "passed" and not set(t.get("tags") or ()) & curved}


def _points_of(area: dict) -> str:
    try:
        return f"{float(area['score']):.3g}/{float(area['points']):g}"
    except (KeyError, TypeError, ValueError):
        return "?"


def _lost(area: dict) -> str:
    """What the report says about an area a correct solution did not get in full."""
    why = f"{_points_of(area)} points"
    if area.get("gated_by"):
        why += f", gated by {', '.join(area['gated_by'])}"
    if area.get("passed") is not None and area.get("total") is not None:
        why += f", {area['passed']} of {area['total']} tests passed"
    return why


def render(rows: list[MatrixRow], cols: list[str]) -> str:
    head = ["submission", *cols, "score", "wall"]
    body = []
    for r in rows:
        score = "-" if r.score is None else f"{r.score:g}/{r.max_score:g}"
        if r.entry.kind == "adversarial" and r.score is not None:
            score += f" (<= {r.allowed:g})" if r.allowed is not None else " (any)"
        cells = [r.cells.get(a, "-") for a in cols] if not r.skipped else ["skip"] * len(cols)
        body.append([r.entry.label + (" !" if r.problems else ""), *cells, score, f"{r.wall_s:.1f} s"])
    width = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(x[i].ljust(width[i]) for i in range(len(head))).rstrip() for x in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in width))
    for r in rows:
        for p in r.problems:
            lines.append(f"! {r.entry.label}: {p}")
        lines += [f"! {r.entry.label}: {n}" for n in r.notes if n.startswith("WARNING")]
    return "\n".join(lines)


# -- checks around a grading -------------------------------------------------------
def _jsonschema():
    """jsonschema, without the IRI format checks it loads where it can: rfc3987_syntax builds
    its grammars at import, about 1 s of every `validate --only` process (an entry of a --jobs
    run), and the reports are checked without formats. Raises ImportError without jsonschema."""
    sys.modules.setdefault("rfc3987_syntax", None)
    import jsonschema
    return jsonschema


def schema_problems(report: dict) -> list[str]:
    try:
        jsonschema = _jsonschema()
    except ImportError:
        return ["jsonschema is not installed, so reports cannot be checked"]
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:200]}"
            for e in validator.iter_errors(report)][:10]


LOAD: set[int] = set()      # the --under-load copy loop: ours, not a grading's leftover


def stray_processes(uid: int | None, root: int | None = None, keep: set[int] = frozenset()) -> list[int]:
    """Live processes of the workers' uid, and live descendants of root (default: us), but
    for `keep` (a warm host and its reference worker) unless they run as the workers' uid."""
    root = os.getpid() if root is None else root
    found = set(descendants(root)) - set(keep) - LOAD
    for pid in LOAD:
        found -= set(descendants(pid))
    if uid is not None:
        found |= processes_of(uid)
    found.discard(os.getpid())
    return sorted(p for p in found if alive(p))


def host_processes(host: HostProcess | None) -> set[int]:
    """The warm host (grader/warm/hosts.py) that graded, and what it keeps between gradings."""
    if host is None or host.proc is None:
        return set()
    return {host.proc.pid, *descendants(host.proc.pid)}


def leftovers_after(uid: int | None, keep: set[int] = frozenset()) -> list[str]:
    """What a grading left running once its command returned, then killed so the next starts clean."""
    end = time.monotonic() + SETTLE_S
    while True:
        reap_children()
        strays = stray_processes(uid, keep=keep)
        if not strays or time.monotonic() > end:
            break
        time.sleep(0.1)
    seen = [describe(p) for p in strays]
    for pid in strays:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    time.sleep(0.2)
    reap_children()
    return seen


def files_left_by(uid: int | None) -> list[str]:
    """Files the workers' uid left in the world-writable folders, then removed. Where the
    workers had no uid of their own their files cannot be told from anyone else's."""
    from ..sandbox.isolate import covered
    if uid is None:
        return []
    found = [path for folder in covered() for path in _owned_by(uid, folder)]
    described = [f"{p} ({_inside(p)}; removed)" for p in found[:10]]
    for path in found:
        with contextlib.suppress(OSError):
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
    return described + ([f"and {len(found) - 10} more"] if len(found) > 10 else [])


def _owned_by(uid: int, folder: str) -> list[str]:
    """What `uid` owns under `folder`, not looked into. Its entries can only be where it may
    write, so only there is each entry stat'ed; elsewhere only the folders it may enter are
    followed. A walk stat'ing every entry took 0.6-2 s of each entry's validation on a machine
    whose /tmp held a checkout with its virtual environment."""
    found, stack = [], [folder]
    while stack:
        here = stack.pop()
        try:
            writable = _may(os.lstat(here), uid, 0o2)
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            with contextlib.suppress(OSError):
                is_dir = entry.is_dir(follow_symlinks=False)
                if not (writable or is_dir):
                    continue
                st = entry.stat(follow_symlinks=False)
                if writable and st.st_uid == uid:
                    found.append(entry.path)
                elif is_dir and _may(st, uid, 0o1):
                    stack.append(entry.path)
    return found


def _may(st: os.stat_result, uid: int, bit: int) -> bool:
    """Whether `uid`, whose one group is its own id (confine.py), has permission `bit` (0o2
    write, 0o1 search) by the mode of `st`."""
    if st.st_uid == uid:
        return bool(st.st_mode & (bit << 6))
    if st.st_gid == uid:
        return bool(st.st_mode & (bit << 3))
    return bool(st.st_mode & bit)


def _inside(path: str) -> str:
    """What a leftover holds, newest first, with its owner and age: where the cleanup stopped."""
    entries = []
    for parent, dirs, files in os.walk(path):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(parent, name))
                entries.append((st.st_mtime, os.path.relpath(os.path.join(parent, name), path), st.st_uid))
    entries.sort(reverse=True)
    now = time.time()
    shown = ", ".join(f"{rel} uid {uid} {now - t:.1f} s old" for t, rel, uid in entries[:5])
    return f"{len(entries)} entries" + (f", newest: {shown}" if shown else "")


# -- running -------------------------------------------------------------------------
def grade_entry(entry: Entry, assignment: Assignment, device: str, report_path: Path,
                log_path: Path, drop_privileges: bool = True, timeout: float | None = None,
                host_env: dict[str, str] | None = None) -> tuple[dict | None, str | None, float]:
    """(report or None, why there is none or the command failed, wall seconds). `host_env`
    names a warm grading host to run the suites in (grader/warm/hosts.py). The entry is handed in
    under the assignment's file name, as a student's file is, so that it is graded as one
    (a warm host's spare worker, started for a file of that name, takes it)."""
    handed_in = Path(tempfile.mkdtemp(prefix="grader-handin-"))      # 0700: no worker reads it
    try:
        file = handed_in / assignment.submission
        shutil.copy(entry.file, file)
        return _grade_file(file, assignment, device, report_path, log_path, drop_privileges, timeout, host_env)
    finally:
        shutil.rmtree(handed_in, ignore_errors=True)


def _grade_file(file, assignment, device, report_path, log_path, drop_privileges, timeout, host_env):
    timeout = timeout or 2 * assignment.time_budget_s + 900
    report_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "grader", "grade", "--assignment", str(assignment.folder),
           "--submission", str(file), "--report", str(report_path), "--device", device, "--quiet"]
    if not drop_privileges:
        cmd.append("--no-privilege-drop")
    env = grader_env()
    env.update(host_env or {})
    t0 = time.monotonic()
    error = None
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in [proc.pid, *descendants(proc.pid)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()
            code = None
            error = f"the grader did not finish within {timeout:.0f} s"
    wall = time.monotonic() - t0
    if code not in (0, None):
        error = f"the grader exited with status {code} (log: {_rel(log_path)})"
    try:
        report = report_reader.read(report_path)
    except (OSError, report_reader.ReportError) as exc:
        return None, error or f"no readable report ({exc})", wall
    if report is None:
        return None, error or "no readable report (FileNotFoundError)", wall
    return report, error, wall


def summary_line(row: MatrixRow) -> str:
    if row.skipped:
        return f"skipped ({row.skipped})"
    score = "no report" if row.score is None else f"{row.score:g}/{row.max_score:g}"
    loud = row.problems + [n for n in row.notes if n.startswith("WARNING")]
    return f"{score} in {row.wall_s:.1f} s" + (f"  PROBLEM: {'; '.join(loud)}" if loud else "")


def run(assignment: Assignment, entries: list[Entry], device: str, out: Path,
        drop_privileges: bool = True, echo=print, reports_dir: Path | None = None,
        warm: bool = True) -> tuple[list[MatrixRow], float]:
    """Grade the entries one after another: in one warm host (grader/warm/hosts.py) unless `warm` is
    false or this process already runs in a slot that has one (a --jobs run's entry)."""
    host = HostProcess(assignment.folder, device, {}) if warm and HOST_ENV not in os.environ else None
    try:
        return _run(assignment, entries, device, out, drop_privileges, echo, reports_dir, host)
    finally:
        if host is not None:
            host.close()


def _run(assignment, entries, device, out, drop_privileges, echo, reports_dir, host) -> tuple[list[MatrixRow], float]:
    become_subreaper()
    cols = columns(assignment, device)
    reports_dir = reports_dir or reports_dir_of(out)
    reports_dir.mkdir(parents=True, exist_ok=True)
    rows: list[MatrixRow] = []
    t0 = time.monotonic()
    for i, entry in enumerate(entries, 1):
        prefix = f"[{i}/{len(entries)}] {entry.label}"
        skip = skip_reason(entry, cols, device)
        if skip:
            row = MatrixRow(entry, expected=expectations(entry, cols, device=device), skipped=skip)
            rows.append(row)
            echo(f"{prefix}: {summary_line(row)}")
            continue
        report_path, log_path = reports_dir / f"{entry.stem}.json", reports_dir / f"{entry.stem}.log"
        report, error, wall = grade_entry(entry, assignment, device, report_path, log_path, drop_privileges,
                                          host_env=host.env() if host else None)
        uid = report_reader.sandbox(report).get("uid") if report is not None else None
        strays = leftovers_after(uid if isinstance(uid, int) else None, keep=host_processes(host))
        strays += files_left_by(uid if isinstance(uid, int) else None)
        row = judge(entry, report, cols, grade_error=error, device=device, leftovers=strays,
                    schema_problems=schema_problems(report) if report is not None else [],
                    call_timeout_s=assignment.call_timeout_on(device), budgets=budgets_on(assignment, device))
        row.wall_s, row.report_path = wall, _rel(report_path)
        rows.append(row)
        echo(f"{prefix}: {summary_line(row)}")
    return rows, time.monotonic() - t0


def reports_dir_of(out: Path) -> Path:
    """Where the gradings' reports go beside the matrix `out`."""
    return out.parent / f"{out.stem}-reports"


def longest_first(entries: list[Entry], reports_dir: Path) -> list[Entry]:
    """Entries ordered by how long they took last time in `reports_dir`, slowest (or new) first,
    so that a hang met last is not left running alone at the end of a parallel run."""
    def last_wall(entry: Entry) -> float:
        try:
            row = json.loads((reports_dir / f"{entry.stem}.row.json").read_text())["rows"][0]
            return float(row["wall_s"])
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return float("inf")
    return sorted(entries, key=last_wall, reverse=True)


def run_parallel(assignment: Assignment, entries: list[Entry], device: str, out: Path, jobs: int,
                 drop_privileges: bool = True, echo=print, warm: bool = True) -> tuple[list[MatrixRow], float]:
    """`run`, with each entry validated by its own `validate --only` process, `jobs` at once,
    in slots that each keep a warm host unless `warm` is false."""
    from concurrent.futures import ThreadPoolExecutor

    from ..gpu.machines import SlotPool
    reports_dir = reports_dir_of(out)
    reports_dir.mkdir(parents=True, exist_ok=True)
    hosts = (lambda env: HostProcess(assignment.folder, device, env)) if warm else None
    slot_pool = SlotPool(device, jobs, assignment.grading_gpu_bytes, hosts=hosts)
    if slot_pool.note:
        echo(slot_pool.note)
    done = []
    t0 = time.monotonic()
    original, entries = entries, longest_first(entries, reports_dir)

    def one(entry: Entry, env: dict[str, str]) -> MatrixRow:
        row_path, log_path = reports_dir / f"{entry.stem}.row.json", reports_dir / f"{entry.stem}.validate.log"
        row_path.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "grader", "validate", "--assignment", str(assignment.folder),
               "--device", device, "--only", entry.label, "--out", str(row_path),
               "--reports-dir", str(reports_dir)] + ([] if drop_privileges else ["--no-privilege-drop"])
        cmd += [] if warm else ["--cold"]
        with open(log_path, "wb") as log:
            subprocess.run(cmd, cwd=REPO, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                           stdout=log, stderr=subprocess.STDOUT)
        try:
            row = MatrixRow.from_json(entry, json.loads(row_path.read_text())["rows"][0])
        except (OSError, ValueError, KeyError, IndexError) as exc:
            row = MatrixRow(entry, problems=[f"its validation left no matrix ({exc.__class__.__name__}; "
                                       f"log: {_rel(log_path)})"])
        done.append(row)
        echo(f"[{len(done)}/{len(entries)}] {entry.label}: {summary_line(row)}")
        return row

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            rows = list(pool.map(lambda entry: slot_pool.run(one, entry), entries))
    finally:
        slot_pool.close()
    order = {entry.label: i for i, entry in enumerate(original)}
    return sorted(rows, key=lambda row: order[row.entry.label]), time.monotonic() - t0


def write_json(path: Path, assignment: Assignment, device: str, rows: list[MatrixRow], cols: list[str],
               total_s: float) -> None:
    data = {"assignment": assignment.id, "device": device, "columns": cols,
            "ok": not any(r.problems for r in rows), "total_wall_s": round(total_s, 1),
            "rows": [r.to_json() for r in rows]}
    atomic_write(path, json.dumps(data, indent=1) + "\n")


def main(args) -> int:
    """The `validate` subcommand; args from cli.py. 0: all as expected, 1: not, 2: usage."""
    mutants = Path(tempfile.mkdtemp(prefix="grader-mutants-"))    # 0700: no worker reads them
    try:
        return _validate(args, mutants)
    finally:
        shutil.rmtree(mutants, ignore_errors=True)


def _validate(args, mutants: Path) -> int:
    from ..gpu.machines import DeviceUnavailable, default_jobs, resolve_device
    try:
        _jsonschema()
    except ImportError:
        # Before any grading: a matrix whose reports went unchecked would pass for one that checked them.
        print("grader validate: jsonschema is not installed (requirements/runtime.txt), so the reports "
              "cannot be checked against grader/report_reader.schema.json", file=sys.stderr)
        return 2
    try:
        assignment = Assignment.find(args.assignment)
        entries = select(load_corpus(assignment, mutants=mutants), args.only, args.fast)
    except (CorpusError, ValueError) as exc:
        print(f"grader validate: {exc}", file=sys.stderr)
        return 2
    try:
        device = resolve_device(args.device)
    except DeviceUnavailable as exc:
        print(f"grader validate: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    cols = columns(assignment, device)
    # One entry of a --jobs run (it has a reports folder) is graded here, one at a time.
    jobs = 1 if args.reports_dir else default_jobs(device, assignment.grading_gpu_bytes) if args.jobs is None else args.jobs
    if jobs < 1:
        print("grader validate: --jobs must be at least 1", file=sys.stderr)
        return 2
    drop = not args.no_privilege_drop
    if not args.reports_dir:
        # What runs killed outright left (their processes, their workers' folders) is not this
        # matrix's: removed before the first grading, so it is not charged to an entry.
        from ..warm import leftovers
        for what in leftovers.sweep_hosts() + leftovers.sweep_grading_folders():
            print(f"removed what a run killed earlier left: {what}")
    load = None
    if getattr(args, "under_load", False):
        if device != "cuda":
            print("grader validate: --under-load needs a GPU", file=sys.stderr)
            return 2
        from ..gpu import load as gpu_load
        load = gpu_load.start()
        LOAD.add(load.pid)
        print(f"a copy loop keeps the GPU busy meanwhile (pid {load.pid})")
    try:
        rows, total = _matrix(args, assignment, entries, device, out, jobs, drop)
    finally:
        if load is not None:
            load.kill()
            load.wait()
    if not args.reports_dir:          # not one entry of a --jobs run: the parent compares
        compare_twins(rows)
        compare_race_twins(rows, {n for n, a in assignment.areas.items() if a.curve})
    print()
    print(render(rows, cols))
    table = budget_table(rows, budgets_on(assignment, device))
    if table:
        print()
        print(table)
    unmeasured = sum("n/m" in r.cells.values() for r in rows)
    if unmeasured:
        print(f"\n{unmeasured} grading(s) had an area not measured (the GPU was busy): to be regraded, no point lost")
    print(f"\ntotal {total:.1f} s; matrix written to {out}")
    write_json(out, assignment, device, rows, cols, total)
    return 1 if any(r.problems for r in rows) else 0


def _matrix(args, assignment, entries, device, out, jobs, drop):
    if jobs == 1:
        print(f"validating {len(entries)} submissions of {assignment.id} on {device}, one at a time")
        rows, total = run(assignment, entries, device, out, drop_privileges=drop,
                          reports_dir=Path(args.reports_dir) if args.reports_dir else None, warm=not args.cold)
    else:
        print(f"validating {len(entries)} submissions of {assignment.id} on {device}, {jobs} at once")
        rows, total = run_parallel(assignment, entries, device, out, jobs, drop_privileges=drop, warm=not args.cold)
    return rows, total
