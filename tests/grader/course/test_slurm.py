"""grade-all through a real Slurm cluster (tools/slurm_one_node.sh starts one on this machine):
the same scores as a local run, tasks of several files graded in a warm host, a task killed
mid-grading becomes an error row that the next run grades (what it finished before is kept),
and Ctrl-C cancels the array keeping what finished. On the CPU, with the toy assignment,
whose gradings take seconds."""
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import toy_class
from grader.assignment import REPO, Assignment
from grader.course.batch import grade_all
from grader.cli import main
from grader.course.cluster import (ClusterError, SlurmBatch, SlurmOptions, node_local_warning, parse_sbatch, slurm_device,
                            task_time_min)
from grader.course.folder import Course

TOY = str(REPO / "tests/grader/toy")
L1 = Assignment.load(REPO / "assignment/l1_paged_kv_write")
# A task left pending (a busy node) fails its test instead of holding CI up.
# The one-node cluster is one for the machine: its tests take their turns in one xdist worker.
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("slurm")]
# One core a task: the one-node cluster has two, and a toy grading needs little.
CLI = ["--assignment", TOY, "--executor", "slurm", "--device", "cpu", "--cpus-per-task", "1", "--no-progress"]


def _cluster_down() -> str | None:
    if shutil.which("sbatch") is None:
        return "no sbatch here: start a one-node cluster with `bash tools/slurm_one_node.sh` (as root)"
    out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    if out.returncode != 0 or not any(s.startswith(("idle", "mixed", "alloc")) for s in out.stdout.split()):
        return f"Slurm has no node up (sinfo: {out.stdout.strip() or out.stderr.strip()}): run tools/slurm_one_node.sh"
    return None


