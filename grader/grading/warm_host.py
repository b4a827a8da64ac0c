"""A grading slot's host (see grader/warm/hosts.py): one process that imports torch and pytest and
opens the GPU once, then runs one grading's pytest session after another, each from its
spec exactly as the cold `python -m grader.grading.session SPEC` would (grader/grading/session.py).

Between sessions it keeps only what is the same for every submission: its imports, its CUDA
context and the reference's sandboxed worker (workers.HostWorkers). A submission's worker,
its uid, its folders and every process it left are gone before the next session starts, and
the host ends itself rather than go on after anything it cannot vouch for: a grading that
went away mid-session, a GPU that no longer answers, or MAX_SESSIONS served.

    python -m grader.grading.warm_host --socket PATH --assignment DIR --device cpu|cuda --scratch DIR --exchange DIR [--spare]
"""
from __future__ import annotations

import argparse
import faulthandler
import gc
import io
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

MAX_SESSIONS = 200      # bounds whatever a long life might gather (Python's and CUDA's caches)
IDLE_S = 900            # no grading for this long: the batch that wanted us is gone


class _Stream(io.TextIOBase):
    """pytest's terminal, sent to the grading as {"out": text} lines."""

    def __init__(self, conn: socket.socket):
        self.conn = conn

    def write(self, text: str) -> int:
        try:
            self.conn.sendall((json.dumps({"out": text}) + "\n").encode())
        except OSError:
            pass        # the grading is gone; the watcher ends this process
        return len(text)

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return "utf-8"


def _send(conn: socket.socket, message: dict) -> None:
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
    except OSError:
        pass


class Host:
    def __init__(self, args):
        self.assignment = str(Path(args.assignment).resolve())
        self.device = args.device
        self.sessions = 0
        self.roots: dict[str, Path] = {}
        self.spare = args.spare
        self.workers = None         # workers.HostWorkers, once started
        self.started: dict[str, float] = {}     # where the host's start went, told its first grading

    def start(self, roots: dict[str, Path]) -> None:
        from ..warm.leftovers import age_s
        from ..sandbox.processes import become_subreaper
        marks = _Marks(self.started, before_start_s=age_s(os.getpid()) or 0.0)
        become_subreaper()      # what a worker leaves behind is re-parented here, and swept
        from .workers import HostWorkers
        self.roots = roots
        self.workers = HostWorkers(roots, spare=self.spare)
        if self.spare:          # first: their imports overlap ours
            from ..assignment import Assignment
            self.workers.ahead(Assignment.load(self.assignment), self.device)
        marks("workers_ahead_s")
        from .. import bytecode         # their bytecode kept where torch has none (grader/bytecode.py)
        bytecode.imported("pytest")
        marks("pytest_s")
        torch = bytecode.imported("torch")
        marks("torch_s")

        from . import pytest_plugin  # noqa: F401  (imported here once, not in each session)
        marks("plugin_s")
        if self.device == "cuda":
            torch.empty(1, device="cuda")
            marks("cuda_s")

    def refusal(self, spec) -> str | None:
        """Why this host will not run this session, or None."""
        if str(Path(spec.assignment).resolve()) != self.assignment:
            return f"this host grades {self.assignment} only"
        if spec.device != self.device:
            return f"this host grades on {self.device} only"
        if spec.collect_only:
            return "collection runs cold"
        return None

    def serve(self, conn: socket.socket) -> None:
        from .session_spec import SessionSpec, SpecError
        try:
            request = json.loads(conn.makefile("r").readline() or "{}")
            spec = SessionSpec.read(request["spec"]) if isinstance(request, dict) and isinstance(
                request.get("spec"), str) else None
            why = self.refusal(spec) if spec is not None else "no session spec"
        except (ValueError, SpecError) as exc:
            why = str(exc) or "not a JSON request"
        if why:
            _send(conn, {"refused": why})
            return
        self.sessions += 1
        _send(conn, {"accepted": self.sessions, "pid": os.getpid(),
                     **({"host_start": self.started} if self.sessions == 1 else {})})
        done = threading.Event()
        threading.Thread(target=_watch, args=(conn, done), daemon=True).start()
        code = self._session(spec, _Stream(conn))
        self._tidy()
        done.set()
        _send(conn, {"exit": code, "spare": self.workers.spare_used})

    def _session(self, spec, out: _Stream) -> int:
        from . import session
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = out
        try:
            return session.run(spec, self.workers)
        except BaseException as exc:        # the session's own failure: the grading reports it
            out.write(f"the grading host's session failed: {type(exc).__name__}: {exc}\n")
            return 3
        finally:
            sys.stdout, sys.stderr = saved

    def _tidy(self) -> None:
        """What a session leaves is gone before the next: orphans of its workers (the plugin
        has stopped the workers and given back their uids), its tensors, its garbage."""
        from ..sandbox.proxy import sweep_orphans
        sweep_orphans()
        gc.collect()
        if self.device == "cuda":
            import torch
            torch.cuda.empty_cache()

    def healthy(self) -> bool:
        if self.sessions >= MAX_SESSIONS:
            return False
        if self.device != "cuda":
            return True
        import torch
        try:
            x = torch.ones(1024, device="cuda")
            return float(x.sum()) == 1024.0
        except Exception:       # a sticky CUDA error: this context serves no more gradings
            return False

    def close(self) -> None:
        import shutil

        if threading.current_thread() is threading.main_thread():     # the parent's watcher may call us
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        from ..sandbox.processes import kill_tree
        if self.workers is not None:
            self.workers.close()
        kill_tree(os.getpid())
        for folder in self.roots.values():      # their contents: the folders are the batch's
            for entry in folder.iterdir() if folder.is_dir() else ():
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)


