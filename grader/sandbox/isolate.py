"""Namespaces for a worker: no network, and private scratch space that dies with it.

Entered between fork and exec (`enter`, called from Confinement.preexec), so the
worker and everything it starts live in:
  * a network namespace of their own, with only a loopback interface: nothing
    outside the worker can be reached, the grader's processes included (the worker
    talks to the grader over a socketpair, an fd, which needs no address);
  * an IPC namespace of their own: System V shared memory and POSIX message queues
    are private and freed with it;
  * a mount namespace in which every world-writable folder (/tmp, /var/tmp,
    /dev/shm, /run/lock) is one size-capped tmpfs, so what the worker writes there
    counts against that cap, not against the machine's RAM or disk, and vanishes
    when the last process of the namespace is killed, whatever became of the grader.
    The folders the grader hands the worker (its scratch folder, the exchange of
    shared tensors, the Python installation) are bound back in at their own paths.
    Given a `rootfs.View`, the namespace's whole file system is that allow-list instead
    (rootfs.py), with the same private /tmp in it.

As root this needs nothing more. Otherwise the worker first enters a user namespace
of its own, where it keeps its uid and gains, until it execs, the right to set up the
others (unprivileged user namespaces: most Linux machines allow them, some containers
do not); after exec, under a uid other than 0, it has no capability left to undo them.
`available` asks once, in a child, whether this machine lets us; where it does not,
the report says so.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import sys

from . import rootfs

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")   # where anyone may create files
PRIVATE_TMP_BYTES = 256 << 20
PRIVATE_TMP_INODES = 16384

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                       ctypes.c_ulong(flags), data.encode() if data else None), f"mount {target}")


def _loopback_up() -> None:
    """A fresh network namespace has `lo`, down; up, the worker can talk to itself, no further."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))


def _under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


def covered() -> list[str]:
    """The world-writable folders present here, each once (some are links to others)."""
    seen, out = set(), []
    for folder in WRITABLE:
        real = os.path.realpath(folder)
        if os.path.isdir(real) and real not in seen:
            seen.add(real)
            out.append(real)
    return out


def enter(keep: list[str], shm: bool = True, tmp_bytes: int = PRIVATE_TMP_BYTES,
          view: rootfs.View | None = None) -> str:
    """Move this (single-threaded, freshly forked) process into the namespaces above.
    `keep`: folders under a covered one that must stay visible as they are (with a `view`:
    the folders the worker may write, wherever they are). `shm`: whether /dev/shm and
    System V IPC become private too. Returns how the view's /proc was made ("" without one)."""
    uid, gid = os.getuid(), os.getgid()
    user = CLONE_NEWUSER if os.geteuid() != 0 else 0
    _check(_libc.unshare(user | CLONE_NEWNS | CLONE_NEWNET | (CLONE_NEWIPC if shm else 0)), "unshare")
    if user:                                                # the same ids inside as outside
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    _loopback_up()
    _mount("none", "/", None, MS_REC | MS_PRIVATE)          # nothing we mount reaches the host
    folders = [f for f in covered() if shm or f != "/dev/shm"]
    data = f"size={tmp_bytes},nr_inodes={PRIVATE_TMP_INODES},mode=1777"
    if view is not None:
        return rootfs.enter(view, sorted({os.path.realpath(k) for k in keep}), folders, data)
    keep = sorted({os.path.realpath(k) for k in keep if _under(os.path.realpath(k), folders)})
    # Opened in this namespace before they are covered: a bind from the fd finds them again.
    handles = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep if os.path.isdir(path)]
    first, *rest = folders
    _mount("tmpfs", first, "tmpfs", MS_NOSUID | MS_NODEV, data)
    for folder in rest:
        _mount(first, folder, None, MS_BIND)
    for path, fd in handles:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND)
        os.close(fd)
    return ""


def available(keep: list[str] = (), view: rootfs.View | None = None, shm: bool = True) -> tuple[bool, str]:
    """Whether `enter` works here, tried in a forked child: (True, what enter returned) or
    (False, why not). With a `view` the child then starts this interpreter inside it, so a
    view that leaves out what Python needs fails here, not in every worker."""
    if not hasattr(os, "O_PATH"):
        return False, "this system has no O_PATH (not Linux)"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                            # the child: try, say why not, leave
        os.close(read)
        code = 0
        try:
            said = enter(list(keep), shm=shm, view=view)
            if view is not None:
                os.write(write, b"ok " + said.encode() + b"\n")
                for fd in (1, 2):                           # what Python says, if it fails, is why
                    os.dup2(write, fd)
                os.execv(sys.executable, [sys.executable, "-s", "-c", "import json, ssl, ctypes"])
        except BaseException as exc:                        # noqa: BLE001 - reported to the parent
            os.write(write, str(exc).encode()[:500])
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        said = f.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    ok = os.waitstatus_to_exitcode(status) == 0
    first, _, rest = said.partition("\n")
    if ok:
        return True, first.removeprefix("ok ")
    if first.startswith("ok "):
        last = (rest.strip().splitlines() or [f"status {os.waitstatus_to_exitcode(status)}"])[-1]
        return False, f"Python does not start inside it ({last[:300]})"
    return False, said or f"the test child ended with status {status}"
