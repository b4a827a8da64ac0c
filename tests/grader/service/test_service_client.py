"""The student's whole loop, as a new student runs it: the release bundle's `make check` and
`make submit` against a real `python -m grader serve` of L1 on loopback, with the token the
instructor handed out in the bundle's `.grader` file."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from grader.assignment import REPO, Assignment
from service_server import start, tokens

L1 = Assignment.find(None)

pytestmark = pytest.mark.timeout(600)


def _make(bundle, target: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GRADER_SERVER", "GRADER_TOKEN")}
    return subprocess.run(["make", "-s", target, f"PYTHON={sys.executable}"], cwd=bundle, env=env,
                          capture_output=True, text=True, timeout=540)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_a_student_checks_and_hands_in_from_the_release_bundle(tmp_path):
    out = subprocess.run([sys.executable, "tools/make_release.py", "--assignment", str(L1.folder), "--out",
                          str(tmp_path / "release")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    bundle = tmp_path / "release" / L1.id
    course = tmp_path / "course"
    course.mkdir()
    token = tokens(course, "--add", "alice")["alice"]
    server = start(course, assignment=L1.folder)
    try:
        (bundle / ".grader").write_text(f"server = {server.url}\ntoken = {token}\n")
        shutil.copy(L1.reference, bundle / L1.submission)      # the student's finished file

        check = _make(bundle, "check")
        assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
        score = check.stdout.strip().splitlines()[-1]
        assert score == "score: 85 / 85", check.stdout[-3000:]
        assert not (course / "submitted" / "alice").exists(), "a check is not a hand-in"

        hand_in = _make(bundle, "submit")
        assert hand_in.returncode == 0, hand_in.stdout[-3000:] + hand_in.stderr[-3000:]
        assert hand_in.stdout.strip().splitlines()[-1] == "score: 85 / 85"
        filed = course / "submitted" / "alice" / L1.id
        assert (filed / L1.submission).read_bytes() == L1.reference.read_bytes()
        assert (filed / "timestamp.txt").read_text().strip()

        (bundle / ".grader").write_text(f"server = {server.url}\ntoken = {token}x\n")
        refused = _make(bundle, "check")
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert "token" in refused.stderr.lower(), refused.stderr
    finally:
        server.stop()
