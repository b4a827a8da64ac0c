"""The typed spec of one grading's session (grader/grading/session.py): everything its test process
needs, written by the grading (grader/grading/grade_one.py) into its state folder and read back by the
cold process or the warm host that runs the session. pytest's arguments are made from it here
and nowhere else, so a warm session cannot differ from a cold one by a flag one of them forgot.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from . import state_records

SPEC_FILE = "session.json"      # in the grading's state folder (0700: no worker reads it)
# The only pytest plugins a session loads besides the grader's own: the machine's others (a GPU
# image brings hypothesis, xdist, benchmark, cov and more) could reorder, repeat or skip tests,
# and each hooks every session (docs/instructor.md).
PLUGINS = ("-p", "pytest_metadata.plugin", "-p", "pytest_jsonreport.plugin")


class SpecError(ValueError):
    """A spec file that is missing, unreadable or not of the expected shape."""


@dataclass(frozen=True)
class SessionSpec:
    assignment: Path                    # the assignment's folder (holds assignment.toml)
    submission: Path                    # the grader's private copy of the file
    device: str                         # "cpu" or "cuda"
    seed: int                           # drawn per grading; the suites mix it into their inputs
    state: Path                         # the grading's folder for the records (grader/grading/state_records.py)
    drop_privileges: bool = True        # workers run under a uid of their own
    protect: tuple[Path, ...] = ()      # further paths the workers must not reach (a class's other files)
    scratch_root: Path | None = None    # the workers' scratch folders go here (the grading removes it)
    exchange_root: Path | None = None   # ... and their shared tensors
    collect_only: bool = False          # list the tests (for a file that cannot run), run nothing

    def roots(self) -> dict[str, Path | None]:
        return {"scratch_root": self.scratch_root, "exchange_root": self.exchange_root}

    def write(self) -> Path:
        path = Path(self.state) / SPEC_FILE
        fields = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        path.write_text(json.dumps(fields, indent=1))
        return path

    @classmethod
    def read(cls, path: str | Path) -> "SessionSpec":
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise SpecError(f"cannot read the session spec {path}: {exc}") from None
        if not isinstance(raw, dict):
            raise SpecError(f"the session spec {path} is not an object")
        known = {f.name: f for f in dataclasses.fields(cls)}
        if set(raw) - set(known) or {"assignment", "submission", "device", "seed", "state"} - set(raw):
            raise SpecError(f"the session spec {path} has fields {sorted(raw)}, expected {sorted(known)}")
        if raw["device"] not in ("cpu", "cuda"):
            raise SpecError(f"the session spec's device is {raw['device']!r}, not cpu or cuda")
        checks = {"seed": int, "drop_privileges": bool, "collect_only": bool}
        for name, kind in checks.items():
            if name in raw and (type(raw[name]) is not kind):
                raise SpecError(f"the session spec's {name} is {raw[name]!r}, not {kind.__name__}")
        paths = ("assignment", "submission", "state", "scratch_root", "exchange_root")
        for name in paths:
            if raw.get(name) is not None and not isinstance(raw[name], str):
                raise SpecError(f"the session spec's {name} is {raw[name]!r}, not a path")
        if not isinstance(raw.get("protect", []), list) or not all(isinstance(p, str) for p in raw.get("protect", [])):
            raise SpecError("the session spec's protect is not a list of paths")
        values = {k: (Path(v) if k in paths and v is not None else v) for k, v in raw.items()}
        values["protect"] = tuple(Path(p) for p in raw.get("protect", []))
        return cls(**values)

    def pytest_args(self, hidden_tests: Path) -> list[str]:
        """pytest's arguments for this session. `-c /dev/null`: no configuration of the caller's
        (a pytest.ini, a pyproject.toml above the suites) changes what runs; and no plugin of the
        machine's but PLUGINS (the test process starts with PYTEST_DISABLE_PLUGIN_AUTOLOAD)."""
        args = [str(hidden_tests), "-p", "no:cacheprovider", *PLUGINS, "--rootdir", str(hidden_tests), "-c", os.devnull,
                "--json-report", f"--json-report-file={Path(self.state) / state_records.PYTEST}", "--json-report-omit", "log",
                "-o", "console_output_style=count", "--tb=no", "-rN", "-v", "--no-header"]
        return args + (["--collect-only"] if self.collect_only else [])


def _plain(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value
