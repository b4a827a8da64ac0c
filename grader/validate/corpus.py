"""An assignment's corpus: the submissions `validate` grades, and what each must get.

The corpus is a folder (`corpus` in assignment.toml) holding:
- wrong.toml: `[name]`, `bug`, `fails = [areas]`, and the bug itself as `[[name.edit]]` tables,
  `old` -> `new` on the reference under its own `doc`, or else a file wrong/<name>.py; a timing
  cheat names its honest twin in `no_more_than` and may not outscore it; a race's other outcome
  (the same bug, its programs run in another order) names its twin in `same_as` and must lose
  the same tests: its edits are applied after its twin's, so it writes down only the reordering;
  `device` where it is wrong on one device only;
- adversarial.toml: `[name]`, `trick`, `deserves` in points, optionally
  `deserves_without_privilege_drop`, `earns_at_least`, `fast` and `device` (a trick that exists
  on one device only), file adversarial/<name>.py;
- right.toml: `[name]`, `style`, optionally `device` and `fast`, file right/<name>.py: correct
  solutions written otherwise than the reference, which must earn every point of every area but
  those scored on a curve (a slower one may lose speed points).
"""
from __future__ import annotations

import ast
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..assignment import Assignment

EPS = 1e-6
FAST_WRONG = 3           # wrong submissions in --fast when none is marked fast


class CorpusError(ValueError):
    """The corpus files are malformed: the instructor's mistake, not a submission's."""


@dataclass(frozen=True)
class Entry:
    kind: str                         # "reference", "wrong", "adversarial" or "right"
    name: str
    file: Path
    note: str = ""                    # the bug or the trick
    fails: tuple[str, ...] = ()       # wrong: the areas it must fail
    deserves: float | None = None     # adversarial: the most it may score; None: anything
    deserves_without_drop: float | None = None
    earns_at_least: float | str | None = None   # adversarial: the least it must score ("all": full marks)
    fast: bool = False
    device: str | None = None         # graded only on this device (None: any)
    may_lose: tuple[str, ...] = ()    # right: areas scored on a curve, where speed may cost points
    no_more_than: str | None = None   # wrong: another wrong entry (its honest twin) it may not outscore
    same_as: str | None = None        # wrong: another wrong entry (its race twin) whose lost tests it must lose
    fails_on: tuple[tuple[str, tuple[str, ...]], ...] = ()   # wrong: (device, areas it fails there too)

    def fails_here(self, device: str | None) -> tuple[str, ...]:
        """The areas a wrong entry must fail when graded on `device`."""
        extra = dict(self.fails_on).get(device, ())
        return self.fails + tuple(a for a in extra if a not in self.fails)

    @property
    def stem(self) -> str:
        """The name of its files in the reports folder."""
        return f"{self.kind}-{self.name}"

    @property
    def label(self) -> str:
        return self.name if self.kind == "reference" else f"{self.kind}/{self.name}"


def _points(value, where: str) -> float | None:
    if value == "any":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise CorpusError(f"{where}: expected points >= 0 or \"any\", got {value!r}")
    return float(value)


def mutant_source(reference: str, doc: str, edits: list, where: str) -> str:
    """A wrong submission kept as edits of the reference, under its own docstring.

    Each `old` must occur exactly once in the reference as it is now, so a mutant
    whose edit no longer applies is an error instead of a stale copy of old code."""
    tree = ast.parse(reference)
    first = tree.body[0] if tree.body else None
    has_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
        and isinstance(first.value.value, str)
    text = "".join(reference.splitlines(True)[first.end_lineno:]) if has_doc else reference
    for i, edit in enumerate(edits):
        if not (isinstance(edit, dict) and isinstance(edit.get("old"), str) and isinstance(edit.get("new"), str)):
            raise CorpusError(f"{where}: edit {i + 1} needs `old` and `new` strings")
        count = text.count(edit["old"])
        if count != 1:
            raise CorpusError(f"{where}: edit {i + 1} matches the reference {count} times, not once")
        text = text.replace(edit["old"], edit["new"])
    return doc + text


