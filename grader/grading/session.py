"""One grading's pytest session over the hidden suites, run from its spec (grader/grading/session_spec.py).

The grading hands over only the spec's path: to `python -m grader.grading.session SPEC` for a cold
session, or to a warm grading host (grader/grading/warm_host.py), which calls the same `run` in its own
process. What differs between the two is only where the workers come from (grader/grading/workers.py).
"""
from __future__ import annotations

import sys

from .session_spec import SessionSpec, SpecError


def run(spec: SessionSpec, workers=None) -> int:
    """The session in this process: pytest over the hidden suites, with the plugin handed
    `workers` (grader/grading/workers.py; default: each worker started for this grading alone)."""
    from .. import bytecode         # their bytecode kept where torch has none (grader/bytecode.py)
    pytest = bytecode.imported("pytest")

    from . import pytest_plugin
    from ..assignment import Assignment
    from .workers import ColdWorkers
    assignment = Assignment.load(spec.assignment)
    plugin = pytest_plugin.SessionPlugin(spec, assignment, workers or ColdWorkers(spec.roots()))
    try:
        plugin.start()          # the workers first: their imports overlap this process's torch
        if spec.device == "cuda":
            bytecode.imported("torch")      # the suites' conftest.py would, as pytest loads it
        return int(pytest.main(spec.pytest_args(assignment.hidden_tests), plugins=[pytest_plugin, plugin]))
    finally:
        plugin.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m grader.grading.session SPEC.json", file=sys.stderr)
        return 4
    try:
        spec = SessionSpec.read(argv[0])
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 4
    return run(spec)


if __name__ == "__main__":
    sys.exit(main())
