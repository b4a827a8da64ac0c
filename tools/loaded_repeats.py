"""Run the tests that grade for real again and again beside CPU hogs, to find what a busy
machine makes flaky (a flake is fixed at its cause, never retried away).

    python tools/loaded_repeats.py [--reps 20] [--hogs 2] [--stop-after S] [--out build/loaded] [-- PYTEST ARGS]

Each repetition is one pytest run (default: the slow tests that may share the machine, on both
cores, as `make test` runs them) with its own JUnit file under --out. The hogs are plain Python
busy loops started here and killed at the end, however the run ends. --stop-after starts no new
repetition after that many seconds; Ctrl-C ends the run there, the repetition under way not
counted. Prints one line per repetition and, at the end, every test that failed with the
repetitions it failed in; exit 1 when any did.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PYTEST = ["tests/grader", "tests/assignment", "-q", "-n", "2", "--dist", "loadgroup",
                  "-m", "slow and not serial", "-p", "no:cacheprovider"]


def failures(junit: Path) -> list[str]:
    """The ids of the tests that failed or errored in a JUnit file (every test, if it is missing)."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return ["<the run left no JUnit report>"]
    bad = []
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            bad.append(f"{case.get('classname')}::{case.get('name')}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--stop-after", type=float, default=None, help="start no repetition after this many seconds")
    ap.add_argument("--out", default="build/loaded")
    ap.add_argument("pytest_args", nargs="*", help="after --: what pytest runs (default: the slow tests)")
    args = ap.parse_args()
    out = REPO / args.out
    out.mkdir(parents=True, exist_ok=True)
    # in sessions of their own: a Ctrl-C is for the run, and the hogs are ended below
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(args.hogs)]
    failed: dict[str, list[int]] = {}
    t0 = time.monotonic()
    done = 0
    interrupted = False
    try:
        for rep in range(1, args.reps + 1):
            if args.stop_after is not None and time.monotonic() - t0 > args.stop_after:
                print(f"stopped after {done} repetitions: --stop-after {args.stop_after:g} s passed", flush=True)
                break
            junit = out / f"rep-{rep:02d}.xml"
            t = time.monotonic()
            run = subprocess.run([sys.executable, "-m", "pytest", *(args.pytest_args or DEFAULT_PYTEST),
                                  f"--junitxml={junit}"], cwd=REPO, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            (out / f"rep-{rep:02d}.log").write_text(run.stdout)
            bad = failures(junit) if run.returncode else []
            for test in bad:
                failed.setdefault(test, []).append(rep)
            done += 1
            last = (run.stdout.strip().splitlines() or [""])[-1]
            print(f"rep {rep}: exit {run.returncode} in {time.monotonic() - t:.0f} s: {last}", flush=True)
    except KeyboardInterrupt:       # the repetition under way is not counted
        interrupted = True
        print(f"interrupted during repetition {done + 1}", flush=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"{done} repetitions beside {args.hogs} CPU hogs in {time.monotonic() - t0:.0f} s; "
          f"{len(failed)} tests failed at least once")
    for test, reps in sorted(failed.items()):
        print(f"  {test}: repetitions {', '.join(map(str, reps))}")
    return 130 if interrupted else 1 if failed or done == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
