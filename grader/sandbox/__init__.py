"""Run untrusted submissions in a separate, confined process.

The names below load on first use (PEP 562), so that the grader's own process can use
`confine` without importing torch, which only the test process and the workers need.

May import: the core (files).
Used by: every other package: gpu/ (NVML), warm/ and grading/ (the workers), and what grades."""
from importlib import import_module

_FROM = {"Confinement": "confine", "SandboxFailure": "proxy", "Submission": "proxy",
         "SubmissionError": "proxy", "SubmissionUnavailable": "proxy", "WorkerCrashed": "proxy",
         "WorkerTimeout": "proxy"}

__all__ = sorted(_FROM)


def __getattr__(name: str):
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_FROM[name]}", __name__), name)