def _in_ci() -> bool:
    """CI=true (GitHub Actions, GitLab; .ci/run sets it too), or 1/yes."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def cluster():
    why = _cluster_down()
    if why and _in_ci():
        pytest.fail(f"CI must grade through Slurm: {why}")       # .ci/run starts the cluster
    if why:
        pytest.skip(why)


def _student(root: Path, student: str, data: bytes | None) -> None:
    folder = root / "submitted" / student / "toy_add"
    folder.mkdir(parents=True)
    if data is not None:
        (folder / "toy.py").write_bytes(data)


def _class(root: Path) -> Path:
    good = (toy_class.SUBMISSIONS / "good.py").read_bytes()
    students = {
        "ref_a": good, "ref_b": good,                              # identical: graded once
        "ref_c": good + b"\n# my own copy\n",
        "wrong": (toy_class.SUBMISSIONS / "no_echo.py").read_bytes(),
        "adversarial": (toy_class.SUBMISSIONS / "hostile_results.py").read_bytes(),
        "empty": None,
    }
    for student, data in students.items():
        _student(root, student, data)
    return root


@pytest.fixture(scope="module")
def both(cluster, tmp_path_factory):
    """The same class graded locally and through Slurm, each through the command line."""
    local = _class(tmp_path_factory.mktemp("local"))
    slurm = _class(tmp_path_factory.mktemp("slurm"))
    assert main(["grade-all", "--course", str(local), "--assignment", TOY, "--device", "cpu", "--jobs", "2",
                 "--no-progress", "--no-gradebook"]) == 0
    assert main(["grade-all", "--course", str(slurm), *CLI, "--files-per-task", "2"]) == 0
    return Course(local, toy_class.TOY), Course(slurm, toy_class.TOY)


@pytest.mark.slow
def test_slurm_scores_every_student_as_a_local_run_does(both, capsys):
    local, slurm = both
    want = {r.student: (r.status, r.score, r.max_score, r.areas) for r in local.rows()}
    got = {r.student: (r.status, r.score, r.max_score, r.areas) for r in slurm.rows()}
    assert got == want
    assert want["ref_a"][:2] == ("graded", 90.0) and want["wrong"][:2] == ("graded", 60.0)
    assert want["empty"][0] == "missing"
    assert want["adversarial"][1] < 90.0
    # The CSV and feedback come from the same publishing code.
    assert (slurm.root / "grades-toy_add.csv").read_text().count("\n") == 7
    assert slurm.feedback_path("wrong").is_file() and not slurm.feedback_path("empty").exists()
    report = slurm.read_report("ref_b")
    assert report["extra_data"]["environment"]["device"] == "cpu"


@pytest.mark.slow
def test_slurm_graded_identical_files_once_and_a_rerun_grades_nothing(both, capsys):
    _, slurm = both
    runs = [p for p in (slurm.root / ".grader-jobs").glob("*_*") if p.is_dir()]
    assert len(runs) == 2                    # four distinct files (ref_a/ref_b are one), two a task
    # each task graded its two files in a warm host of its own, one session after the other
    how = [slurm.read_report(s)["extra_data"]["instructor"]["test_process"] for s in ("ref_a", "ref_c", "wrong",
                                                                                      "adversarial")]
    assert all(h["warm"] for h in how) and sorted(h["session"] for h in how) == [1, 1, 2, 2], how
    assert len({h["host_pid"] for h in how}) == 2, how
    before = {s: slurm.report_path(s).stat().st_mtime_ns for s in ("ref_a", "ref_b", "wrong")}
    assert main(["grade-all", "--course", str(slurm.root), *CLI]) == 0
    out = capsys.readouterr().out
    assert "0 gradings run as Slurm array -" in out and "5 unchanged" in out
    assert {s: slurm.report_path(s).stat().st_mtime_ns for s in before} == before


def _squeue(array: str) -> dict[str, str]:
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", array, "-o", "%i|%T"],
                         capture_output=True, text=True).stdout
    return dict(line.split("|", 1) for line in out.split())


def _wait(condition, what: str, limit_s: float = 60):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _grading_started(course: Path) -> bool:
    """A task's grader process is running (its partial report's folder exists)."""
    return any(course.glob("autograded/*/toy_add"))


@pytest.mark.slow
def test_a_task_cancelled_mid_grading_is_an_error_row_and_the_next_run_grades_it(cluster, tmp_path):
    _student(tmp_path, "s1", (toy_class.SUBMISSIONS / "good.py").read_bytes())
    course = Course(tmp_path, toy_class.TOY)
    batch = SlurmBatch(course, "cpu", 420, SlurmOptions(cpus_per_task=1))
    events = []

    def cancel_when_running():
        try:
            _wait(lambda: _grading_started(tmp_path), "the grading to start")
            time.sleep(1)
            subprocess.run(["scancel", batch.task_ids[0]], check=True)
        except Exception as exc:
            events.append(exc)
    killer = threading.Thread(target=cancel_when_running)
    killer.start()
    result = grade_all(course, "cpu", progress=False, executor=batch)
    killer.join()
    (row,) = result.rows
    assert row.status == "error" and row.score == 0, row
    why = course.error_path("s1").read_text()
    print(why)
    assert "stopped (SIGTERM" in why or "CANCELLED" in why, why
    assert not course.report_path("s1").exists()
    assert not list(course.report_path("s1").parent.glob(".report*"))

    again = grade_all(course, "cpu", progress=False, executor=SlurmBatch(course, "cpu", 420,
                                                                          SlurmOptions(cpus_per_task=1)))
    (row,) = again.rows
    assert (row.status, row.score) == ("graded", 90.0)
    assert not course.error_path("s1").exists()
    assert events == []


@pytest.mark.slow
def test_a_task_cancelled_after_its_first_file_keeps_that_report(cluster, tmp_path):
    """A task of two files cancelled while it grades the second: the first file's report,
    already in place, counts; the second is an error row for the next run to grade."""
    good = (toy_class.SUBMISSIONS / "good.py").read_bytes()
    for i in range(2):
        _student(tmp_path, f"s{i}", good + f"\n# {i}\n".encode())
    course = Course(tmp_path, toy_class.TOY)
    batch = SlurmBatch(course, "cpu", 420, SlurmOptions(cpus_per_task=1), files_per_task=2)
    events = []

    def cancel_during_the_second():
        try:
            _wait(lambda: sum(course.report_path(f"s{i}").exists() for i in range(2)) == 1, "a first report", 120)
            _wait(lambda: len(list(tmp_path.glob("autograded/*/toy_add"))) == 2, "the second grading")
            time.sleep(1)
            subprocess.run(["scancel", batch.task_ids[0]], check=True)
        except Exception as exc:
            events.append(exc)
    killer = threading.Thread(target=cancel_during_the_second)
    killer.start()
    result = grade_all(course, "cpu", progress=False, executor=batch)
    killer.join()
    assert events == [] and len(batch.task_ids) == 1
    rows = {row.student: row for row in result.rows}
    done, cut = sorted(rows, key=lambda s: rows[s].status != "graded")
    assert (rows[done].status, rows[done].score) == ("graded", 90.0), rows[done]
    assert rows[cut].status == "error", rows[cut]
    why = course.error_path(cut).read_text()
    assert "stopped (SIGTERM" in why or "CANCELLED" in why, why


@pytest.mark.slow
def test_ctrl_c_cancels_the_array_and_keeps_finished_reports(cluster, tmp_path):
    good = (toy_class.SUBMISSIONS / "good.py").read_bytes()
    for i in range(3):
        _student(tmp_path, f"s{i}", good + f"\n# {i}\n".encode())
    # One task at a time: the first finishes, the second is cut short, the third never starts.
    proc = subprocess.Popen([sys.executable, "-m", "grader", "grade-all", "--course", str(tmp_path), *CLI,
                             "--max-tasks", "1", "--files-per-task", "1", "--no-gradebook"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    course = Course(tmp_path, toy_class.TOY)
    _wait(lambda: sum(course.report_path(f"s{i}").exists() for i in range(3)) == 1, "a first report", 120)
    _wait(lambda: len(list(tmp_path.glob("autograded/*/toy_add"))) == 2, "a second grading")
    array = next((tmp_path / ".grader-jobs").glob("*_0")).name.split("_")[0]
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "run it again to resume" in err, err
    assert all(state in ("CANCELLED", "COMPLETED") for state in _squeue(array).values()), _squeue(array)
    assert sum(course.report_path(f"s{i}").exists() for i in range(3)) == 1
    assert not list(tmp_path.glob("autograded/*/toy_add/.report*"))


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("GRADER_SLURM_L1") == "0", reason="GRADER_SLURM_L1=0")
def test_the_l1_reference_through_slurm_scores_full_marks(cluster, tmp_path):
    folder = tmp_path / "submitted" / "ref" / L1.id
    folder.mkdir(parents=True)
    shutil.copy(L1.reference, folder / L1.submission)
    course = Course(tmp_path, L1)
    result = grade_all(course, "cpu", progress=False,
                       executor=SlurmBatch(course, "cpu", 900, SlurmOptions(cpus_per_task=2, mem_gb=8)))
    (row,) = result.rows
    assert row.status == "graded" and row.score == row.max_score > 0, row.note


def test_sbatch_options_and_defaults():
    course = Course("/shared/course", toy_class.TOY)
    params = SlurmBatch(course, "cuda", 420, SlurmOptions(partition="gpu", account="cs431",
                                                          sbatch=parse_sbatch(["qos=high", "--exclusive"]))
                        ).parameters(500)
    # a task of four files may run four gradings' time
    assert SlurmBatch(course, "cpu", 420, SlurmOptions()).parameters(3, 4)["timeout_min"] == task_time_min(4 * 420)
    assert params["slurm_gres"] == "gpu:1" and params["slurm_partition"] == "gpu"
    assert params["slurm_account"] == "cs431" and params["timeout_min"] == task_time_min(420) == 10
    assert params["slurm_additional_parameters"] == {"qos": "high", "exclusive": True}
    assert params["mem_gb"] == 5 and params["slurm_array_parallelism"] == 500
    assert "slurm_gres" not in SlurmBatch(course, "cpu", 420, SlurmOptions()).parameters(3)
    with pytest.raises(ClusterError, match="KEY=VALUE"):
        parse_sbatch(["bad key=1"])


def test_a_node_local_course_is_flagged_only_on_a_cluster_of_several_nodes():
    assert node_local_warning([Path("/tmp/course")], nodes=1) is None
    assert "local to this machine" in node_local_warning([Path("/tmp/course")], nodes=4)
    assert node_local_warning([Path("/home/me/course")], nodes=4) is None


def _no_slurm_path(tmp_path: Path) -> str:
    """A PATH without Slurm's commands, as on a fresh machine: the folders of the usual one,
    with every entry but Slurm's linked into one folder."""
    bare = tmp_path / "bin"
    bare.mkdir()
    hidden = {"sbatch", "squeue", "scancel", "sinfo", "srun", "salloc", "scontrol"}
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        for entry in Path(folder).glob("*") if folder and Path(folder).is_dir() else ():
            if entry.name not in hidden and not (bare / entry.name).exists():
                (bare / entry.name).symlink_to(entry)
    return str(bare)