class _Marks:
    """Seconds of each step of a start, into `into`, rounded: marks("name") closes a step."""

    def __init__(self, into: dict[str, float], **first: float):
        self.into = into
        self.into.update({k: round(v, 3) for k, v in first.items()})
        self.last = time.perf_counter()

    def __call__(self, step: str) -> None:
        now = time.perf_counter()
        self.into[step] = round(now - self.last, 3)
        self.last = now


def _watch(conn: socket.socket, done: threading.Event) -> None:
    """The grading sends nothing after its request: end of stream before the session is
    done means it went away (killed, timed out, interrupted), and so does this host, with
    its workers, rather than finish a session nobody reads."""
    try:
        while conn.recv(4096):
            pass
    except OSError:
        pass
    if not done.is_set():
        from ..sandbox.processes import kill_tree
        kill_tree(os.getpid())
        _orphaned_exit(70)


PARENT: list[str] = []            # the identity (grader/warm/leftovers.py) of the batch that started us
OWN_FOLDERS: list[str] = []       # the folders it made for us, ours to remove once it is gone


def _remove_if_orphaned() -> None:
    from ..warm.leftovers import is_alive
    if PARENT and not is_alive(PARENT[0]):
        _remove(OWN_FOLDERS)


def _orphaned_exit(code: int) -> None:
    _remove_if_orphaned()
    os._exit(code)


def _remove(folders: list[str]) -> None:
    import shutil
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _watch_parent(host: Host) -> None:
    """A batch killed outright (kill -9) cannot end us: end the session in flight, its
    workers and this host, and take the folders it made for us along, as its close() would.
    Polled by identity (pid and start time) rather than getppid alone: a subreaper may adopt
    us."""
    from ..warm.leftovers import is_alive
    while is_alive(PARENT[0]):
        time.sleep(0.5)
    host.close()
    _orphaned_exit(0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.grading.warm_host")
    p.add_argument("--socket", required=True)
    p.add_argument("--assignment", required=True)
    p.add_argument("--device", choices=["cpu", "cuda"], required=True)
    p.add_argument("--scratch", required=True, help="a folder (0711) for the reference worker's files")
    p.add_argument("--exchange", required=True, help="a folder (0711) for the reference's shared tensors")
    p.add_argument("--spare", action="store_true", help="start the next grading's worker as each grading begins")
    args = p.parse_args(argv)
    # SIGUSR1 prints every thread's stack to the host's log: a host that seems stuck can be asked.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parent = os.getppid()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        # First, so a grading can connect while we import. Bound under another name and
        # renamed once listening: the manager takes the path's existence to mean a host that
        # answers, and a connect between bind and listen is refused (the grading ran cold).
        server.bind(args.socket + ".binding")
    finally:
        os.umask(old)
    server.listen(1)
    os.rename(args.socket + ".binding", args.socket)
    server.settimeout(1.0)
    host = Host(args)
    from ..warm.leftovers import identity
    PARENT[:] = [identity(parent)]
    OWN_FOLDERS[:] = [os.path.dirname(os.path.abspath(args.socket)), args.scratch, args.exchange]
    threading.Thread(target=_watch_parent, args=(host,), daemon=True).start()

    def stop(signum, frame):          # the batch is done with us, or stopping: mid-session too
        host.close()
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C reaches the batch, which stops us
    try:
        host.start({"scratch_root": Path(args.scratch), "exchange_root": Path(args.exchange)})
        last = time.monotonic()
        while os.getppid() == parent and time.monotonic() - last < IDLE_S:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            with conn:
                host.serve(conn)
            last = time.monotonic()
            if not host.healthy():
                break
    finally:
        host.close()
    _remove_if_orphaned()
    return 0


if __name__ == "__main__":
    sys.exit(main())
