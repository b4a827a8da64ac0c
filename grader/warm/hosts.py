"""Warm grading: a host per grading slot that keeps a test process up across the gradings
of a class, so that torch, CUDA and the reference's worker start once per slot instead of
once per submission.

Only the hidden suites' pytest session moves: `python -m grader grade` still checks the
file, scores what comes back and writes the report (grader/grading/grade_one.py), and hands the session
to the host named in its environment (HOST_ENV) instead of starting a pytest process. Every
submission still gets a fresh sandboxed worker; what the host keeps between gradings is its
own imports and the trusted reference's worker (grader/grading/warm_host.py). A grading that finds
no host, or a host that will not take it, runs its session cold, as `grade` alone does.

Messages are JSON lines on a Unix socket in a folder only the grader's user can open:
the grading sends {"spec": path} (its session's spec, grader/grading/session.py), the host answers
{"accepted": n} or {"refused": why}, then {"out": text} as pytest writes, then {"exit": code}.
A grading that goes away mid-run
(killed, timed out, interrupted) closes the socket, and the host then ends itself and its
workers: nothing of an unfinished session is left for the next grading to meet.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .. import bytecode
from ..assignment import REPO, grader_env
from ..sandbox.processes import signal_group

HOST_ENV = "GRADER_WARM_HOST"
START_S = 60            # a host binds its socket before importing anything heavy; this long at most
SESSION_CUT = -9        # a session that ended without its exit: timed out, or the host ended
ENDED_S = 15            # a cut session's host kills its workers and exits within this (a host has no more to do)


class HostProcess:
    """One slot's host, started on first use and again whenever it has ended."""

    def __init__(self, assignment_folder: Path, device: str, slot_env: dict[str, str], spare: bool | None = None):
        """`spare`: start each grading's worker ahead (default: on a GPU, where the worker's start
        includes a CUDA context and the cores are plenty; on a 2-core machine it competed with the
        grading before it and `validate --fast` took 88-90 s against 78 s without)."""
        self.assignment_folder = Path(assignment_folder).resolve()
        self.device = device
        self.spare = device == "cuda" if spare is None else spare
        self.slot_env = dict(slot_env)
        self.proc: subprocess.Popen | None = None
        self.folder: Path | None = None      # ours alone (0700): the socket and the host's log
        self.work: Path | None = None        # the reference worker's folders (0711, as a grading's, leftovers.grading_roots)
        self.exchange: Path | None = None
        self.starts = 0

    @property
    def socket_path(self) -> Path:
        return self.folder / "host.sock"

    def env(self) -> dict[str, str]:
        """The environment entry that sends a grading's session to this host."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        return {HOST_ENV: str(self.socket_path)}

    def _start(self) -> None:
        from . import leftovers
        from ..sandbox.proxy import shared_tensor_root
        self.close()
        # Marked with this process's identity, so that a later run removes them if we die
        # without closing (grader/warm/leftovers.py).
        self.folder, self.work, self.exchange = leftovers.host_folders(shared_tensor_root())
        env = test_process_env({**os.environ, **self.slot_env})
        cmd = [sys.executable, "-m", "grader.grading.warm_host", "--socket", str(self.socket_path),
               "--assignment", str(self.assignment_folder), "--device", self.device,
               "--scratch", str(self.work), "--exchange", str(self.exchange)] + (["--spare"] if self.spare else [])
        with open(self.folder / "host.log", "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        leftovers.write_owner(self.folder, host=self.proc.pid)
        self.starts += 1
        deadline = time.monotonic() + START_S
        while not self.socket_path.exists() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return (self.folder / "host.log").read_text(errors="replace")[-limit:]
        except (OSError, TypeError):
            return ""

    def close(self) -> None:
        """End the host (it ends its workers: SIGTERM first, then the group is killed)."""
        if self.proc is not None and self.proc.poll() is None:
            signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        for folder in (self.folder, self.work, self.exchange):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        self.folder = self.work = self.exchange = None


def test_process_env(base=None) -> dict[str, str]:
    """The environment a grading's test process starts in, cold (grader/grading/grade_one.py) or as a host:
    the grader importable, and nothing of the caller's that changes how the hidden suites run.
    pytest's own variables go (PYTEST_ADDOPTS="-k ..." deselected tests, which then scored
    nothing), and so do warnings made errors, Triton's interpreter switch (this process runs no
    kernel) and a host's address (a host serves sessions; it does not send them on). No pytest
    plugin of the machine's loads: the session names its own (session_spec.PLUGINS; a caller's
    PYTEST_DISABLE_PLUGIN_AUTOLOAD once left the report plugin out and the grading at 0). Where
    torch has no bytecode of its own, the grader's folder of it is named (grader/bytecode.py)."""
    env = grader_env(base)
    for name in list(env):
        if name.startswith("PYTEST_") or name in ("PYTHONWARNINGS", "PYTHONINSPECT", "TRITON_INTERPRET", HOST_ENV):
            del env[name]
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"     # the session names its plugins (session_spec.PLUGINS)
    return bytecode.environment(env)


