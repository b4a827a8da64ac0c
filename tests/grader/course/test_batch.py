"""grade-all over a generated class of the toy assignment: scores, feedback, the CSV,
nbgrader's gradebook and export, and a second run that does no work."""
import csv
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import toy_class
from grader.gpu import machines
from grader.assignment import REPO
from grader.course.batch import grade_all, publish
from grader.cli import main
from grader.course.folder import Course, gradebook_url
from grader.sandbox.processes import descendants
from toy_class import validate_report


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return toy_class.graded(tmp_path_factory)


# The tests that read `graded` run on one xdist worker: a module fixture is made once per worker,
# and grading the class is 34 s of a 2-core machine's CI.
on_the_graded_class = pytest.mark.xdist_group("test_batch_graded")


@on_the_graded_class
def test_every_student_gets_the_right_score(graded):
    rows = {r.student: r for r in graded.first.rows}
    assert len(rows) >= 40
    for student, score in graded.expected.items():
        assert rows[student].status == "graded", student
        assert rows[student].score == score, student
        validate_report(graded.course.read_report(student))
    for student, why in toy_class.MISSING.items():
        assert rows[student].status == "missing" and why in rows[student].note, student
    assert "not a Python source file" in rows["s_binary"].note
    for student, why in toy_class.REFUSED.items():
        assert why in rows[student].note, student


@on_the_graded_class
def test_a_refused_hand_in_gets_feedback_saying_why_once(graded):
    for student, why in toy_class.REFUSED.items():
        text = graded.course.feedback_path(student).read_text()
        assert text.count(why) == 1 and "All 11 tests failed for the reason above." in text, text
    # a file that does not parse: one reason, said once, not once per test
    text = graded.course.feedback_path(f"s{26 + 8:02d}").read_text()
    assert text.count("does not parse as Python") == 1, text
    # the link was not followed: s_link's report is not its classmate's
    assert graded.course.read_report("s_link")["extra_data"]["submission"]["bytes"] == 0


@on_the_graded_class
def test_the_course_folder_is_kept_out_of_the_workers_view_and_its_mode_kept(graded):
    """A worker must not read a classmate's file (or report) while it is being graded: the course
    folder is absent from its file system (the allow-list, grader/sandbox/rootfs.py), which
    test_worker_view.py proves of a world-readable folder. Its mode is the instructor's: a grading
    never changes it (it once went 0755 -> 0700)."""
    assert stat.S_IMODE(os.stat(graded.course.root).st_mode) == graded.course_mode
    report = graded.course.read_report(next(iter(graded.expected)))
    sandbox = report["extra_data"]["sandbox"]
    root = str(graded.course.root.resolve())
    assert root not in sandbox["protected_paths"]
    if sandbox["file_system"].get("view") != "allow-list":
        pytest.skip(f"no allow-list view here: {sandbox['file_system']}")
    assert root in sandbox["kept_out_paths"] and sandbox["not_kept_out_paths"] == []


@on_the_graded_class
def test_identical_files_are_graded_once(graded):
    result = graded.first
    assert result.graded == graded.distinct_files
    assert result.copied == len(graded.expected) - graded.distinct_files
    assert result.errors == 0 and result.unchanged == 0


@on_the_graded_class
def test_feedback_holds_score_areas_and_failed_hints_only(graded):
    text = graded.course.feedback_path("s26").read_text()        # the first no_echo student
    assert "60.00 / 90.00" in text
    assert "| echo | 0/5 |" in text
    assert "echo: Plain values come back unchanged**: your file has no function named 'echo'" in text
    assert "add:" not in text.split("Tests that did not pass")[1]
    report = graded.course.read_report("s26")
    for secret in [str(report["extra_data"]["instructor"]["seed"]), "extra_data", "test_toy.py", "nodeid"]:
        assert secret not in text
    for student in toy_class.MISSING:
        assert not graded.course.feedback_path(student).exists()


