"""What the operating system can do to contain a worker, and the record of what it did.

Layers, strongest first; each is used where the machine allows it and the
report says which were in force:
  * another uid (only when the grader runs as root and that uid can run the
    Python environment), with the protected paths closed to it;
  * resource limits: file size (caps the output log), core dumps, address space
    on the CPU, process count under the separate uid;
  * a memory watchdog on private resident memory (CUDA needs the address space),
    and on the CPU a cap on private writable memory (RLIMIT_DATA), so an allocation
    past it fails at once instead of growing until the watchdog sees it;
  * namespaces (isolate.py): no network, private IPC, and a private, size-capped
    /tmp, /var/tmp, /dev/shm that dies with the worker;
  * in that mount namespace, a file system built from an allow-list (rootfs.py): the rest
    of the machine is absent, not merely closed;
  * every descendant is ours to kill: the grader is a child subreaper, so a
    process that daemonises is re-parented to it instead of escaping.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import os
import pwd
import random
import resource
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from .. import bytecode
from ..files import private_folder
from . import isolate, rootfs
from .processes import proc_table, become_subreaper

OUTPUT_LIMIT = 64 << 20           # bytes a worker may write to its log
CPU_ADDRESS_SPACE = 64 << 30      # generous: the 100k-block caches are mapped, not resident
UID_RANGE = range(61000, 62000)
REPO = Path(__file__).resolve().parents[2]      # the checkout: out of the workers' view
PROBE_VALID_S = 3600


def default_memory_limit() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 << 30
    return min(16 << 30, total // 3)


@dataclass
class Confinement:
    """How workers are started; `describe()` goes into the report verbatim."""
    device: str
    uid: int | None = None
    protected: list[str] = field(default_factory=list)
    kept_out: list[str] = field(default_factory=list)    # absent from the view; their modes untouched
    not_kept_out: list[str] = field(default_factory=list)
    memory_limit: int = field(default_factory=default_memory_limit)
    reason: str = ""
    subreaper: bool = False
    gpu_memory: str | None = None     # how GPU tensors reach the worker: "vmm" or "ipc" (same uid only)
    namespaces: bool = False          # no network, private IPC and /tmp (isolate.py)
    namespaces_why: str = ""
    view: rootfs.View | None = None   # the worker's file system, an allow-list (rootfs.py)
    view_why: str = ""                # how its /proc was made, or why there is no view
    uid_lock: int | None = field(default=None, repr=False)   # held while the uid is ours
    # Where a uid's first good start is to be remembered (_probe_record), until one is: see proven().
    unproven: Path | None = field(default=None, repr=False)

    @property
    def private_shm(self) -> bool:
        """torch's CUDA IPC keeps its reference counts in /dev/shm files the grader's
        process opens too, so with "ipc" /dev/shm and System V IPC stay shared."""
        return self.gpu_memory != "ipc"

    @classmethod
    def prepare(cls, device: str, protect: list[Path], python: str = sys.executable,
                want_uid: bool = True, keep_out: list[Path] = ()) -> "Confinement":
        """`protect`: the assignment's paths (reference, hidden tests), closed to a worker of its
        own uid by their mode as well as left out of its view. `keep_out`: the course's folders
        (other students' files), left out of the view alone: their modes are never changed."""
        conf = cls(device=device, subreaper=become_subreaper())
        if device == "cuda":
            from . import vmm
            conf.gpu_memory = "vmm" if vmm.available() else "ipc"
        conf.namespaces, conf.namespaces_why = _namespaces_available()
        python_paths()     # found here: preexec runs after a fork, where an import could deadlock
        if conf.namespaces:
            view = rootfs.View.discover(python_paths(), (str(REPO), *map(str, protect), *map(str, keep_out)))
            ok, said = _view_works(view, conf.private_shm)
            conf.view, conf.view_why = (view if ok else None), said
        else:
            conf.view_why = "no mount namespace"
        conf.keep_out_paths(keep_out)
        if not want_uid:
            conf.reason = "privilege drop disabled by configuration"
        elif os.geteuid() != 0:
            conf.reason = "grader is not root: workers run as the grader's own user"
        elif conf.gpu_memory == "ipc":
            # Measured on the H200 runner (torch 2.11): legacy CUDA IPC will not open the grader's
            # memory in a process of another uid ("mapping of buffer object failed").
            conf.reason = ("the CUDA driver bindings (cuda-bindings) are missing, and torch's CUDA IPC "
                           "refuses to map memory into a process of another user")
        else:
            try:
                conf.uid, conf.uid_lock = _free_uid()
            except RuntimeError as exc:
                conf.reason = f"no uid for the worker: {exc}. Workers run as root"
            else:
                conf.unproven = _unproven(python, device, conf.view)
                conf.close_paths(protect)
        return conf

    def preexec(self, keep: list[str] = ()) -> None:
        """Runs in the child between fork and exec. `keep`: folders the worker must see as
        they are (its scratch, the exchange, the Python installation)."""
        if self.namespaces:
            isolate.enter(list(keep) if self.view else [*keep, *python_paths()], shm=self.private_shm,
                          view=self.view)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT, OUTPUT_LIMIT))
        if self.device == "cpu":
            resource.setrlimit(resource.RLIMIT_AS, (CPU_ADDRESS_SPACE, CPU_ADDRESS_SPACE))
            # Shared tensors are MAP_SHARED file pages, which RLIMIT_DATA leaves out. Not on the
            # GPU: what the CUDA driver maps privately is not ours to bound.
            resource.setrlimit(resource.RLIMIT_DATA, (self.memory_limit, self.memory_limit))
        if self.uid is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (4096, 4096))
            os.setgroups([])
            os.setgid(self.uid)
            os.setuid(self.uid)

    def proven(self) -> None:
        """A worker under this uid said hello (grader/sandbox/worker.py imported torch and
        Triton and, on the GPU, used it: what the probe asks): the next confinements trust the uid."""
        if self.unproven is not None:
            with contextlib.suppress(OSError):
                self.unproven.touch()
            self.unproven = None

    def doubt(self) -> bool:
        """A worker under a uid not yet proven did not say hello. The probe tells whether the
        uid cannot work here (True: this confinement runs its workers as root from now on, and
        the caller starts one again) or the worker failed for a reason of its own (False).
        Nothing of the submission has run by then: the worker imports it only after hello."""
        if self.unproven is None or self.uid is None:
            return False
        record, self.unproven = self.unproven, None
        ok, why = _probe(self.uid, sys.executable, self.device, dataclasses.replace(self, uid_lock=None))
        if ok:
            with contextlib.suppress(OSError):
                record.touch()
            return False
        self.reason = f"a worker under uid {self.uid} cannot work here: {why}. Workers run as root"
        self.uid = None
        self.release()
        return True

    def close_paths(self, paths: list[Path]) -> None:
        """Close these paths to the worker's uid (mode 0700 for the grader's user alone). Before
        the worker imports the submission: a worker started ahead (a grading host's spare,
        grader/grading/warm_host.py) gets its grading's paths closed when the grading takes it."""
        if self.uid is None:
            return
        for path in map(Path, paths):
            if path.exists() and str(path) not in self.protected:
                mode = stat.S_IMODE(path.stat().st_mode)
                path.chmod(mode & 0o700)
                self.protected.append(str(path))

    def keep_out_paths(self, paths: list[Path]) -> None:
        """Note the paths the worker's view leaves out (the course's folders): nothing is done to
        them. A view made before they were known (a spare worker's) keeps them out unless one
        of its entries holds them; without a view they are not kept out (the report says so)."""
        for path in map(str, paths):
            if path in self.kept_out or path in self.not_kept_out:
                continue
            out = self.view is not None and not any(rootfs._under(path, entry) for entry in self.view.read_only)
            (self.kept_out if out else self.not_kept_out).append(path)

    def release(self) -> None:
        """Give the uid back for other gradings to use, once none of its processes is left
        (Worker.stop kills them all). A grading process holds its uids until it exits; a
        grading host, which outlives many gradings, gives each back when its grading ends."""
        if self.uid_lock is not None:
            os.close(self.uid_lock)
            self.uid_lock = None

    def own(self, path: Path) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)

    def describe(self) -> dict:
        return {
            "process": "separate worker process per submission, replaced after a crash or timeout",
            "privilege_drop": self.uid is not None,
            "uid": self.uid,
            "why_not": self.reason or None,
            "protected_paths": self.protected,
            "kept_out_paths": self.kept_out,
            "not_kept_out_paths": self.not_kept_out,
            "rlimits": {"fsize_bytes": OUTPUT_LIMIT, "core": 0,
                        "address_space_bytes": CPU_ADDRESS_SPACE if self.device == "cpu" else None,
                        "nproc": 4096 if self.uid is not None else None,
                        "data_bytes": self.memory_limit if self.device == "cpu" else None},
            "memory_watchdog_bytes": self.memory_limit,
            "descendants_reaped": self.subreaper,
            "gpu_memory": self.gpu_memory,
            "network": "own network namespace, loopback only" if self.namespaces
                       else f"not isolated: {self.namespaces_why}",
            "private_tmp": {"folders": [f for f in isolate.covered()
                                        if self.private_shm or f != "/dev/shm"],
                            "bytes": isolate.PRIVATE_TMP_BYTES, "ipc_namespace": self.private_shm,
                            "removed_with_the_worker": True} if self.namespaces else None,
            "file_system": dict(self.view.describe(), view="allow-list", proc=self.view_why,
                                read_write=["the worker's scratch folder", "the shared tensors",
                                            "its private /tmp"] if self.private_shm else
                                ["the worker's scratch folder", "the shared tensors", "its private /tmp",
                                 "the machine's /dev/shm"])
                           if self.view else {"view": "the machine's", "why_not": self.view_why},
        }

    @property
    def tmpdir(self) -> str | None:
        """TMPDIR for the worker: its private /tmp where it has one."""
        return "/tmp" if self.namespaces else None


