"""The class summary page over the generated toy class: its content, its links, and
what a real browser shows of it."""
import dataclasses
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

import toy_class
from grader.assignment import Area
from grader.cli import main
from grader.course.folder import Course
from grader.summary.page import build

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    graded = toy_class.graded(tmp_path_factory)
    index = build(graded.course, graded.course.root / "summary")
    return graded, index


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.targets: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.targets.append(("img", attrs["src"]))
        elif tag == "a":
            self.targets.append(("a", attrs["href"]))


def links_of(index: Path) -> list[tuple[str, Path]]:
    parser = Links()
    parser.feed(index.read_text())
    return [(tag, index.parent / unquote(target)) for tag, target in parser.targets]


def assert_links_resolve(index: Path) -> None:
    links = links_of(index)
    assert {tag for tag, _ in links} == {"img", "a"}
    missing = [str(path) for _, path in links if not path.is_file()]
    assert not missing, missing


def test_page_covers_the_class(page):
    graded, index = page
    text = index.read_text()
    for heading in ("Scores", "Pass rate per area", "Pass rate per hidden test", "Most common failure hints",
                    "Identical submissions", "Students"):
        assert f"<h2>{heading}" in text
    for student in list(graded.expected) + list(toy_class.MISSING):
        assert f">{student}</td>" in text
    assert "your file has no function named &#x27;echo&#x27;" in text
    assert "26 students: s00" in text                       # the good file, graded once
    assert "gpu_only: Skipped" not in text                 # not graded on the CPU: no pass rate
    assert "<h2>Performance" not in text and not (index.parent / "performance.png").exists()
    for name in ("scores.png", "areas.png"):
        assert (index.parent / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_image_and_link_resolves(page):
    graded, index = page
    assert_links_resolve(index)
    hrefs = {path.resolve() for tag, path in links_of(index) if tag == "a"}
    assert graded.course.report_path("s00").resolve() in hrefs
    assert graded.course.feedback_path("s26").resolve() in hrefs


def test_performance_area_gets_its_distribution(page, tmp_path):
    graded, _ = page
    for kind in ("submitted", "autograded"):
        shutil.copytree(graded.course.root / kind, tmp_path / kind)
    toy = graded.course.assignment      # given an area on a curve, which the page plots by its rubric
    timed = Area("performance", 15.0, device="cuda", curve=((0.25, 0.0), (0.8, 1.0)))
    course = Course(tmp_path, dataclasses.replace(toy, areas={**toy.areas, "performance": timed}))
    for i, student in enumerate(["s00", "s01", "s02"]):
        path = course.report_path(student)
        report = json.loads(path.read_text())
        report["extra_data"]["areas"]["performance"] = {"points": 15.0, "graded": True, "score": 5.0 * i,
                                                        "passed": 1, "total": 1, "gated_by": [], "note": ""}
        report["tests"].append({"name": "performance: bandwidth", "number": "4.1", "score": 5.0 * i,
                                "max_score": 15.0, "output": "", "tags": ["performance"], "visibility": "visible",
                                "status": "passed", "extra_data": {"outcome": "passed", "duration_s": 1.0,
                                                                   "measure": 0.3 + 0.2 * i}})
        path.write_text(json.dumps(report))
    index = build(course, tmp_path / "summary")
    assert "<h2>Performance (3 graded)" in index.read_text()
    assert (tmp_path / "summary" / "performance.png").is_file()


def test_command_line(page, tmp_path, capsys):
    graded, _ = page
    out = tmp_path / "elsewhere"
    assert main(["summary", "--course", str(graded.course.root), "--assignment",
                 str(graded.course.assignment.folder), "--out", str(out)]) == 0
    assert str(out / "index.html") in capsys.readouterr().out
    assert_links_resolve(out / "index.html")          # links reach back into the course folder


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian package: chromium)")
def test_page_renders_in_a_browser(page, tmp_path):
    from matplotlib.image import imread

    _, index = page
    shot = tmp_path / "shot.png"
    profile = tmp_path / "profile"
    profile.mkdir()
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1200,2000",
                    index.resolve().as_uri()], cwd=tmp_path, capture_output=True, timeout=120)
    assert shot.is_file(), "chromium wrote no screenshot"
    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (2000, 1200)
    ink = (pixels < 0.9).any(axis=-1)
    assert pixels.std() > 0.05 and ink.mean() > 0.02, "the screenshot is blank"
    blue = (pixels[..., 2] > 0.6) & (pixels[..., 0] < 0.4)          # the plots' bars
    assert blue.mean() > 0.005, "no plot is visible"
    assert_links_resolve(index)


