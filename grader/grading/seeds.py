"""Gradings made again with their inputs: `grade-all --seeds FILE` grades each file listed there
with the seed an earlier grading of the same bytes used (its report's extra_data.instructor.seed),
so that the two reports can be compared test by test. The file maps a submission's sha256 to a
seed; the run's gradings find it through SEEDS_ENV, as a Slurm task or a warm grading host would."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

SEEDS_ENV = "GRADER_SEEDS_FILE"
_SHA256 = re.compile(r"[0-9a-f]{64}")


class SeedsError(ValueError):
    """A seeds file that cannot be used, in a sentence."""


def read(path: Path) -> dict[str, int]:
    """{sha256: seed} from a seeds file, or SeedsError saying what is wrong with it."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SeedsError(f"cannot read the seeds file {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise SeedsError(f"the seeds file {path} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise SeedsError(f"the seeds file {path} must hold one object, {{\"<sha256 of a file>\": seed, ...}}")
    for sha, seed in raw.items():
        if not _SHA256.fullmatch(sha) or not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise SeedsError(f"the seeds file {path} maps {sha[:70]!r} to {seed!r}: each key must be a file's "
                             "sha256 (64 lowercase hex digits) and each value a non-negative integer seed")
    return raw


def listed(sha256: str) -> int | None:
    """The seed this run was asked to grade these bytes with, or None."""
    path = os.environ.get(SEEDS_ENV)
    if not path:
        return None
    return read(Path(path)).get(sha256)
