"""The contract between a grading (grader/grading/grade_one.py) and its test process (grader/grading/pytest_plugin.py):
the files the test process leaves in the grading's state folder, and one reader that trusts
none of them. The test process writes them; the grading reads them once pytest has ended
and no worker is left, and scores only what they hold in the expected shape."""
from __future__ import annotations

import json
from pathlib import Path

COLLECTED = "collected.json"    # [{"nodeid", "area", "contract"}] for every test, at collection
PYTEST = "pytest.json"          # pytest-json-report's report; a test's "metadata" is its record:
                                # area, contract, outcome, hint, and a measure and figures if timed
SANDBOX = "sandbox.json"        # how the submission's worker was confined (extra_data.sandbox)
WORKER = "worker.json"          # {"restarts", "failures", "import_error", "timings", "log_tail"} of the
                                # submission's workers: log_tail is the end of what they printed
DEVICE = "device.json"          # {"device_name", "cuda", "uuid"}: the GPU the test process opened
QUIET = "quiet.json"            # {"checked", "problem"}: whether timings were checked for foreign GPU work


def read(folder: Path, name: str, kind: type):
    """The parsed file if it holds a `kind`, else None (missing, truncated or tampered with)."""
    try:
        data = json.loads((Path(folder) / name).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, kind) else None
