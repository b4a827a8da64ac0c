"""What a grade-all run leaves on its machine when it is killed outright (kill -9, an OOM kill,
a lost login shell), and how the next run tells a dead run's leftovers from a live one's.

A run's warm hosts (grader/warm/hosts.py) each keep a folder in the temporary directory
(`grader-host-S`: the socket and the host's log) and the reference worker's folders
(`grader-host-work-S`, in the temporary directory and in /dev/shm), S being one suffix for
all three. The host folder holds OWNER_FILE: the identity (pid and start time) of the run
that made it and of the host process. Gradings carry their starter's identity in PARENT_ENV.
A grading's own work roots (`grader-work-PID_START_*`, grading_roots) carry the identity of the
grading process that made them in their name, and hold its marker.

A pid alone does not say a process is gone: it may have been reused. An identity is the
pid and the kernel's start time of the process (/proc/PID/stat, field 22), and a process
counts as the one named only while both match.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

from ..sandbox.processes import stat_fields

OWNER_FILE = "owner.json"
PARENT_ENV = "GRADER_PARENT"          # "pid:start" of the process that started a grading
HOST_PREFIX = "grader-host-"
WORK_PREFIX = "grader-host-work-"
GRADING_PREFIX = "grader-work-"       # one grading's work roots (grader/grading/grade_one.py), marked like a host's folder
UNCLAIMED_GRACE_S = 60                # a folder without a marker may be one being made
PR_SET_PDEATHSIG = 1


def start_time(pid: int) -> int | None:
    """The kernel's start time of pid (clock ticks since boot), or None when there is no such
    live process (a zombie has ended)."""
    fields = stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return None
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def age_s(pid: int) -> float | None:
    """Seconds since pid started, or None when it is not there."""
    start = start_time(pid)
    try:
        return float(Path("/proc/uptime").read_text().split()[0]) - start / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return None


def identity(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{start_time(pid)}"


def is_alive(ident: str | None) -> bool:
    """Whether the process `identity()` named is still running (and is that process)."""
    try:
        pid, start = str(ident).split(":", 1)
        return start != "None" and str(start_time(int(pid))) == start
    except ValueError:
        return False


def die_with_parent(parent: str | None) -> None:
    """SIGTERM to this process when the thread that started it ends; at once when its starter,
    named by identity, is already gone. Where prctl is missing, nothing: the next run sweeps."""
    if not parent:
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    pid = parent.split(":", 1)[0]
    # The starter may have died before prctl: then no signal will come, and this one stands in.
    if str(os.getppid()) != pid or not is_alive(parent):
        os.kill(os.getpid(), signal.SIGTERM)


# -- a host's folders ---------------------------------------------------------------------
def host_folders(shm: str | None) -> tuple[Path, Path, Path]:
    """(the host's own folder, the work folder, the exchange folder), made here, the first
    holding this process's identity before the others exist."""
    top = Path(tempfile.gettempdir())
    folder = Path(tempfile.mkdtemp(prefix=HOST_PREFIX))
    write_owner(folder, host=None)
    suffix = folder.name[len(HOST_PREFIX):]
    work = top / f"{WORK_PREFIX}{suffix}"
    work.mkdir(mode=0o700)          # not there before: one in the way is somebody else's
    exchange = work
    if shm:
        exchange = Path(shm) / f"{WORK_PREFIX}{suffix}"
        exchange.mkdir(mode=0o700)
    for made in {work, exchange}:
        _work_folder(made)
    return folder, work, exchange


def grading_roots() -> dict[str, Path]:
    """A grading's work roots: the folders its workers' scratch ("scratch_root") and shared
    tensors ("exchange_root", in shared memory where there is some) go in. The grading removes
    them once its session ends; each holds its identity, so that the next run removes them if
    it was killed outright."""
    from ..sandbox.proxy import shared_tensor_root
    roots = {"scratch_root": _work_folder(Path(tempfile.mkdtemp(prefix=_grading_prefix())))}
    shm = shared_tensor_root()
    roots["exchange_root"] = _work_folder(Path(tempfile.mkdtemp(prefix=_grading_prefix(), dir=shm))) if shm \
        else roots["scratch_root"]
    for folder in set(roots.values()):
        write_owner(folder, host=None)
    return roots


def own_folder() -> Path:
    """A folder of the grading process's own (mode 0700: no worker reads it), such as its state
    records or its copy of the submission, marked like the work roots so that the next run
    removes it if this one was killed outright."""
    folder = Path(tempfile.mkdtemp(prefix=_grading_prefix()))
    write_owner(folder, host=None)
    return folder


def _grading_prefix() -> str:
    """GRADING_PREFIX and this process's identity: a grading's folder names its maker from the
    moment it exists. Its marker comes a moment later, and a kill -9 between the two once left a
    folder that no run would claim."""
    return GRADING_PREFIX + identity().replace(":", "_") + "_"


def _identity_in_name(name: str) -> str | None:
    """The identity a grading folder's name carries (see _grading_prefix), or None."""
    pid, start, *_ = name[len(GRADING_PREFIX):].split("_", 2) + ["", ""]
    return f"{pid}:{start}" if pid.isdigit() and start.isdigit() else None


@contextlib.contextmanager
def removed_at_end(make):
    """The folder, or dict of folders, that `make()` returns (own_folder, grading_roots), removed
    when the block ends. SIGTERM and SIGINT are deferred while they are made, so that an
    interruption comes only once they are in this block's hands; SIGKILL cannot be deferred, and
    what it leaves the next run's sweep removes by its marker."""
    made = None
    try:
        with _interruptions_deferred():
            made = make()
        yield made
    finally:
        for folder in set(made.values()) if isinstance(made, dict) else [made] if made is not None else []:
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _interruptions_deferred():
    """SIGTERM and SIGINT that arrive in the block are acted on when it ends. Python runs signal
    handlers in the main thread only, so it is their handlers that wait, not the signals: a
    thread's signal mask does not hold a signal sent to the process, which the kernel hands to
    any other thread that does not block it, and its handler then raised in the main thread
    halfway through the block (seen in a test process with threads of its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield                       # no handler interrupts this thread
        return
    caught: list[tuple[int, object]] = []
    before = {signum: signal.signal(signum, lambda signum, frame: caught.append((signum, frame)))
              for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for signum, frame in caught:
            handler = before[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler in (signal.SIG_DFL, None):
                os.kill(os.getpid(), signum)     # its default action, now that the block is over


def _work_folder(path: Path) -> Path:
    """Mode 0711: each worker reaches only the folder it is handed inside."""
    path.chmod(0o711)
    return path


def write_owner(folder: Path, host: int | None) -> None:
    marker = {"owner": identity(), "host": identity(host) if host else None}
    tmp = folder / (OWNER_FILE + ".tmp")
    tmp.write_text(json.dumps(marker))
    os.replace(tmp, folder / OWNER_FILE)


def _owner(folder: Path) -> dict | None:
    try:
        marker = json.loads((folder / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _mentioned(path: Path) -> bool:
    """Whether a running process names `path` on its command line (a host names its folders)."""
    needle = str(path).encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def _old(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime > UNCLAIMED_GRACE_S
    except OSError:
        return False


def _end(ident: str | None) -> bool:
    """End the process `ident` names and its group (a host leads one): SIGTERM, then SIGKILL."""
    if not is_alive(ident):
        return False
    pid = int(str(ident).split(":", 1)[0])
    for signum, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, signum) if os.getpgid(pid) == pid else os.kill(pid, signum)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait_s
        while is_alive(ident) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not is_alive(ident):
            return True
    return True


def sweep_hosts(shm: str | None = None) -> list[str]:
    """Remove what warm hosts of dead runs left in the temporary directory and in `shm`
    (default: where hosts put it): their folders, and the hosts themselves if still up.
    A folder whose owner runs, or that a running process names, is left alone. Returns
    what was removed."""
    if shm is None:
        from ..sandbox.proxy import shared_tensor_root
        shm = shared_tensor_root()
    top = Path(tempfile.gettempdir())
    removed: list[str] = []
    try:
        entries = sorted(top.iterdir())
    except OSError:
        return removed
    for folder in entries:
        name = folder.name
        if not name.startswith(HOST_PREFIX) or name.startswith(WORK_PREFIX) or not folder.is_dir():
            continue
        marker = _owner(folder)
        if marker is not None:
            if is_alive(marker.get("owner")):
                continue
            if _end(marker.get("host")):
                removed.append(f"host process {marker['host'].split(':')[0]}")
        elif _mentioned(folder) or not _old(folder):
            continue
        suffix = name[len(HOST_PREFIX):]
        for path in [folder, top / f"{WORK_PREFIX}{suffix}"] + ([Path(shm) / f"{WORK_PREFIX}{suffix}"] if shm else []):
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(str(path))
    # Work folders whose host folder is gone: a host killed while its folders were removed.
    for parent in [top] + ([Path(shm)] if shm else []):
        try:
            works = sorted(p for p in parent.iterdir() if p.name.startswith(WORK_PREFIX))
        except OSError:
            continue
        for work in works:
            if (top / (HOST_PREFIX + work.name[len(WORK_PREFIX):])).exists() or _mentioned(work) or not _old(work):
                continue
            shutil.rmtree(work, ignore_errors=True)
            removed.append(str(work))
    return removed


# -- gradings -----------------------------------------------------------------------------
def _environ(pid: str) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def sweep_gradings(course_root: Path) -> list[str]:
    """End gradings of this course whose starter is gone (a grade-all or a cluster task that
    died): they would write the partial reports a new run writes, and share its GPUs. A
    grading still watched by a live starter (a Slurm task on this node) is left alone."""
    root = str(Path(course_root).resolve()).encode()
    ended = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"grader" not in argv or b"grade" not in argv or root not in argv:
            continue
        parent = _environ(entry).get(PARENT_ENV)
        if parent is None or is_alive(parent):
            continue
        if _end(identity(int(entry))):
            ended.append(f"grading process {entry}")
    return ended


def sweep_grading_folders(shm: str | None = None) -> list[str]:
    """Remove the work roots of gradings that were killed outright (their `finally` never ran):
    their workers' scratch, in the temporary directory, and their shared tensors, in /dev/shm,
    which may be gigabytes. Only folders whose marker names a process that is gone."""
    if shm is None:
        from ..sandbox.proxy import shared_tensor_root
        shm = shared_tensor_root()
    removed = []
    for parent in dict.fromkeys([Path(tempfile.gettempdir())] + ([Path(shm)] if shm else [])):
        try:
            folders = sorted(p for p in parent.iterdir() if p.name.startswith(GRADING_PREFIX) and p.is_dir())
        except OSError:
            continue
        for folder in folders:
            marker = _owner(folder)
            owner = marker.get("owner") if marker is not None else _identity_in_name(folder.name)
            if owner is None or is_alive(owner):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


def sweep(course_root: Path) -> list[str]:
    """What the runs that died left: orphaned gradings of this course first (they hold hosts'
    sessions), then dead hosts' and gradings' folders and processes anywhere on this machine."""
    return sweep_gradings(course_root) + sweep_hosts() + sweep_grading_folders()