def test_without_slurm_grade_all_says_why_and_nothing_runs_sinfo(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", _no_slurm_path(tmp_path))
    # a course under /tmp asks sinfo how many nodes there are, to warn of node-local folders
    assert node_local_warning([Path("/tmp/course")]) is None
    course = Course("/tmp/course", toy_class.TOY)
    assert SlurmBatch(course, "cpu", 420, SlurmOptions()).parameters(2)["cpus_per_task"] == 2
    with pytest.raises(ClusterError, match="no sinfo on this machine"):
        slurm_device("auto", None)
    _student(tmp_path / "c", "s1", (toy_class.SUBMISSIONS / "good.py").read_bytes())
    assert main(["grade-all", "--course", str(tmp_path / "c"), *CLI]) == 2
    err = capsys.readouterr().err
    assert "no sbatch on this machine" in err and "Traceback" not in err


@pytest.mark.slow
def test_without_slurm_these_tests_skip_the_cluster_outside_ci_and_fail_in_it(tmp_path):
    """This file on a machine without Slurm, in a fresh process: the tests that need no
    cluster pass, those that need one skip (and fail where CI is set)."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = _no_slurm_path(tmp_path)
    cmd = [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-rs",
           "-k", "not these_tests_skip", "--basetemp", str(tmp_path / "inner")]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    summary = out.stdout.strip().splitlines()[-1]
    assert " passed, " in summary and " skipped" in summary and "no sbatch here" in out.stdout, out.stdout[-3000:]
    out = subprocess.run(cmd + ["-x"], cwd=REPO, env={**env, "CI": "true"}, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1 and "CI must grade through Slurm" in out.stdout, out.stdout[-3000:]


@pytest.mark.slow
def test_the_grading_service_grades_each_check_as_a_slurm_task(cluster, tmp_path):
    """`serve --executor slurm`: a check is one Slurm task, graded on its node as a slot grades
    it, and its report comes back to the service as its own, with the local run's score."""
    import service_server as svc
    course = tmp_path / "course"
    course.mkdir()
    toks = svc.tokens(course, "--add", "ann")
    before = _newest_job()
    server = svc.start(course, "--executor", "slurm", "--cpus-per-task", "1", "--jobs", "1")
    try:
        sent = server.submit(toks["ann"], svc.unique((toy_class.SUBMISSIONS / "good.py").read_bytes(), "ann"))
        assert sent.status == 202, sent.body
        done = server.wait(toks["ann"], sent.body["id"], timeout=240)
        assert (done["status"], done["score"]) == ("done", 90.0), done
        assert "as Slurm tasks" in server.log_text()
        assert _toy_tasks_completed_since(before), "no Slurm task graded the check"
    finally:
        server.stop()


def _jobs() -> list[tuple[int, str, str]]:
    """(job id, name, state) of every job squeue still lists, finished ones too. By id, not by
    count: a finished job leaves squeue after MinJobAge (300 s), so a count can stay level while
    a new job completes and an earlier test's job ages out."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%A|%j|%T"], capture_output=True, text=True)
    return [(int(i), name, state) for i, name, state in (line.split("|") for line in out.stdout.split())]


def _newest_job() -> int:
    return max((i for i, _, _ in _jobs()), default=0)


def _toy_tasks_completed_since(job_id: int) -> int:
    return sum(i > job_id and (name, state) == ("grade-toy_add", "COMPLETED") for i, name, state in _jobs())
