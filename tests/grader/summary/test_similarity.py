"""Copies in a class are found (grader/summary/similarity.py, grader/summary/similarity_report.py).

The class is tools/make_copy_class.py's: honest answers from the corpus's right/ entries, and
planted copies (the reference renamed, functions reordered, comments and blank lines changed, a
copy of another student's wrong kernel, a wrong kernel copied with every disguise at once, the
same bytes twice). The contract: every planted pair
is listed and ranks above every honest pair; no honest pair reaches the threshold; the students
holding the reference solution are named as such; what the template gives everyone scores
nothing; bad input is one line and exit code 2."""
from __future__ import annotations

import csv
import difflib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from browser import CHROMIUM, Browser
from grader.assignment import Assignment
from grader.course.folder import Course
from grader.summary.similarity import THRESHOLD, HandIn, detect, detect_course
from grader.summary.page import build

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools"))
import make_copy_class  # noqa: E402

L1 = Assignment.find(REPO / "assignment" / "l1_paged_kv_write")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("copy-class")
    expected = make_copy_class.build(root, L1)
    return Course(root, L1), expected


def _key(a: str, b: str) -> tuple[str, str]:
    return tuple(sorted((a, b)))


def test_planted_copies_rank_above_every_honest_pair(planted):
    course, expected = planted
    everything = detect_course(course, threshold=0.0)
    scores = {_key(p.a, p.b): p.match.similarity for p in everything.pairs}
    planted_pairs = [_key(*p) for p in expected["planted_pairs"]]
    honest = set(expected["honest"])
    honest_pairs = {k: s for k, s in scores.items() if set(k) <= honest}
    missed = [p for p in planted_pairs if p not in scores]
    assert not missed, f"planted copies share no code at all for the detector: {missed}"
    weakest = min(planted_pairs, key=scores.get)
    strongest_honest = max(honest_pairs, key=honest_pairs.get)
    assert scores[weakest] > honest_pairs[strongest_honest], (
        f"the planted copy {weakest} scores {scores[weakest]:.2f}, below the honest pair {strongest_honest} at "
        f"{honest_pairs[strongest_honest]:.2f}: an instructor reading from the top meets honest students first")
    listed = detect_course(course)
    found = {_key(p.a, p.b) for p in listed.pairs}
    assert set(planted_pairs) <= found, f"planted pairs under the threshold {THRESHOLD}: {set(planted_pairs) - found}"
    wrongly = sorted(k for k in found if set(k) <= honest)
    assert not wrongly, f"honest answers paired at the default threshold {THRESHOLD}: {wrongly}"


def test_the_plants_are_copies_a_naive_diff_misses(planted):
    """The planted copies really are disguised: a line diff sees much of each changed, so the
    detector's finding them above is its own work (renaming, reordering, comments), not luck."""
    course, _ = planted

    def text(student):
        return (course.submission_folder(student) / L1.submission).read_text()
    for a, b in (("reordered_a", "reordered_b"), ("own_wrong", "own_wrong_copy")):
        ratio = difflib.SequenceMatcher(None, text(a).splitlines(), text(b).splitlines()).ratio()
        assert ratio < 0.75, f"{b} is {ratio:.0%} the same lines as {a}: the plant disguises nothing"
    a, b = text("recommented_a").splitlines(), text("recommented_b").splitlines()
    comments = [{line.strip() for line in lines if line.strip().startswith("#")} for lines in (a, b)]
    assert comments[1] and not comments[0] & comments[1], "recommented_b keeps recommented_a's comments or has none"
    assert [line for line in a if not line.strip()] != [line for line in b if not line.strip()] or len(a) != len(b), \
        "recommented_b has recommented_a's blank lines"
    renamed = text("renamed_reference")
    assert "dest_slot" in renamed and " slot =" not in renamed, "the renamed reference renamed nothing"


def test_students_holding_the_reference_are_named(planted):
    course, expected = planted
    result = detect_course(course)
    near = [n.student for n in result.near_reference]
    assert sorted(near) == sorted(expected["near_reference"]), (
        f"close to the reference should be exactly the students who hold it (a leaked solution, renamed or with "
        f"one bug), not {near}")


def test_identical_bytes_are_named_identical(planted):
    course, _ = planted
    result = detect_course(course)
    identical = [_key(p.a, p.b) for p in result.pairs if p.identical]
    assert identical == [("identical_a", "identical_b")], f"pairs named identical: {identical}"
    assert result.pairs[0].identical, "the same bytes handed in twice is the strongest evidence: it comes first"


STUB = '    # YOUR CODE HERE\n    raise NotImplementedError("not written yet: slot_mapping")\n'


def test_the_template_scores_nothing():
    """Two students who each filled in slot_mapping their own way and left the rest of the
    template as given share only the template: without it discounted they pair; with it (as
    assignment.toml names it) they share nothing, and no template line is shown as shared."""
    template = L1.template.read_text()
    assert STUB in template, "the template's slot_mapping stub changed: update STUB"
    a = template.replace(STUB, "    return block_table[seq_idx, positions // block_size].long() * block_size"
                               " + positions % block_size\n")
    b = template.replace(STUB, "    table = block_table.long()\n    pos = positions.long()\n"
                               "    return table[seq_idx.long(), pos // block_size] * block_size + pos % block_size\n")
    files = [HandIn("a", a, "sha-a"), HandIn("b", b, "sha-b")]
    plain = detect(files, L1.submission, template=None, threshold=0.0)
    before = plain.pairs[0].match.similarity if plain.pairs else 0.0
    assert before >= THRESHOLD, f"without the template discounted the pair scores only {before:.2f}: this test shows nothing"
    discounted = detect(files, L1.submission, template=template, threshold=0.0)
    assert not discounted.pairs, (f"the template's code still counts: two students who wrote different slot_mappings "
                                  f"pair at {discounted.pairs[0].match.similarity:.2f}")


