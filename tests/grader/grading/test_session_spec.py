"""One grading's session is one typed spec (grader/grading/session.py): the grading writes it, a cold
test process and a warm host read the same file, and what is not a spec of the expected shape
is refused in a sentence, never run. The host's cache of workers (grader/grading/workers.py) keeps the
reference from one grading to the next and nothing of a submission."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from grader.assignment import REPO
from grader.grading.session_spec import SPEC_FILE, SessionSpec, SpecError
from grader.warm.hosts import HostProcess
from grader.grading.workers import HostWorkers
from toy_class import SUBMISSIONS, TOY


def _spec(tmp_path: Path, **changes) -> SessionSpec:
    values = dict(assignment=TOY.folder, submission=SUBMISSIONS / "good.py", device="cpu", seed=7, state=tmp_path,
                  drop_privileges=False, protect=(tmp_path / "others",), scratch_root=tmp_path, exchange_root=None)
    return SessionSpec(**{**values, **changes})


def test_a_spec_reads_back_as_written(tmp_path):
    spec = _spec(tmp_path)
    path = spec.write()
    assert path == tmp_path / SPEC_FILE
    assert SessionSpec.read(path) == spec


def test_the_session_arguments_come_from_the_spec_alone(tmp_path):
    """The report goes to the spec's state folder; no caller's configuration file is read;
    a collection run is the same session with --collect-only added."""
    args = _spec(tmp_path).pytest_args(TOY.hidden_tests)
    assert args[0] == str(TOY.hidden_tests) and "-c" in args and f"--json-report-file={tmp_path}/pytest.json" in args
    assert _spec(tmp_path, collect_only=True).pytest_args(TOY.hidden_tests) == args + ["--collect-only"]


BAD_SPECS = {
    "not JSON": ("{", "cannot read"),
    "a list": ("[]", "not an object"),
    "an old-style argv": ({"argv": ["--grader-device", "cpu"]}, "has fields"),
    "a seed as text": ({"seed": "7"}, "seed is '7', not int"),
    "another device": ({"device": "tpu"}, "device is 'tpu'"),
    "uid kept by a string": ({"drop_privileges": "no"}, "drop_privileges is 'no', not bool"),
    "protect as a path": ({"protect": "/home"}, "protect is not a list"),
    "a number for a path": ({"submission": 3}, "submission is 3, not a path"),
}


@pytest.mark.parametrize("text, expected", BAD_SPECS.values(), ids=BAD_SPECS)
def test_a_bad_spec_is_refused_in_a_sentence_and_runs_nothing(tmp_path, text, expected):
    path = tmp_path / SPEC_FILE
    if isinstance(text, dict):
        good = json.loads(_spec(tmp_path).write().read_text())
        text = json.dumps({"argv": text["argv"]} if "argv" in text else {**good, **text})
    path.write_text(text)
    with pytest.raises(SpecError, match=expected.replace("(", r"\(")):
        SessionSpec.read(path)
    done = subprocess.run([sys.executable, "-m", "grader.grading.session", str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 4 and "Traceback" not in done.stderr and expected in done.stderr
    assert not (tmp_path / "collected.json").exists() and not (tmp_path / "pytest.json").exists()


def _ask(host: HostProcess, request) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)
        sock.connect(str(host.socket_path))
        sock.sendall((request if isinstance(request, str) else json.dumps(request)).encode() + b"\n")
        return json.loads(sock.makefile("r").readline())


def test_a_host_refuses_what_is_not_a_spec_it_was_made_for(tmp_path):
    """A request in the old form, a spec of another device or assignment, a collection, a
    damaged spec: each refused with its reason, and the host still serves the next."""
    host = HostProcess(TOY.folder, "cpu", {}, spare=False)
    try:
        host.env()
        (tmp_path / "a").mkdir()
        other_device = _spec(tmp_path / "a", device="cuda").write()
        (tmp_path / "b").mkdir()
        other_assignment = _spec(tmp_path / "b", assignment=REPO / "assignment/l1_paged_kv_write").write()
        (tmp_path / "c").mkdir()
        collect = _spec(tmp_path / "c", collect_only=True).write()
        damaged = tmp_path / "damaged.json"
        damaged.write_text('{"seed": 1}')
        answers = [_ask(host, r) for r in ({"argv": ["tests", "--grader-device", "cpu"]}, "not json",
                                           {"spec": str(other_device)}, {"spec": str(other_assignment)},
                                           {"spec": str(collect)}, {"spec": str(damaged)})]
        reasons = [a.get("refused") for a in answers]
        assert all(reasons), answers
        assert reasons[0] == "no session spec"
        assert "on cpu only" in reasons[2] and "grades" in reasons[3] and "collection runs cold" in reasons[4]
        assert "has fields" in reasons[5]
        assert host.proc.poll() is None
    finally:
        host.close()


class _Grading:
    """What the host's cache reads of a grading (pytest_plugin.Grading's attributes)."""

    def __init__(self, name: str, want_uid: bool = False):
        self.assignment, self.device, self.want_uid = TOY, "cpu", want_uid
        self.submission_path = Path("/nowhere") / name

    def closed_paths(self):
        return TOY.protected_paths()


@pytest.mark.slow
def test_the_host_cache_keeps_the_reference_and_hands_a_spare_only_to_its_kind(tmp_path):
    """The reference's worker is the same object for the next grading unless it was restarted;
    the spare started as one grading begins goes to a next grading of the same file name and
    uid policy, and is closed, not handed, to any other."""
    (tmp_path / "scratch").mkdir()
    workers = HostWorkers({"scratch_root": tmp_path / "scratch", "exchange_root": tmp_path / "scratch"})
    try:
        first = _Grading("toy.py")
        ref = workers.reference(first)
        workers.after(ref)
        assert workers.reference(_Grading("toy.py")) is ref
        ref.restarts = 1                        # as a crash during the grading leaves it
        workers.after(ref)
        again = workers.reference(first)
        assert again is not ref and not ref.started

        workers.began(first)
        spare = workers.others()[0]
        assert spare.started and workers.spare_for(_Grading("toy.py")) is spare and workers.spare_used
        spare.close()
        spare.conf.release()

        workers.began(first)
        other = workers.others()[0]
        assert workers.spare_for(_Grading("solution.py")) is None and not workers.spare_used
        assert not other.started and workers.others() == []
    finally:
        workers.close()
    assert not again.started


def test_a_session_loads_the_plugins_it_names_and_none_of_the_machines(tmp_path):
    """A plugin installed on the machine (pytest-timeout here; a GPU image brings hypothesis, xdist
    and more) could reorder, repeat or skip hidden tests: only the report's plugins load."""
    from grader.warm.hosts import test_process_env
    probe = ("import sys, pytest\n"
             "class Names:\n"
             "    def pytest_configure(self, config):\n"
             "        print('PLUGINS', sorted(n for n, _ in config.pluginmanager.list_name_plugin()))\n"
             "pytest.main(sys.argv[1:], plugins=[Names()])\n")
    args = _spec(tmp_path, collect_only=True).pytest_args(TOY.hidden_tests)
    run = subprocess.run([sys.executable, "-c", probe, *args], env=test_process_env(), cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    line = next(l for l in run.stdout.splitlines() if l.startswith("PLUGINS"))
    assert "pytest_jsonreport.plugin" in line and "pytest_metadata.plugin" in line, line
    assert "'timeout'" not in line and "pytest_timeout" not in line, line
    assert (tmp_path / "pytest.json").is_file()
