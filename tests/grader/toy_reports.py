"""Helpers of the engine tests: grade the toy submissions once, check reports and leftovers."""
import json
import os
from functools import lru_cache
from pathlib import Path

import jsonschema

from grader.assignment import REPO, Assignment
from grader.grading.grade_one import grade

TOY = Assignment.load(REPO / "tests/grader/toy")
SCHEMA = json.loads((REPO / "grader/grading/results.schema.json").read_text())


def validate_report(report: dict) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(report)


def sandbox_processes(uid) -> list[int]:
    """Processes still running under the worker's uid (none may outlive a grading)."""
    if uid is None:
        return []
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uids = [line.split()[1] for line in status.splitlines() if line.startswith("Uid:")]
        state = [line.split()[1] for line in status.splitlines() if line.startswith("State:")]
        if uids and int(uids[0]) == uid and state and state[0] != "Z":
            found.append(int(pid))
    return found


BUILT_INPUTS_LOG = "TOY_BUILT_INPUTS_LOG"        # tests/grader/toy/suite/test_toy.py notes its costly fixture there


@lru_cache(maxsize=None)
def _toy_report(name: str, out_dir: str) -> str:
    path = Path(out_dir) / f"{name}.json"
    os.environ[BUILT_INPUTS_LOG] = str(built_inputs_log(name, out_dir))
    try:
        grade(TOY, REPO / "tests/grader/toy/submissions" / f"{name}.py", path, device="cpu", seed=1234, quiet=True)
    finally:
        del os.environ[BUILT_INPUTS_LOG]
    return path.read_text()


def built_inputs_log(name: str, out_dir: str) -> Path:
    """Where the toy suite's costly fixture noted the tests it built inputs for, in `name`'s grading."""
    return Path(out_dir) / f"{name}.inputs"


def by_outcome(report: dict) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    for t in report["tests"]:
        result.setdefault(t["extra_data"]["outcome"], []).append(t["name"])
    return result
