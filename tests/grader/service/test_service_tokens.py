"""Tokens as students type them: `--token T` on the client's command line, so no token may start
with "-", which argparse reads as an option (one token in 64 did, before). And `tokens` on a
machine without the service's packages: a sentence, not a traceback."""
import subprocess
import sys
from pathlib import Path

from grader.service import tokens
from grader.service.store import Store


def test_no_token_starts_with_a_dash(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'course.db'}")
    try:
        made = [tokens.issue(store, f"st{i}") for i in range(600)]   # (63/64)**600: one would, 1 in 12,000 not
    finally:
        store.close()
    assert len(set(made)) == len(made)
    assert not [t for t in made if t.startswith("-")]


def test_an_instructor_command_without_its_packages_says_which_to_install(tmp_path):
    """A machine set up for students (no SQLAlchemy) running `tokens`: one line naming the package
    and the requirements file, exit 2, no traceback."""
    course = tmp_path / "course"
    course.mkdir()
    code = ("import sys; sys.modules['sqlalchemy'] = None; from grader.cli import main; "
            f"sys.exit(main(['tokens', '--course', {str(course)!r}, '--add', 'st1']))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[3])
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert "'sqlalchemy'" in run.stderr and "requirements/instructor.txt" in run.stderr, run.stderr