@cache
def _namespaces_available() -> tuple[bool, str]:
    ok, why = isolate.available()
    return ok, "" if ok else f"the grader cannot create namespaces here ({why})"


@cache
def _view_works(view: rootfs.View, shm: bool) -> tuple[bool, str]:
    ok, said = isolate.available(view=view, shm=shm)
    return ok, said if ok else f"the allow-list could not be built here ({said}); workers see the machine's files"


@cache
def python_paths() -> tuple[str, ...]:
    """Where the worker's interpreter and libraries live: what its file system allows, and
    what stays visible where it lies in a folder the worker gets a private copy of (a checkout
    under /tmp with its .venv). The checkout itself is left out (PYTHONPATH often names it:
    the worker never imports the grader), but for the environment inside it."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {p for p in sysconfig.get_paths().values() if p}
    for var in ("PYTHONPATH", "LD_LIBRARY_PATH"):
        paths |= {p for p in os.environ.get(var, "").split(os.pathsep) if p}
    paths |= set(_pth_paths({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}))
    if (prefix := bytecode.in_use()) is not None:
        paths.add(prefix)       # the grader's bytecode of the packages above, read-only in the view
    env = [os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix)]
    repo = str(REPO)

    def allowed(path: str) -> bool:
        real = os.path.realpath(path)
        inside = real == repo or real.startswith(repo + "/")
        return os.path.isdir(real) and not repo.startswith(real.rstrip("/") + "/") and real != repo and (
            not inside or any(real == e or real.startswith(e + "/") for e in env))
    return tuple(sorted(p for p in paths if allowed(p)))


def _pth_paths(site_dirs: set[str]) -> list[str]:
    """Folders the site-packages' .pth files add to sys.path (editable installs, namespace
    packages), as site.addpackage reads them: a line that starts with import is code."""
    out = []
    for site_dir in site_dirs:
        for pth in sorted(Path(site_dir).glob("*.pth")):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                for line in pth.read_text().splitlines():
                    line = line.strip()
                    if line and not line.startswith(("#", "import ", "import\t")):
                        out.append(os.path.join(site_dir, line))
    return out




def _private_dir() -> Path:
    """The machine's folder for uid locks and probe results, ours alone."""
    return private_folder(Path(tempfile.gettempdir()) / "grader-uids")