@on_the_graded_class
def test_grades_csv(graded):
    with open(graded.course.root / "grades-toy_add.csv") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(graded.expected) | set(toy_class.MISSING)
    for student, score in graded.expected.items():
        assert float(rows[student]["score"]) == score and rows[student]["max_score"] == "90"
        assert rows[student]["gpu_only"] == ""          # not graded on the CPU
    assert rows["s26"]["add"] == "60" and rows["s26"]["echo"] == "0"
    assert rows["s_empty"]["status"] == "missing" and rows["s_empty"]["score"] == "0"


@on_the_graded_class
def test_nbgrader_export_lists_every_student(graded):
    out = graded.course.root / "export.csv"
    nbgrader = Path(sys.executable).with_name("nbgrader")
    env = dict(os.environ, PATH=f"{nbgrader.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run([str(nbgrader), "export", "--to", str(out)], cwd=graded.course.root, env=env,
                   check=True, capture_output=True, timeout=120)
    with open(out) as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(graded.expected) | set(toy_class.MISSING)
    for student, score in graded.expected.items():
        assert float(rows[student]["score"]) == score, student
        assert rows[student]["assignment"] == "toy_add"
        assert float(rows[student]["max_score"]) == 100.0     # every area's cell, gpu_only included
    for student in toy_class.MISSING:
        assert float(rows[student]["score"]) == 0.0 and rows[student]["timestamp"] == ""


@on_the_graded_class
def test_gradebook_leaves_ungraded_areas_to_a_person(graded):
    from nbgrader.api import Gradebook
    with Gradebook(gradebook_url(graded.course.root)) as gb:
        gpu = gb.find_grade("gpu_only", "toy", "toy_add", "s00")
        add = gb.find_grade("add", "toy", "toy_add", "s00")
        assert gpu.auto_score is None and gpu.needs_manual_grade
        assert add.auto_score == 60.0 and not add.needs_manual_grade


