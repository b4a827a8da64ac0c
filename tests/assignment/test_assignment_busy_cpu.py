"""A busy CPU never changes a score: the reference keeps full marks beside two CPU-bound processes,
and a slowdown put on one side of slot_mapping's timed comparison (GRADER_TEST_SLOWDOWN, read by
the trusted test process only) moves no verdict: the reference and a right entry keep full marks,
every wrong entry that must fail slot_mapping still fails it."""
import json
import os
import subprocess
import sys
import time
import tomllib
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HIDDEN = REPO / "tests" / "hidden" / "l1_paged_kv_write"
SPEED_TEST = "two million tokens"
SLOT_MAPPING_WRONG = [name for name, entry in tomllib.loads((REPO / "tests/corpus/wrong.toml").read_text()).items()
                      if "slot_mapping" in entry.get("fails", []) and entry.get("device") in (None, "cpu")]


def _grader(*args, env=None, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=REPO, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def _speed_test(report: dict) -> dict:
    [test] = [t for t in report["tests"] if SPEED_TEST in t["name"].lower()]
    return test


def _lost(report: dict) -> list[str]:
    return [f"{t['name']}: {t['output'][:300]}" for t in report["tests"] if t["score"] < t["max_score"]]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_reference_keeps_full_marks_beside_two_cpu_hogs(tmp_path):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.5)
        out = _grader("grade", "--device", "cpu", "--quiet", "--report", str(tmp_path / "r.json"))
        still_running = [h.poll() is None for h in hogs]
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert still_running == [True, True]                 # they shared the machine for the whole grading
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["max_score"] > 0 and report["score"] == report["max_score"], _lost(report)
    figures = _speed_test(report)["extra_data"]["figures"]
    assert figures["ops"] <= 10 and figures["items"] == 0      # judged by its count, which load cannot move


# Each slowdown grades only the entries whose verdict it could move. A slower submission side can
# only make a file look slower, so it is tried on the files that must keep their points; a slower
# baseline can only loosen the clock's limit, so it is tried on the files that must lose theirs to
# the speed test. The other entries that fail slot_mapping lose it on its values, which no clock moves.
RIGHT = ["reference", "right/jit_call_alias"]
TOO_SLOW = ["slot_mapping_python_loop", "slot_mapping_tolist_comprehension", "slot_mapping_loop_memoised",
            "slot_mapping_row_gather"]
WRONG = [f"wrong/{name}" for name in TOO_SLOW]
SLOWDOWNS = {"submission:x5": RIGHT, "submission:stall=0.2": RIGHT, "baseline:x5": WRONG}


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("slowdown", SLOWDOWNS)
def test_a_slowed_side_of_the_timing_moves_no_verdict(slowdown, tmp_path):
    assert set(TOO_SLOW) <= set(SLOT_MAPPING_WRONG)
    only = SLOWDOWNS[slowdown]
    out = _grader("validate", "--device", "cpu", "--jobs", "2", "--only", *only, "--out", str(tmp_path / "m.json"),
                  env={"GRADER_TEST_SLOWDOWN": slowdown}, timeout=1100)
    matrix = json.loads((tmp_path / "m.json").read_text())
    rows = {f"{r['kind']}/{r['name']}" if r["kind"] != "reference" else "reference": r for r in matrix["rows"]}
    assert sorted(rows) == sorted(only), out.stdout[-2000:]
    side, _, how = slowdown.partition(":")
    amount = float(how[1:] if how.startswith("x") else how.split("=")[1])
    for name in only:
        report = json.loads((REPO / rows[name]["report"]).read_text())
        # the slowdown was in force: the test says so in its figures (a file failing before the
        # count, such as int32 slots, still records them)
        speed = _speed_test(report)
        assert speed["extra_data"]["figures"].get(f"slowdown_{side}") == amount, name
        if name in RIGHT:
            assert report["score"] == report["max_score"] > 0, (name, _lost(report))
        else:
            assert rows[name]["passed"]["slot_mapping"] is False and speed["score"] < speed["max_score"], name
    assert out.returncode == 0 and matrix["ok"], out.stdout[-3000:]


def test_a_malformed_slowdown_is_an_error_not_a_slowdown(monkeypatch):
    sys.path.insert(0, str(HIDDEN))
    try:
        with warnings.catch_warnings():     # its `area` mark is registered by the grader's plugin only
            warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
            import test_slot_mapping as suite
    finally:
        sys.path.remove(str(HIDDEN))
    monkeypatch.setenv(suite.SLOWDOWN_ENV, "submission:x5, baseline:stall=0.2")
    assert suite._slowdown() == {"submission": ("x", 5.0), "baseline": ("stall", 0.2)}
    for bad in ("submission:5", "worker:x5", "baseline:stall=-1", "submission:xfast"):
        monkeypatch.setenv(suite.SLOWDOWN_ENV, bad)
        with pytest.raises(RuntimeError, match="expected side:xFACTOR"):
            suite._slowdown()
    monkeypatch.delenv(suite.SLOWDOWN_ENV)
    assert suite._slowdown() == {}