def _free_uid() -> tuple[int, int]:
    """(uid, its lock's fd): a uid no process or account uses, locked so that gradings running
    side by side never share one (each kills every process of its uid when it cleans up)."""
    used = {u for _, u in proc_table().values()} | {p.pw_uid for p in pwd.getpwall()}
    locks = _private_dir()
    candidates = [u for u in UID_RANGE if u not in used]
    random.shuffle(candidates)
    for uid in candidates:
        fd = os.open(locks / str(uid), os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return uid, fd
    raise RuntimeError("no free uid left for a sandbox worker")


def _probe_record(python: str, device: str, view: rootfs.View | None) -> Path:
    """Where a passed probe is remembered: one file per interpreter, device, file system the
    worker sees and installed torch/triton (their folders' change times), so a reinstall probes again."""
    stamp = [os.path.realpath(python), device, repr(view)]
    for name in ("torch", "triton"):
        spec = importlib.util.find_spec(name)        # located, not imported: that takes seconds
        folder = os.path.dirname(spec.origin) if spec and spec.origin else name
        stamp += [folder, str(os.stat(folder).st_ctime_ns) if os.path.isdir(folder) else "absent"]
    return _private_dir() / ("probe-" + hashlib.sha256("\0".join(stamp).encode()).hexdigest()[:24])


def _unproven(python: str, device: str, view: rootfs.View | None) -> Path | None:
    """The record to write once a uid has worked here, or None where a passed probe or a worker's
    hello was remembered within PROBE_VALID_S. A uid is not probed ahead of its first worker: that
    worker's own start asks the same (Confinement.proven and .doubt), and a class's first gradings, each
    probing at once, spent 9 s of their start there on the H200 (docs/instructor.md)."""
    record = _probe_record(python, device, view)
    with contextlib.suppress(OSError):
        if time.time() - record.stat().st_mtime < PROBE_VALID_S:
            return None
    return record


def _probe(uid: int, python: str, device: str, conf: Confinement) -> tuple[bool, str]:
    probe = "import torch, triton" + ("; torch.zeros(1, device='cuda')" if device == "cuda" else "")
    try:
        r = subprocess.run([python, "-s", "-c", probe], preexec_fn=conf.preexec,
                           capture_output=True, text=True, timeout=120, cwd="/",
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/"})
    except (OSError, subprocess.SubprocessError) as exc:
        return False, str(exc)
    if r.returncode == 0:
        return True, ""
    errors = [l for l in r.stderr.splitlines() if "Error" in l] or r.stderr.strip().splitlines() or [""]
    return False, errors[-1][:300]
