"""Run untrusted submissions in a separate, confined process."""
from .confine import Confinement
from .proxy import (SandboxFailure, Submission, SubmissionError, SubmissionUnavailable,
                    WorkerCrashed, WorkerTimeout)

__all__ = ["Confinement", "SandboxFailure", "Submission", "SubmissionError",
           "SubmissionUnavailable", "WorkerCrashed", "WorkerTimeout"]