@on_the_graded_class
def test_second_run_does_no_grading(graded, capsys):
    """Through the command line, as an instructor would run it again."""
    course = graded.course
    before = {s: course.report_path(s).stat().st_mtime_ns for s in graded.expected}
    code = main(["grade-all", "--course", str(course.root), "--assignment", str(REPO / "tests/grader/toy"),
                 "--device", "cpu", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "0 gradings run" in out and f"{len(graded.expected)} unchanged" in out
    assert "s_wrong_name: graded: your file is named solution.py: rename solution.py to toy.py" in out
    assert "s_link: graded: toy.py is a symbolic link" in out
    assert {s: course.report_path(s).stat().st_mtime_ns for s in graded.expected} == before


@on_the_graded_class
def test_a_lost_report_comes_back_from_an_identical_file(graded):
    course = graded.course
    course.report_path("s05").unlink()
    result = grade_all(course, "cpu", jobs=1, progress=False)
    assert (result.graded, result.copied) == (0, 1)
    assert course.read_report("s05")["score"] == 90.0


@pytest.mark.slow
def test_a_grading_without_a_report_is_an_error_row(tmp_path):
    student = "s1"
    folder = tmp_path / "submitted" / student / "toy_add"
    folder.mkdir(parents=True)
    shutil.copy(toy_class.SUBMISSIONS / "good.py", folder / "toy.py")
    course = Course(tmp_path, toy_class.TOY)
    result = grade_all(course, "cpu", jobs=1, timeout_s=0.5, progress=False)
    publish(course, result.rows, tmp_path / "grades.csv", gradebook_url(tmp_path))
    (row,) = result.rows
    assert row.status == "error" and row.score == 0 and "did not finish within" in row.note
    assert result.errors == 1 and not course.report_path(student).exists()
    assert not list(course.report_path(student).parent.glob(".report*"))
    assert not course.feedback_path(student).exists()
    assert "error" in (tmp_path / "grades.csv").read_text()
    from nbgrader.api import Gradebook
    with Gradebook(gradebook_url(tmp_path)) as gb:
        assert gb.find_submission("toy_add", student).score == 0.0
        assert gb.find_grade("add", "toy", "toy_add", student).needs_manual_grade


def test_one_worker_per_gpu(monkeypatch):
    monkeypatch.setattr(machines, "visible_gpus", lambda: ["2", "5", "7"])
    assert machines.default_jobs("cuda") == 3
    assert machines.slots("cuda", 3) == [{"CUDA_VISIBLE_DEVICES": g} for g in ("2", "5", "7")]
    assert machines.slots("cpu", 2) == [{}, {}]


def test_a_gpu_gets_no_more_gradings_than_its_memory_holds(monkeypatch):
    """A grading holds up to its `gpu_memory_gib` of the GPU: more gradings than the GPU's memory
    holds would run honest submissions out of memory, and out of points."""
    monkeypatch.setattr(machines, "visible_gpus", lambda: ["0", "1"])
    monkeypatch.setattr(machines, "cuda_device_memory", lambda: [140 << 30, 40 << 30])
    placed = [env["CUDA_VISIBLE_DEVICES"] for env in machines.slots("cuda", 8, 32 << 30)]
    assert placed == ["0", "1", "0", "0", "0"]            # four fit on the first GPU, one on the second
    assert len(machines.slots("cuda", 3, 32 << 30)) == 3     # fewer asked for than fit: all of them
    assert len(machines.slots("cuda", 4, 200 << 30)) == 2    # a grading larger than a GPU still gets one
    assert "grading 5 at once, not 8" in machines.SlotPool("cuda", 8, 32 << 30).note
    assert machines.SlotPool("cuda", 3, 32 << 30).note is None
    monkeypatch.setattr(machines, "cuda_device_memory", lambda: [])   # the driver did not say: as asked
    assert len(machines.slots("cuda", 8, 32 << 30)) == 8


def test_missing_course_folder_is_a_usage_error(tmp_path, capsys):
    code = main(["grade-all", "--course", str(tmp_path / "none"), "--assignment", str(REPO / "tests/grader/toy"),
                 "--device", "cpu"])
    assert code == 2 and "no submitted/ folder" in capsys.readouterr().err


@pytest.mark.parametrize("extra, says", [
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--timeout", "-5"], "--timeout must be more than 0 seconds"),
    (["--csv", "/proc/none/grades.csv"], "cannot write the CSV at /proc/none/grades.csv"),
    (["--db", "nonsense://x"], "--db nonsense://x names no database"),
])
def test_what_the_results_go_to_is_checked_before_any_grading(tmp_path, capsys, extra, says):
    """A bad option is one line and exit 2 before the first grading, not a traceback after the
    last: a class's grading takes minutes to hours."""
    good = tmp_path / "submitted" / "ann" / toy_class.TOY.id / toy_class.TOY.submission
    good.parent.mkdir(parents=True)
    good.write_bytes((toy_class.SUBMISSIONS / "good.py").read_bytes())
    code = main(["grade-all", "--course", str(tmp_path), "--assignment", str(REPO / "tests/grader/toy"),
                 "--device", "cpu", "--no-progress", *extra])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "autograded").exists(), "graded before refusing"


def test_a_gradebook_that_cannot_be_written_is_said_and_keeps_the_csv(tmp_path, capsys):
    from grader.course.batch import GradebookError
    course = Course(tmp_path, toy_class.TOY)
    with pytest.raises(GradebookError, match="could not update the gradebook .* run grade-all again"):
        publish(course, [], tmp_path / "grades.csv", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert (tmp_path / "grades.csv").is_file()


@pytest.mark.slow
def test_sigterm_stops_the_batch_keeping_no_partial_report(tmp_path):
    folder = tmp_path / "submitted" / "s1" / "toy_add"
    folder.mkdir(parents=True)
    shutil.copy(toy_class.SUBMISSIONS / "good.py", folder / "toy.py")
    # Its own temporary folder: the slot's warm host has its socket there, so that the host is
    # told from any other run's on this machine by its command line.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "grader", "grade-all", "--course", str(tmp_path),
                             "--assignment", "tests/grader/toy", "--device", "cpu", "--no-gradebook"],
                            cwd=REPO, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert _wait_for_worker(proc.pid, 120), "no submission worker started under grade-all"   # a grading is under way
    proc.terminate()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "run it again to resume" in err
    assert not list((tmp_path / "autograded").rglob("*.json*"))
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and str(tmp_path) in _cmdline(pid)]
    toy_host = "grader.grading.warm_host\0--socket"
    hosts = [pid for pid in os.listdir("/proc") if pid.isdigit() and toy_host in _cmdline(pid)
             and str(toy_class.TOY.folder) in _cmdline(pid)]
    assert not [pid for pid in hosts if str(tmp) in _cmdline(pid)], "the slot's warm host outlived the batch"