def run_session(address: str, spec: Path, quiet: bool, timeout_s: float,
                tail: list[str], host: dict | None = None) -> tuple[int, dict] | None:
    """Run the session of `spec` (grader/grading/session.py) in the host at `address`: (exit code, what the host says of
    itself), or None when it did not take the session (the caller runs it cold). The output's
    last lines go into `tail`, and what the host says of itself into `host`, which hold them
    even when an exception (a signal) ends the wait."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
        sock.sendall((json.dumps({"spec": str(spec)}) + "\n").encode())
        lines = sock.makefile("r", encoding="utf-8", errors="replace")
        first = _message(lines.readline())
    except OSError:
        first = {}
    if "accepted" not in first:
        sock.close()
        return None
    host = {} if host is None else host
    host.update(warm=True, session=first["accepted"], host_pid=first.get("pid"))
    if isinstance(first.get("host_start"), dict):       # the slot's first grading: where the host's start went
        host["host_start"] = {k: v for k, v in first["host_start"].items() if isinstance(v, (int, float))}
    if isinstance(first.get("pid"), int):
        from .leftovers import identity
        host["host_identity"] = identity(first["pid"])
    code = None
    # A silent hang never yields a line, so the limit is a timer; shutting the socket down
    # ends the read here and the session in the host.
    watchdog = threading.Timer(timeout_s, _shut, args=(sock,))
    watchdog.daemon = True
    watchdog.start()
    try:
        for line in lines:
            msg = _message(line)
            if "exit" in msg:
                code = msg["exit"]
                host["spare_worker"] = msg.get("spare") is True
                break
            text = str(msg.get("out", ""))
            tail.append(text)
            del tail[:-200]
            if not quiet:
                sys.stdout.write(text)
                sys.stdout.flush()
        if not isinstance(code, int):
            tail.append(f"stopped after {timeout_s:g} s\n" if not watchdog.is_alive()
                        else "the grading host ended during the run\n")
            code = SESSION_CUT
    finally:
        watchdog.cancel()
        sock.close()
    return code, host


def wait_session_ended(host: dict, timeout_s: float = ENDED_S) -> bool:
    """After a session cut short (a timeout, a signal, the host's end): wait until the host
    that ran it is gone. Cut, the host kills the session's workers and exits (warm_host._watch);
    until then a worker may still write in the grading's folders, and removing them at once
    raced it: the folder of a worker still writing survived its removal."""
    from .leftovers import is_alive
    ident = host.get("host_identity")
    deadline = time.monotonic() + timeout_s
    while ident and is_alive(ident) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not (ident and is_alive(ident))


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _message(line: str) -> dict:
    try:
        msg = json.loads(line)
    except ValueError:
        return {}
    return msg if isinstance(msg, dict) else {}