def test_identical_bytes_count_however_short_but_the_bare_template_does_not():
    """The same two added lines handed in twice are named identical, below MIN_SHARED and all;
    the template handed in untouched by two students is nothing of theirs, and no pair."""
    template = L1.template.read_text()
    short = template.replace(STUB, "    return block_table[seq_idx, positions // block_size].long() * block_size"
                                   " + positions % block_size\n")
    files = [HandIn("a", short, "same"), HandIn("b", short, "same"), HandIn("c", template, "bare"),
             HandIn("d", template, "bare")]
    result = detect(files, L1.submission, template=template)
    assert [(p.a, p.b, p.identical) for p in result.pairs] == [("a", "b", True)], result.pairs


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "similarity", "--assignment", str(L1.folder), "--quiet",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_command_writes_json_csv_and_page(planted, tmp_path):
    course, expected = planted
    out, table, page = tmp_path / "pairs.json", tmp_path / "pairs.csv", tmp_path / "similarity.html"
    run = _cli("--course", str(course.root), "--out", str(out), "--csv", str(table), "--page", str(page))
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())
    sims = [r["similarity"] for r in rows]
    assert all(0 <= s <= 1 for s in sims) and sims == sorted(sims, reverse=True), f"not most similar first: {sims}"
    pairs = {_key(r["a"], r["b"]) for r in rows if r["kind"] == "pair"}
    assert {_key(*p) for p in expected["planted_pairs"]} <= pairs
    assert next(r for r in rows if r["identical"])["a"] == "identical_a"
    assert all(r["lines_a"] and r["lines_b"] for r in rows), "every listed match shows its lines"
    with table.open() as f:
        listed = list(csv.DictReader(f))
    assert [(r["a"], r["b"]) for r in listed] == [(r["a"], r["b"]) for r in rows], "the CSV lists what the JSON does"
    assert "renamed_reference" in page.read_text()


def _one_line_error(run: subprocess.CompletedProcess, *words: str) -> None:
    assert run.returncode == 2, f"exit {run.returncode}, expected 2: {run.stderr}"
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, f"not one line:\n{run.stderr}"
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    _one_line_error(_cli("--course", str(tmp_path / "nowhere")), "no course folder")
    (tmp_path / "empty" / "submitted").mkdir(parents=True)
    _one_line_error(_cli("--course", str(tmp_path / "empty")), "no hand-ins")
    course = tmp_path / "class"
    for student, data in (("s1", b"x = 1\n"), ("latin1", "π = 'caf\xe9'\n".encode("latin-1", "replace"))):
        folder = course / "submitted" / student / L1.id
        folder.mkdir(parents=True)
        (folder / L1.submission).write_bytes(data)
    _one_line_error(_cli("--course", str(course)), "latin1", "not UTF-8", "--skip-unreadable")
    linked = course / "submitted" / "linker" / L1.id
    linked.mkdir(parents=True)
    (linked / L1.submission).symlink_to(L1.reference)
    skipped = _cli("--course", str(course), "--skip-unreadable")
    assert skipped.returncode == 0, skipped.stderr
    assert "not compared: latin1" in skipped.stdout and "not compared: linker" in skipped.stdout, skipped.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian package: chromium)")
def test_class_page_shows_planted_pairs_first_in_a_browser(planted, tmp_path):
    """The class summary, as a browser shows it: its similar hand-ins list planted pairs only,
    and the linked page shows each match's lines side by side, highlighted."""
    course, expected = planted
    index = build(course, tmp_path / "summary")
    browser = Browser(tmp_path / "profile")
    try:
        browser.go(index.resolve().as_uri())
        rows = browser.js("""[...document.querySelectorAll('table.pairs tr')].slice(1)
                             .map(tr => [...tr.cells].map(td => td.innerText))""")
        assert rows, "the class page lists no similar pair"
        listed = [_key(r[1], r[2]) for r in rows]
        planted_pairs = {_key(*p) for p in expected["planted_pairs"]}
        students_of_reference = set(expected["near_reference"])
        # Students who hold the reference pair with each other: copies too, not honest pairs.
        stray = [p for p in listed if p not in planted_pairs and not set(p) <= students_of_reference]
        assert not stray, f"the class page lists pairs that were not planted: {stray}"
        assert rows[0][3] == "identical", f"first row {rows[0]}: the identical bytes should lead"
        assert "Close to the reference solution: leaked_reference" in browser.text()
        browser.go((index.parent / "similarity.html").resolve().as_uri())
        shown = browser.js("document.querySelectorAll('.pair').length")
        highlighted = browser.js("document.querySelectorAll('.sides .same').length")
        assert shown >= len(planted_pairs) and highlighted > 0, f"{shown} matches shown, {highlighted} lines highlighted"
        widest = browser.js("document.documentElement.scrollWidth")
        assert widest <= 1100, f"the side-by-side page is {widest} px wide in a 1100 px window: long lines scroll in their column"
    finally:
        browser.close()