def _wait_for_worker(root: int, timeout: float) -> bool:
    """Wait until a submission worker (sandbox/worker.py for toy.py) runs under `root`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any("worker.py" in _cmdline(str(p)) and "toy.py" in _cmdline(str(p)) for p in descendants(root)):
            return True
        time.sleep(0.05)
    return False


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_feedback_keeps_names_and_hints_literal():
    from grader.course.feedback import markdown
    report = {"score": 0.0, "max_score": 10.0, "output": "**T**: 0.00 / 10.00",
              "tests": [{"number": "1.1", "name": "wide: offsets pass 2**32", "status": "failed",
                         "output": "use slot.to(tl.int64) * HD\nfor [T, H, D]"}]}
    line = markdown(report, "s1").splitlines()[-1]
    assert line == r"- **1.1 wide: offsets pass 2\*\*32**: use slot.to(tl.int64) \* HD for \[T, H, D\]"


@pytest.mark.slow
def test_submitit_local_executor_runs_the_cluster_task_here(tmp_path, capsys):
    """The path a Slurm task takes (grader/course/cluster.py's task through submitit), on this machine:
    what `--executor submitit-local` shows on a GPU runner without Slurm."""
    for student, name in (("s1", "good.py"), ("s2", "no_echo.py")):
        folder = tmp_path / "submitted" / student / "toy_add"
        folder.mkdir(parents=True)
        shutil.copy(toy_class.SUBMISSIONS / name, folder / "toy.py")
    code = main(["grade-all", "--course", str(tmp_path), "--assignment", str(REPO / "tests/grader/toy"),
                 "--device", "cpu", "--executor", "submitit-local", "--jobs", "2", "--no-progress",
                 "--no-gradebook"])
    assert code == 0 and "through submitit's local executor on cpu" in capsys.readouterr().out
    rows = {r.student: (r.status, r.score) for r in Course(tmp_path, toy_class.TOY).rows()}
    assert rows == {"s1": ("graded", 90.0), "s2": ("graded", 60.0)}
    assert len(list((tmp_path / ".grader-jobs").glob("*/*_result.pkl"))) == 2


@pytest.mark.slow
def test_a_cluster_task_of_several_files_grades_them_in_one_warm_host(tmp_path, capsys):
    """One slot, two files: one task grades both, one session after the other in the host it
    started, and each scores as it does alone; --cold gives each its own test process."""
    for student, name in (("s1", "good.py"), ("s2", "no_echo.py")):
        folder = tmp_path / "submitted" / student / "toy_add"
        folder.mkdir(parents=True)
        shutil.copy(toy_class.SUBMISSIONS / name, folder / "toy.py")
    cli = ["grade-all", "--course", str(tmp_path), "--assignment", str(REPO / "tests/grader/toy"), "--device", "cpu",
           "--executor", "submitit-local", "--jobs", "1", "--no-progress", "--no-gradebook"]
    assert main(cli) == 0
    course = Course(tmp_path, toy_class.TOY)
    assert {r.student: (r.status, r.score) for r in course.rows()} == {"s1": ("graded", 90.0), "s2": ("graded", 60.0)}
    assert len(list((tmp_path / ".grader-jobs").glob("*/*_result.pkl"))) == 1
    how = [course.read_report(s)["extra_data"]["instructor"]["test_process"] for s in ("s1", "s2")]
    assert [h["warm"] for h in how] == [True, True] and sorted(h["session"] for h in how) == [1, 2], how
    for student in ("s1", "s2"):
        course.report_path(student).unlink()
    assert main(cli + ["--cold"]) == 0
    assert [course.read_report(s)["extra_data"]["instructor"]["test_process"] for s in ("s1", "s2")] == \
        [{"warm": False}, {"warm": False}]
    assert main(cli[:-2] + ["--executor", "local", "--files-per-task", "2"]) == 2
    assert "--files-per-task: only for --executor slurm or submitit-local" in capsys.readouterr().err


@pytest.mark.slow
def test_a_grading_stopped_by_a_signal_from_elsewhere_keeps_no_report(tmp_path):
    """SIGTERM reaching the grader from outside the batch (Slurm ending a task, an administrator)
    still lets it write a report, of the tests that ran: that report is not the file's grade."""
    import threading
    folder = tmp_path / "submitted" / "s1" / "toy_add"
    folder.mkdir(parents=True)
    shutil.copy(toy_class.SUBMISSIONS / "good.py", folder / "toy.py")
    course = Course(tmp_path, toy_class.TOY)
    done = []
    batch_thread = threading.Thread(target=lambda: done.append(grade_all(course, "cpu", jobs=1, progress=False)))
    batch_thread.start()
    deadline = time.monotonic() + 60
    graders = []
    while not graders and time.monotonic() < deadline:      # pytest has started under the grader
        # pytest has started the submission's worker, in the grader's own test process or in
        # its slot's warm host (grader/warm/hosts.py)
        graders = [int(pid) for pid in os.listdir("/proc") if pid.isdigit()
                   and "grader\0grade\0" in _cmdline(pid) and str(tmp_path) in _cmdline(pid)]
        # its worker, under this process (the grader's test process or the slot's warm host)
        graders = graders if any("worker.py" in _cmdline(str(p)) and "toy.py" in _cmdline(str(p))
                                 for p in descendants(os.getpid())) else []
        time.sleep(0.05)
    assert graders, "the grading did not start"
    os.kill(graders[0], signal.SIGTERM)
    batch_thread.join(timeout=120)
    (row,) = done[0].rows
    assert row.status == "error" and "interrupted by a signal" in row.note, row
    assert not course.report_path("s1").exists()


def _toy_course(root: Path, files: dict[str, bytes]) -> Path:
    for student, data in files.items():
        folder = root / "submitted" / student / "toy_add"
        folder.mkdir(parents=True)
        (folder / "toy.py").write_bytes(data)
    return root


def _grade_all(course: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grader", "grade-all", "--course", str(course),
                             "--assignment", "tests/grader/toy", "--device", "cpu", "--jobs", "1", "--no-progress",
                             "--no-gradebook", *extra], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _gradings_run(out: str) -> int:
    return int(out.split(" gradings run")[0].rsplit(";", 1)[1])


@pytest.mark.slow
def test_two_runs_on_one_course_grade_each_file_once(tmp_path):
    """A second grade-all on a course in flight says who holds it and leaves it alone, or
    waits (--wait) and then finds nothing left to grade."""
    import socket
    good = (toy_class.SUBMISSIONS / "good.py").read_bytes()
    course = _toy_course(tmp_path, {"s1": good, "s2": good + b"\n# mine\n",
                                    "s3": (toy_class.SUBMISSIONS / "no_echo.py").read_bytes()})
    lock = course / ".grade-all.lock"
    first = _grade_all(course)
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    busy = _grade_all(course)
    waiting = _grade_all(course, "--wait")
    _, err = busy.communicate(timeout=60)
    assert busy.returncode == 75, err
    assert f"pid {first.pid} on {socket.gethostname()}, started " in err and "--wait" in err, err
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    out2, err2 = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, err2
    assert "waiting for the grade-all that holds this course" in err2
    assert (_gradings_run(out), _gradings_run(out2)) == (3, 0), (out, out2)
    assert "3 unchanged" in out2
    assert lock.read_text() == ""          # released: nobody holds it
    assert not list(course.rglob(".report.json.grading"))


def test_a_course_that_cannot_hold_a_lock_is_said_plainly(tmp_path, capsys):
    course = _toy_course(tmp_path / "c", {"s1": b"x = 1\n"})
    (course / ".grade-all.lock").mkdir()          # stands where the lock file goes
    code = main(["grade-all", "--course", str(course), "--assignment", str(REPO / "tests/grader/toy"),
                 "--device", "cpu", "--no-progress", "--no-gradebook"])
    assert code == 2 and "cannot open the course's lock file" in capsys.readouterr().err


def _names(folder: Path, prefix: str = "") -> set[str]:
    # grader-uids: the machine's uid locks (grader/sandbox/confine.py), kept across runs by design
    return {p.name for p in folder.iterdir() if p.name.startswith(prefix) and p.name != "grader-uids"} \
        if folder.is_dir() else set()


@pytest.mark.slow
@pytest.mark.serial(reason="compares /dev/shm before and after: any other grading on the machine adds folders there")
def test_a_run_killed_outright_leaves_nothing_a_rerun_does_not_remove(tmp_path, monkeypatch):
    """kill -9 of grade-all's process group mid-class: the grading in flight and its slot's
    host end with it, and after the next run the temporary directory and /dev/shm hold what
    they held before, except a live run's folders, which stay."""
    import json
    import tempfile

    from grader.warm import leftovers
    from grader.sandbox.proxy import shared_tensor_root
    from grader.warm.hosts import HostProcess
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    shm = Path(shared_tensor_root() or tmp)
    good = (toy_class.SUBMISSIONS / "good.py").read_bytes()
    course = _toy_course(tmp_path / "course", {
        "s1": (toy_class.SUBMISSIONS / "hangs_on_thirteen.py").read_bytes(), "s2": good, "s3": good + b"\n# 3\n"})
    env = {**os.environ, "TMPDIR": str(tmp)}
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    before_tmp, before_shm = _names(tmp), _names(shm, leftovers.WORK_PREFIX)
    live = HostProcess(toy_class.TOY.folder, "cpu", {})         # another run's host, alive throughout
    try:
        live.env()
        live_folders = {live.folder.name, live.work.name}
        run = _grade_all(course, env=env)
        deadline, marker, grading = time.monotonic() + 60, None, []
        while not (marker and grading) and time.monotonic() < deadline:
            markers = [p / leftovers.OWNER_FILE for p in tmp.glob(leftovers.HOST_PREFIX + "*")
                       if p.name not in live_folders and (p / leftovers.OWNER_FILE).is_file()]
            marker = json.loads(markers[0].read_text()) if markers else None
            if marker and not marker["host"]:
                marker = None
            grading = [int(p) for p in os.listdir("/proc") if p.isdigit() and "grader\0grade\0" in _cmdline(p)
                       and str(course) in _cmdline(p)]
            time.sleep(0.1)
        assert marker and grading, "no grading started"
        dead_host = marker["host"]
        dead_folders = _names(tmp) - before_tmp - live_folders
        assert dead_folders and leftovers.is_alive(dead_host)
        assert _wait_for_worker(run.pid, 120), "the hanging file's session did not start"
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate(timeout=60)
        deadline = time.monotonic() + 30
        while (leftovers.is_alive(dead_host) or any(map(leftovers.is_alive, map(leftovers.identity, grading)))) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not leftovers.is_alive(dead_host), "the slot's host outlived its batch"
        assert not [pid for pid in grading if leftovers.start_time(pid) is not None], "the grading ran on"
        again = _grade_all(course, env=env)
        out, err = again.communicate(timeout=300)
        assert again.returncode == 0, err
        assert _names(tmp) == before_tmp | live_folders, _names(tmp)
        assert _names(shm, leftovers.WORK_PREFIX) - before_shm <= {live.exchange.name}
        assert live.exchange.is_dir() and live.socket_path.exists() and live.proc.poll() is None
    finally:
        live.close()
    assert _names(tmp) == before_tmp


def _gone_identity() -> str:
    """The identity of a process that has ended, read while it ran: a `sleep 0` may already be
    a zombie when it is read, with no start time (seen beside two CPU hogs)."""
    from grader.warm import leftovers
    gone = subprocess.Popen(["sleep", "60"])
    try:
        return leftovers.identity(gone.pid)
    finally:
        gone.kill()
        gone.wait()


def test_the_sweep_removes_the_work_roots_of_a_grading_killed_outright(tmp_path, monkeypatch):
    """A grading's work roots (its workers' scratch, its shared tensors) carry the grading's
    identity: once that process is gone they are removed; a live grading's stay, and so does a
    folder of that name with no marker, which the grader did not make."""
    import json
    import tempfile

    from grader.warm import leftovers
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    tmp.mkdir()
    shm.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr("grader.sandbox.proxy.shared_tensor_root", lambda: str(shm))
    live = leftovers.grading_roots()
    dead = leftovers.grading_roots()
    live["state"], dead["state"] = leftovers.own_folder(), leftovers.own_folder()
    assert (live["state"].stat().st_mode & 0o777) == 0o700, "a grading's own records are no worker's to read"
    gone_identity = _gone_identity()
    for folder in dead.values():
        (folder / leftovers.OWNER_FILE).write_text(json.dumps({"owner": gone_identity, "host": None}))
        (folder / "grader-sandbox-x").mkdir()
    unmarked = tmp / f"{leftovers.GRADING_PREFIX}someone-elses"
    unmarked.mkdir()
    # killed between making its folder and writing the marker: the folder's name says whose it was
    half_made = tmp / f"{leftovers.GRADING_PREFIX}{gone_identity.replace(':', '_')}_x1y2"
    half_made.mkdir()
    removed = leftovers.sweep_grading_folders(str(shm))
    assert sorted(removed) == sorted([str(half_made)] + [str(f) for f in dead.values()])
    assert all(f.is_dir() for f in live.values()) and unmarked.is_dir()
    assert live["scratch_root"].parent == tmp and live["exchange_root"].parent == shm and live["state"].parent == tmp


def test_an_interruption_while_a_grading_makes_its_folders_leaves_none(tmp_path, monkeypatch):
    """SIGTERM arriving while a grading makes its folders waits until they are in the hands of
    the block that removes them: the grading ends, and the folders with it."""
    import signal
    import tempfile

    from grader.warm import leftovers
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = []

    def make():
        made.append(leftovers.own_folder())
        os.kill(os.getpid(), signal.SIGTERM)        # between the folder's making and its owner's `try`
        return made[-1]

    def interrupted(signum, frame):
        raise InterruptedError("SIGTERM")
    # A thread of the process that does not block the signal: the kernel may hand it the signal,
    # and a mask held by the main thread alone then held nothing (grade_one has threads too).
    done = threading.Event()
    beside = threading.Thread(target=done.wait, daemon=True)
    beside.start()
    before = signal.signal(signal.SIGTERM, interrupted)
    try:
        with pytest.raises(InterruptedError):
            with leftovers.removed_at_end(make):
                pass
    finally:
        signal.signal(signal.SIGTERM, before)
        done.set()
    assert made and not made[0].exists(), "the interruption left a folder its grading never got to remove"


def test_the_sweep_removes_a_dead_runs_host_folders_and_keeps_a_live_ones(tmp_path, monkeypatch):
    """Dead: the owner is gone, or its pid now names a process with another start time."""
    import json
    import tempfile

    from grader.warm import leftovers
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    tmp.mkdir()
    shm.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    gone_identity = _gone_identity()
    live, dead, reused = (leftovers.host_folders(str(shm)) for _ in range(3))
    me = leftovers.identity()
    for folders, owner in ((dead, gone_identity), (reused, f"{os.getpid()}:{int(me.split(':')[1]) + 1}")):
        (folders[0] / leftovers.OWNER_FILE).write_text(json.dumps({"owner": owner, "host": None}))
    for folder in live + dead + reused:
        (folder / "something").write_text("x")
    removed = leftovers.sweep_hosts(str(shm))
    assert all(folder.is_dir() for folder in live)
    assert not any(folder.exists() for folder in dead + reused), removed
    assert sorted(map(str, dead + reused)) == sorted(removed)