def test_a_class_with_nothing_graded_yet(tmp_path):
    (tmp_path / "submitted" / "s1" / "toy_add").mkdir(parents=True)
    (tmp_path / "summary").mkdir()
    (tmp_path / "summary" / "scores.png").write_bytes(b"left from an earlier run")
    index = build(Course(tmp_path, toy_class.TOY), tmp_path / "summary")
    text = index.read_text()
    assert "No graded submissions yet" in text and ">s1</td>" in text and "<img" not in text
    assert not (tmp_path / "summary" / "scores.png").exists()


def _copy_class(graded, root: Path) -> Course:
    for kind in ("submitted", "autograded", "feedback"):
        shutil.copytree(graded.course.root / kind, root / kind)
    return Course(root, graded.course.assignment)


def _section(text: str, heading: str) -> str:
    return text.split(f"<h2>{heading}")[1].split("<h2>")[0]


def test_hints_tests_and_students_say_what_happened(page, tmp_path):
    """One cause is one hint, whatever area gate it sits behind; a stale report's note is no
    hint; a parametrised test's cases are told apart; an area graded for nobody here is
    "–" for every student, graded or not."""
    graded, _ = page
    course = _copy_class(graded, tmp_path)
    path = course.report_path("s26")                      # a no_echo student: echo fails
    report = json.loads(path.read_text())
    gate = "No points for this area until add passes completely."
    for i, t in enumerate(t for t in report["tests"] if t.get("status") == "failed"):
        t["output"] = f"{gate} {t['output']}" if i % 2 else t["output"]
    report["tests"].append({"name": "echo: gated", "number": "2.9", "score": 0.0, "max_score": 1.0, "output": gate,
                            "tags": ["echo"], "visibility": "visible", "status": "failed",
                            "extra_data": {"outcome": "passed", "duration_s": 0.0}})
    path.write_text(json.dumps(report))
    stale = course.submission_folder("s01") / "toy.py"
    stale.write_bytes(stale.read_bytes() + b"\n# changed after grading\n")
    text = build(course, tmp_path / "summary").read_text()
    hints = _section(text, "Most common failure hints")
    assert "No points for this area" not in hints
    assert hints.count("your file has no function named &#x27;echo&#x27;") == 1
    assert "run grade-all again" not in hints and "stale" in _section(text, "Students")
    tests = _section(text, "Pass rate per hidden test")
    names = [cell.split("</td>")[0] for cell in tests.split("<td>")[1:] if not cell[0].isdigit()]
    assert len(names) == len(set(names)), names
    assert "echo: Plain values come back unchanged [text]</td>" in tests
    students = _section(text, "Students")
    for student in ("s00", "s_empty"):                    # graded, and missing
        row = students.split(f">{student}</td>")[1].split("</tr>")[0]
        assert row.count("<td class=num>–</td>") == 1, row     # gpu_only, not graded on the CPU
    assert "Not graded on this machine, for anyone: gpu_only (GPU only)" in text


# Laid out in the browser, the page reports its widest point into the DOM that --dump-dom prints.
MEASURE = """<script>
let right = document.documentElement.scrollWidth;
for (const el of document.querySelectorAll("body *")) right = Math.max(right, el.getBoundingClientRect().right);
document.body.setAttribute("data-widest", Math.ceil(right));
</script></body>"""


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian package: chromium)")
def test_page_fits_a_1300_px_window(page, tmp_path):
    """Long names and long notes (a path in an error log) stay inside the page: cut short on
    their line, whole in their tooltip."""
    graded, _ = page
    course = _copy_class(graded, tmp_path)
    long_name = "s_" + "very_long_student_identifier_" * 3
    folder = course.submission_folder(long_name)
    folder.mkdir(parents=True)
    (folder / "toy.py").write_bytes(b"x = 1\n")
    course.error_path(long_name).parent.mkdir(parents=True)
    course.error_path(long_name).write_text("the grader exited: /" + "deeply/nested/folder/" * 20 + "file.py\n")
    index = build(course, tmp_path / "summary")
    probe = index.with_name("probe.html")
    probe.write_text(index.read_text().replace("</body>", MEASURE))
    profile = tmp_path / "profile"
    profile.mkdir()
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={profile}", "--window-size=1300,1000", "--dump-dom",
                          probe.resolve().as_uri()], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert 'data-widest="' in out.stdout, out.stderr[-2000:]
    widest = int(out.stdout.split('data-widest="')[1].split('"')[0])
    assert widest <= 1300, f"the page is {widest} px wide in a 1300 px window"
    text = index.read_text()
    assert f'title="{long_name}"' in text and 'title="the grader exited: /deeply/nested' in text
