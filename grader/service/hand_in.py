"""A hand-in put where grade-all reads it: submitted/<student>/<assignment>/<file>, with the
timestamp.txt that nbgrader's own submit writes beside it.

The new folder is built beside the old one and swapped with it in one rename(2)
(renameat2's RENAME_EXCHANGE), so that grade-all, nbgrader or a person looking sees the
previous hand-in or this one, whole, never a file without its timestamp or no folder at all.
Where the file system cannot exchange (some network file systems), the old folder is moved
aside first: a reader may then find no folder for an instant, never a mixed one.
"""
from __future__ import annotations

import ctypes
import datetime
import os
import shutil
import tempfile
from pathlib import Path

from ..course.folder import Course
from ..grading.submission_file import TIMESTAMP

NBGRADER_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"     # nbgrader's default timestamp_format, in UTC
AT_FDCWD = -100
RENAME_EXCHANGE = 2


def timestamp(when: datetime.datetime) -> str:
    return when.astimezone(datetime.timezone.utc).strftime(NBGRADER_FORMAT)


def store(course: Course, student: str, data: bytes, when: datetime.datetime) -> Path:
    """Write the hand-in; the folder it is in."""
    folder = course.submission_folder(student)
    folder.parent.mkdir(parents=True, exist_ok=True)
    new = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        _write(new / course.assignment.submission, data)
        _write(new / TIMESTAMP, (timestamp(when) + "\n").encode())
        new.chmod(0o755)
        if folder.is_dir() and not folder.is_symlink():
            if not _exchange(new, folder):
                aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old.", dir=folder.parent))
                os.rename(folder, aside / "old")
                os.rename(new, folder)
                new = aside
        else:
            if os.path.lexists(folder):        # a file or a link where the folder should be
                os.unlink(folder)
            os.rename(new, folder)
            new = None
        _sync_dir(folder.parent)
    finally:
        if new is not None:
            shutil.rmtree(new, ignore_errors=True)   # after an exchange: the previous hand-in
    return folder


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _exchange(a: Path, b: Path) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
    except (OSError, AttributeError):
        return False
    return rc == 0


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
