"""The worker's file system: an allow-list, the way bubblewrap builds one.

Inside the worker's own mount namespace (isolate.py), a fresh tmpfs becomes its root and
only what it needs is bound in at its own path: the Python installation and what it
imports, the system's libraries and programs, a few files of /etc, the GPU's device nodes
and driver libraries, /sys, a /proc, and, writable, its scratch folder, the shared
tensors and a private /tmp. Everything else of the machine (other checkouts, the course,
the grader's own code, /home, /root, /srv, /opt) is not hidden by permissions but absent:
a world-readable copy of the reference elsewhere on the disk is out of reach.

`View` is worked out in the trusted process (`View.discover`, before any fork); `enter`
runs between fork and exec, with syscalls only. Every source is opened (O_PATH) before
anything is mounted over it, so a folder under /tmp is found again under the private /tmp.
Binds are made parents first and each is made read-only (and nosuid) at once, so nothing
below can be created on the machine's own disk by mistake. The old root is detached after
pivot_root and no descriptor of it is kept, so nothing leads back to it.

Against a worker under a uid of its own this holds: it has no capability to mount or
unmount, and the other processes' /proc/PID/root are closed to it. A worker with the
grader's uid can open /proc/PID/root of the grader's processes, so there it is a
courtesy, not a wall; the report says which.
"""
from __future__ import annotations

import ctypes
import glob
import os
import platform
import stat
import sys
from dataclasses import dataclass, field

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203}.get(platform.machine())

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the dynamic loader, Python (ssl, time zones, users, hosts) and the CUDA stack read.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ld.so.preload", "nsswitch.conf", "passwd", "group",
       "hosts", "host.conf", "resolv.conf", "gai.conf", "protocols", "services", "localtime", "timezone",
       "ssl", "ca-certificates", "ca-certificates.conf", "pki", "os-release", "lsb-release",
       "debian_version", "alternatives", "mime.types", "nvidia", "OpenCL", "vulkan")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri")
DRIVER = ("/usr/local/nvidia", "/usr/local/cuda*", "/run/nvidia-persistenced", "/usr/lib/wsl")
DEV_LINKS = {"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1",
             "/dev/stderr": "/proc/self/fd/2"}
# Flags of a mount that a bind of it must keep when made read-only (in a user namespace
# they are locked, and dropping one is refused): statvfs's ST_* bits are the MS_* ones.
KEPT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(),
                       fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                       data.encode() if data else None), f"mount {target}")


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@dataclass(frozen=True)
class View:
    """What a worker sees, besides the folders handed to it at its start (`enter`'s `writable`)."""
    read_only: tuple[str, ...]
    devices: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = field(default=())   # (path, target) of symlinks on the way
    proc_options: str | None = None    # a /proc of the worker's own, mounted so; None: the machine's

    @classmethod
    def discover(cls, python: tuple[str, ...], hidden: tuple[str, ...] = ()) -> "View":
        """`python`: the interpreter's folders (confine.python_paths). `hidden`: folders that must
        stay out of view even where an entry would contain them (the checkout)."""
        wanted = [*SYSTEM, *python, *(f"/etc/{name}" for name in ETC), "/sys"]
        wanted += [p for pattern in DRIVER for p in sorted(glob.glob(pattern))]
        wanted += loader_folders()
        wanted += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        devices = [*DEVICES, *(p for pattern in GPU_DEVICES for p in sorted(glob.glob(pattern)))]
        links: dict[str, str] = {}
        real = [r for p in wanted if (r := _resolve(p, links)) and not any(_under(h, r) for h in hidden)]
        dev = [r for p in devices if (r := _resolve(p, links))]
        return cls(_outermost(real), tuple(sorted(set(dev))), tuple(sorted(links.items())), _proc_options())

    def describe(self) -> dict:
        return {"read_only": list(self.read_only), "devices": list(self.devices),
                "proc": "own, other users' processes hidden" if self.proc_options else "the machine's"}


def _proc_options() -> str | None:
    """Before Linux 5.8 every /proc of a pid namespace shares its options, so mounting one that
    hides processes would hide them on the machine too; and only root may mount one at all."""
    try:
        release = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
    except ValueError:
        return None
    return "hidepid=invisible" if os.geteuid() == 0 and release >= (5, 8) else None


def loader_folders() -> list[str]:
    """The folders /etc/ld.so.conf names (driver libraries live there on some machines)."""
    out: list[str] = []

    def read(path: str, depth: int = 0) -> None:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line.startswith("include") and depth < 4:
                for inc in sorted(glob.glob(line.split(None, 1)[1] if " " in line else "")):
                    read(inc, depth + 1)
            elif line.startswith("/"):
                out.append(line)
    read("/etc/ld.so.conf")
    return out