def load_corpus(assignment: Assignment, corpus: Path | None = None, mutants: Path | None = None) -> list[Entry]:
    """The reference, then every wrong, adversarial and right entry, in file order, from `corpus`
    (default: the assignment's). Entries given as edits of the reference are written out as
    files under `mutants` (a private folder made here when None)."""
    corpus = corpus or assignment.corpus
    if corpus is None:
        raise CorpusError(f"{assignment.folder / 'assignment.toml'}: no `corpus` folder to validate against")
    if not corpus.is_dir():
        raise CorpusError(f"no corpus folder at {corpus}")
    entries = [Entry("reference", "reference", assignment.reference, "the instructor's solution")]
    for kind in ("wrong", "adversarial", "right"):
        path = corpus / f"{kind}.toml"
        if not path.exists():
            continue
        try:
            table = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise CorpusError(f"{path}: {exc}") from None
        for name, spec in table.items():
            where = f"{path.name} [{name}]"
            if not isinstance(spec, dict):
                raise CorpusError(f"{where}: not a table")
            if "edit" in spec:
                edits = spec["edit"]
                race_twin = spec.get("same_as") if kind == "wrong" else None
                if isinstance(race_twin, str) and isinstance(table.get(race_twin), dict) and race_twin != name:
                    edits = list(table[race_twin].get("edit", [])) + list(edits)
                mutants = mutants or Path(tempfile.mkdtemp(prefix="grader-mutants-"))
                file = mutants / f"{name}.py"
                file.write_text(mutant_source(assignment.reference.read_text(), str(spec.get("doc", "")),
                                              edits, where))
            else:
                file = corpus / spec.get("file", f"{kind}/{name}.py")
            if not file.is_file():
                raise CorpusError(f"{where}: no file {file}")
            fast = bool(spec.get("fast", False))
            device = spec.get("device")
            if device not in (None, "cpu", "cuda"):
                raise CorpusError(f"{where}: `device` must be \"cpu\" or \"cuda\", not {device!r}")
            if kind == "wrong":
                fails = spec.get("fails")
                if not isinstance(fails, list) or not fails:
                    raise CorpusError(f"{where}: `fails` must list the areas it must fail")
                unknown = sorted(set(fails) - set(assignment.areas))
                if unknown:
                    raise CorpusError(f"{where}: unknown areas {unknown}")
                twin, race_twin = spec.get("no_more_than"), spec.get("same_as")
                for key, other in (("no_more_than", twin), ("same_as", race_twin)):
                    if other is not None and (not isinstance(other, str) or other not in table or other == name):
                        raise CorpusError(f"{where}: `{key}` must name another entry of {path.name}")
                fails_on = spec.get("fails_on", {})
                if not isinstance(fails_on, dict) or not set(fails_on) <= {"cpu", "cuda"} or not all(
                        isinstance(v, list) and set(v) <= set(assignment.areas) for v in fails_on.values()):
                    raise CorpusError(f"{where}: `fails_on` must map \"cpu\" or \"cuda\" to a list of areas")
                # An area gated by a failed one fails too: wrong.toml names only what the bug breaks.
                entries.append(Entry(kind, name, file, str(spec.get("bug", "")),
                                     assignment.with_dependents(fails), fast=fast, device=device, no_more_than=twin,
                                     same_as=race_twin,
                                     fails_on=tuple((d, tuple(assignment.with_dependents(v)))
                                                    for d, v in sorted(fails_on.items()))))
            elif kind == "right":
                if not spec.get("style"):
                    raise CorpusError(f"{where}: `style` must say how it differs from the reference")
                curved = tuple(n for n, a in assignment.areas.items() if a.curve)
                entries.append(Entry(kind, name, file, str(spec["style"]), fast=fast, device=device,
                                     may_lose=curved))
            else:
                if "deserves" not in spec:
                    raise CorpusError(f"{where}: `deserves` is missing")
                deserves = _points(spec["deserves"], where)
                without = _points(spec.get("deserves_without_privilege_drop", spec["deserves"]), where)
                least = spec.get("earns_at_least")
                least = least if least in (None, "all") else _points(least, where)
                entries.append(Entry(kind, name, file, str(spec.get("trick", "")), deserves=deserves,
                                     deserves_without_drop=without, earns_at_least=least, fast=fast, device=device))
    return entries


def select(entries: list[Entry], only: list[str] | None = None, fast: bool = False) -> list[Entry]:
    """--only NAME (a name or kind/name) or --fast; unknown names are a CorpusError."""
    if only:
        names = set(only)
        known = {e.name for e in entries} | {e.label for e in entries}
        unknown = sorted(names - known)
        if unknown:
            raise CorpusError(f"no corpus entry named {', '.join(unknown)}")
        return [e for e in entries if e.name in names or e.label in names]
    if fast:
        wrong = [e for e in entries if e.kind == "wrong"]
        wrong = [e for e in wrong if e.fast] or wrong[:FAST_WRONG]
        return [e for e in entries if e.kind == "reference" or e in wrong
                or (e.kind in ("adversarial", "right") and e.fast)]
    return list(entries)


def expectations(entry: Entry, cols: list[str], allowed: float | None = None,
                 device: str | None = None) -> dict[str, str | None]:
    if entry.kind == "reference":
        return {a: "pass" for a in cols}
    if entry.kind == "right":
        return {a: None if a in entry.may_lose else "pass" for a in cols}
    if entry.kind == "wrong":
        fails = entry.fails_here(device)
        return {a: "fail" if a in fails else "pass" for a in cols}
    if allowed is not None and allowed <= EPS:
        return {a: "fail" for a in cols}
    return {a: None for a in cols}     # only the total is judged


def skip_reason(entry: Entry, cols: list[str], device: str) -> str | None:
    """Why grading this entry on this device would show nothing, or None."""
    if entry.kind == "wrong" and not set(entry.fails) & set(cols):
        return f"fails only areas not graded on {device}"
    if entry.device not in (None, device):
        return f"runs on {entry.device} only"
    return None
