"""One grade-all per course at a time: a lock in the course folder, held by the grade-all
driver for its whole run (planning, gradings, publishing) and by nothing else (cluster
tasks write their reports without it).

Two runs side by side would each grade every file, write the same partial reports and
put two gradings on a GPU that docs/instructor.md promises one. The lock is flock(2) on
COURSE/LOCK_NAME: the kernel (or the file server) drops it when the process ends, however
it ends, so a killed run leaves nothing to clear by hand. The file says who holds it, for
the run that finds it taken. Where flock is not shared between machines (some NFS setups,
docs/cluster.md), runs on two machines do not see each other's lock.
"""
from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from ..warm.leftovers import identity

LOCK_NAME = ".grade-all.lock"
BUSY_EXIT = 75              # EX_TEMPFAIL: try again later
WAIT_NOTE_S = 60            # how often a waiting run says it still waits


class LockUnavailable(Exception):
    """The course folder cannot hold the lock: the instructor's to mend, not to wait out."""


class CourseBusy(Exception):
    """Another grade-all holds the course."""


class CourseLock:
    def __init__(self, course_root: Path):
        self.path = Path(course_root) / LOCK_NAME
        self.fd: int | None = None

    def acquire(self, wait: bool = False, say=None) -> None:
        """Take the lock, or raise CourseBusy naming its holder; with `wait`, wait for it,
        calling `say(text)` now and then."""
        try:
            # Never truncated on open: the holder's note must survive a second run opening it.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise LockUnavailable(f"cannot open the course's lock file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                os.close(fd)
                raise CourseBusy(f"another grade-all is grading this course ({self.holder()}); wait for it "
                                 f"to finish, or run again with --wait") from None
            if say:
                say(f"waiting for the grade-all that holds this course ({self.holder()})")
            # Polled rather than blocked on, so that Ctrl-C and SIGTERM end the wait at once.
            noted = time.monotonic()
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    time.sleep(0.5)
                if say and time.monotonic() - noted > WAIT_NOTE_S:
                    noted = time.monotonic()
                    say(f"still waiting ({self.holder()})")
        except OSError as exc:            # a filesystem without flock (ENOLCK)
            os.close(fd)
            raise LockUnavailable(f"cannot lock {self.path}: {exc.strerror} (docs/cluster.md: locks on shared "
                             "filesystems)") from None
        self.fd = fd
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        note = {"pid": os.getpid(), "host": socket.gethostname(), "started": started, "identity": identity()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(note) + "\n").encode(), 0)

    def holder(self) -> str:
        try:
            note = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            note = {}
        if not isinstance(note, dict) or "pid" not in note:
            return "a run that has not said who it is yet"
        return f"pid {note.get('pid')} on {note.get('host', '?')}, started {note.get('started', '?')}"

    def release(self) -> None:
        if self.fd is None:
            return
        os.ftruncate(self.fd, 0)
        os.close(self.fd)           # closing drops the flock
        self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
