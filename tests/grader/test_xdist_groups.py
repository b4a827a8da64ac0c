"""`make test` runs the suite on both cores (pytest-xdist, --dist loadgroup) and relies on
xdist_group to keep tests that share something machine-wide (the one Slurm cluster, the one
PostgreSQL server, a class graded once for a module) on one worker, one after another. Under
pytest 9.2 xdist 3.8's grouping silently does nothing (it renames a node through an attribute
pytest no longer reads): this fails if the pinned pair ever drifts into that again."""
import os
import subprocess
import sys

GROUPED = '''
import os
import pytest

@pytest.mark.parametrize("i", range(4))
@pytest.mark.xdist_group("one")
def test_grouped(i):
    with open(os.environ["WORKERS_FILE"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
'''


def test_tests_of_one_xdist_group_run_on_one_worker(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
                          "-p", "no:cacheprovider", "test_grouped.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "WORKERS_FILE": str(tmp_path / "workers")})
    assert run.returncode == 0, run.stdout + run.stderr
    workers = (tmp_path / "workers").read_text().split()
    assert len(workers) == 4 and len(set(workers)) == 1, \
        f"the four tests of one xdist_group ran on workers {workers}: --dist loadgroup is not grouping"