def _resolve(path: str, links: dict[str, str]) -> str | None:
    """The real path of `path` (None where it does not exist), noting each symlink met on the
    way, which the view recreates so that the path works as written (a venv's `.venv` link,
    /lib -> usr/lib)."""
    path = os.path.abspath(path)
    for _ in range(40):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            head = "/" + "/".join(parts[:i])
            if os.path.islink(head):
                target = os.readlink(head)
                links[head] = target
                path = os.path.normpath(os.path.join(os.path.dirname(head), target, *parts[i:]))
                break
        else:
            return path if os.path.exists(path) else None
    return None


def _outermost(paths: list[str]) -> tuple[str, ...]:
    """Each path once, leaving out those inside another."""
    out: list[str] = []
    for p in sorted(set(paths)):
        if not any(_under(p, o) for o in out):
            out.append(p)
    return tuple(out)


def available() -> str:
    """Why `enter` cannot work on this machine, or "" (tried for real by isolate.available)."""
    if PIVOT_ROOT is None:
        return f"pivot_root's number on {platform.machine()} is not known here"
    if not sys.platform.startswith("linux"):
        return "not Linux"
    return ""


def enter(view: View, writable: list[str], private: list[str], tmp_data: str) -> str:
    """Make `view` this process's root (in a mount namespace of its own, / already private).
    `writable`: folders bound read-write (scratch, exchange), `private`: the world-writable
    folders that become one tmpfs mounted with `tmp_data`. Returns how /proc was made."""
    why = available()
    if why:
        raise OSError(why)
    cwd = os.getcwd()
    plan: list[tuple[str, str]] = []          # (path, kind): ro, rw, dev, or alias (of the private tmp)
    plan += [(p, "ro") for p in view.read_only]
    plan += [(p, "dev") for p in view.devices]
    plan += [(p, "rw") for p in writable]
    plan += [(p, "alias") for p in private[1:]]
    if "/dev/shm" not in private and os.path.isdir("/dev/shm"):
        plan.append(("/dev/shm", "rw"))
    fds: dict[str, int] = {}
    try:
        for path, kind in plan:
            if kind != "alias" and path not in fds:
                fds[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        base = private[0] if private else "/tmp"
        _mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096")
        new = lambda p: base + p                                           # noqa: E731
        _dir(new("/dev"))
        _mount("tmpfs", new("/dev"), "tmpfs", MS_NOSUID, "mode=0755,size=64k,nr_inodes=1024")
        for link, target in DEV_LINKS.items():
            _symlink(new(link), target)
        if private:               # first: the folders handed to the worker may lie inside it
            _dir(new(private[0]))
            _mount("tmpfs", new(private[0]), "tmpfs", MS_NOSUID | MS_NODEV, tmp_data)
        for path, kind in sorted(plan, key=lambda pk: pk[0]):
            target = new(path)
            if kind == "alias":
                _dir(target)
                _mount(new(private[0]), target, None, MS_BIND)
                continue
            _dir(target) if stat.S_ISDIR(os.fstat(fds[path]).st_mode) else _file(target)
            _mount(f"/proc/self/fd/{fds[path]}", target, None, MS_BIND | MS_REC)
            if kind == "ro":
                kept = os.statvfs(target).f_flag & KEPT_FLAGS
                _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | kept)
        for link, target in view.links:    # last: some lie in the private tmp, others exist already
            _symlink(new(link), target)
        proc = _proc(new("/proc"), view.proc_options)
        os.chdir(base)
        _check(_libc.syscall(ctypes.c_long(PIVOT_ROOT), b".", b"."), "pivot_root")
        _check(_libc.umount2(b".", MNT_DETACH), "umount the old root")
    finally:
        for fd in fds.values():
            os.close(fd)
    os.chdir("/")
    for top in ("/dev", "/"):
        _mount(None, top, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | (MS_NODEV if top == "/" else 0))
    try:
        os.chdir(cwd)
    except OSError:
        pass                     # a cwd outside the view stays "/", never the old root
    return proc


def _proc(target: str, options: str | None) -> str:
    """A /proc of our own, which hides other users' processes, where we may mount one (as root);
    else the machine's, bound."""
    _dir(target)
    try:
        if options is None:
            raise OSError("not asked for")
        _mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, options)
        return "own, other users' processes hidden"
    except OSError:
        fd = os.open("/proc", os.O_PATH | os.O_CLOEXEC)
        try:
            _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        finally:
            os.close(fd)
        return "the machine's"


def _dir(path: str) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)


def _file(path: str) -> None:
    _dir(os.path.dirname(path))
    if not os.path.lexists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))


def _symlink(path: str, target: str) -> None:
    if not os.path.lexists(path):
        _dir(os.path.dirname(path))
        os.symlink(target, path)
