"""Public-suite runs forked from one process that has already imported what every run imports.

A student's `pytest tests/public` spends about 4 s of its 5 s starting: torch, triton, the
torch._dynamo that the suite's conftest loads to keep torch.compile eager, pytest's plugins. The
corpus sweep runs the public suite once per corpus entry, some fifty times a CI run. Here each run
is a fork of a server that imported those modules once, so it starts at pytest's own start: the
same modules, the same suite, the same command line, in a child with its own working directory,
environment, stdout and stderr.

The server touches no device and runs no test, so a child starts as clean as a fresh interpreter
would after those imports. What the student's own start decides (the first line printed, a
missing numpy, a process that dies) is tested with run_pytest's fresh interpreter instead.

    server:  python pytest_forks.py          (one JSON request per line on stdin)
    client:  PytestForks().run(args, cwd=..., env=..., timeout=...)
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# What a public-suite run imports before its first test, imported once by the server.
PRELOAD = ("numpy", "torch", "torch._dynamo", "triton", "triton.language", "pytest", "_pytest.junitxml")


def _preload() -> None:
    import importlib
    import importlib.metadata
    for name in PRELOAD:
        importlib.import_module(name)
    for plugin in importlib.metadata.entry_points(group="pytest11"):
        try:
            importlib.import_module(plugin.value.split(":")[0])
        except Exception:  # noqa: BLE001  a plugin that cannot load here fails the run as it would anyway
            pass


def _child(request: dict) -> None:
    """In the forked child: become the run the request describes, and exit with pytest's code."""
    os.setpgid(0, 0)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.path[0] = request["cwd"]                       # as `python -m pytest` started there
    sys.argv = ["pytest", *request["args"]]
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["out"], os.O_WRONLY | os.O_TRUNC)
    err = os.open(request["err"], os.O_WRONLY | os.O_TRUNC)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    code = 1
    try:
        import pytest
        code = int(pytest.main(request["args"]))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    _preload()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        try:
            _, status = _wait(pid, request["timeout"])
            reply = {"rc": os.waitstatus_to_exitcode(status)}
        except TimeoutError:
            reply = {"timeout": True}
        print(json.dumps(reply), flush=True)


def _wait(pid: int, timeout: float) -> tuple[int, int]:
    """waitpid within `timeout` seconds; past it the child's process group is killed."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return done, status
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TimeoutError
        time.sleep(0.02)


class PytestForks:
    """The client: one server process, started on first use, ended by close()."""

    def __init__(self) -> None:
        self._server: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True)
            ready = self._server.stdout.readline()
            if not ready:
                raise RuntimeError("the pytest fork server died before it was ready")
        return self._server

    def run(self, args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        server = self._start()
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            out.touch()
            err.touch()
            server.stdin.write(json.dumps({"args": list(args), "cwd": str(cwd), "env": env, "out": str(out),
                                           "err": str(err), "timeout": timeout}) + "\n")
            server.stdin.flush()
            reply = json.loads(server.stdout.readline())
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        if reply.get("timeout"):
            raise subprocess.TimeoutExpired(["pytest", *args], timeout, stdout, stderr)
        return subprocess.CompletedProcess(["pytest", *args], reply["rc"], stdout, stderr)

    def close(self) -> None:
        if self._server is not None:
            self._server.stdin.close()
            self._server.wait(timeout=30)


if __name__ == "__main__":
    serve()
