"""The grader's bytecode folder (grader/bytecode.py): used only where it is the grader's alone,
written only with third-party packages, never with the grader's or an assignment's code."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grader import bytecode

REPO = Path(__file__).resolve().parents[2]
TOY = REPO / "tests" / "grader" / "toy"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    path = tmp_path / "grader-bytecode"
    monkeypatch.setattr(bytecode, "folder", lambda: path)
    return path


def test_off_means_no_folder_and_on_makes_one_for_this_user_alone(folder, monkeypatch):
    monkeypatch.setenv(bytecode.SWITCH, "off")
    assert bytecode.chosen() is None and not folder.exists()
    env = bytecode.environment({"PYTHONPYCACHEPREFIX": "/elsewhere"})
    assert "PYTHONPYCACHEPREFIX" not in env, "a prefix the caller set must not reach the grader's processes"
    monkeypatch.setenv(bytecode.SWITCH, "on")
    assert bytecode.chosen() == folder
    assert folder.stat().st_mode & 0o777 == 0o755
    env = bytecode.environment({})
    assert env["PYTHONPYCACHEPREFIX"] == str(folder) and env["PYTHONDONTWRITEBYTECODE"] == "1"


@pytest.mark.parametrize("how", ["others may write it", "a link"])
def test_a_folder_someone_else_could_write_is_not_used(folder, monkeypatch, tmp_path, how):
    """Whoever can write the folder runs code in the next grading: such a folder is left alone."""
    monkeypatch.setenv(bytecode.SWITCH, "on")
    if how == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o755)
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.mkdir()
        folder.chmod(0o777)
    assert bytecode.chosen() is None


def test_auto_follows_whether_torch_was_installed_with_bytecode(folder, monkeypatch):
    monkeypatch.setenv(bytecode.SWITCH, "auto")
    assert (bytecode.chosen() is not None) == bytecode.installation_lacks_bytecode("torch")


def test_writing_turns_bytecode_on_only_where_the_folder_is_in_use(folder, monkeypatch):
    monkeypatch.setenv(bytecode.SWITCH, "on")
    bytecode.chosen()
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    with bytecode.writing():
        assert sys.dont_write_bytecode
    monkeypatch.setattr(sys, "pycache_prefix", str(folder))
    umask = os.umask(0o002)
    try:
        with bytecode.writing():
            assert not sys.dont_write_bytecode
            assert os.umask(0o022) == 0o022, "what is written there must not be group-writable"
        assert sys.dont_write_bytecode and os.umask(0o002) == 0o002
    finally:
        os.umask(umask)


def _graded(tmp_path: Path, env: dict) -> dict:
    src = tmp_path / "handed-in" / "toy.py"
    src.parent.mkdir()
    src.write_text((TOY / "submissions" / "good.py").read_text())
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "grader", "grade", "--assignment", str(TOY), "--submission", str(src),
                    "--report", str(report), "--device", "cpu", "--quiet"], cwd=REPO, check=True,
                   capture_output=True, timeout=300, env=env)
    graded = json.loads(report.read_text())
    assert graded["score"] > 0
    return graded


def _third_party_only(folder: Path, package: str) -> None:
    written = [p for p in folder.rglob("*.pyc")]
    assert any(f"/{package}/" in str(p) for p in written), f"nothing of {package} was written to the folder"
    ours = [p for p in written if str(REPO) in str(p) and "site-packages" not in str(p)]
    assert not ours, f"the grader's or the assignment's bytecode reached the folder: {ours[:5]}"


@pytest.mark.slow
def test_a_grading_leaves_no_bytecode_of_the_grader_or_the_hidden_tests(tmp_path):
    """A worker can read the folder: what a grading writes there is third-party code only."""
    env = {**os.environ, "TMPDIR": str(tmp_path), bytecode.SWITCH: "on"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    _graded(tmp_path, env)
    _third_party_only(tmp_path / "grader-bytecode", "_pytest")


@pytest.fixture
def short_tmp():
    """A temporary folder with a short path: the host's socket is made under it, and a socket's
    path may not pass 107 bytes (pytest's own folders under xdist do)."""
    path = Path(tempfile.mkdtemp(prefix="bc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_a_grading_host_writes_torch_and_nothing_of_ours(short_tmp, monkeypatch):
    """The same for a warm grading host (grader/grading/warm_host.py), which imports torch and
    pytest inside the window and runs its sessions after it."""
    from grader.warm.hosts import HostProcess
    tmp_path = short_tmp
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv(bytecode.SWITCH, "on")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    host = HostProcess(TOY, "cpu", {})
    try:
        graded = _graded(tmp_path, {**os.environ, **host.env()})
        assert graded["extra_data"]["instructor"]["test_process"]["warm"] is True
    finally:
        host.close()
    _third_party_only(tmp_path / "grader-bytecode", "torch")
