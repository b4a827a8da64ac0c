"""L1 through the service: the reference and a wrong entry of the corpus score, area by area,
what `python -m grader grade` gives the same files."""
import hashlib

import service_server as svc
from grader.assignment import REPO, Assignment
from grader.validate.corpus import load_corpus

L1 = REPO / "assignment/l1_paged_kv_write"
WRONG = "int32_offsets"          # the lesson's first pitfall: fails int64_overflow alone


def areas(report_or_feedback: dict) -> dict:
    return {name: a["score"] for name, a in report_or_feedback["extra_data"]["areas"].items() if a["graded"]}


def test_l1_reference_and_a_wrong_entry_score_as_grade_does(tmp_path, corpus_matrix):
    """What the service gives is compared with `grade` on the same files: the kill matrix's
    gradings of them (make test's, or graded now where it has none)."""
    assignment = Assignment.load(L1)
    (tmp_path / "mutants").mkdir()
    entries = {e.name: e for e in load_corpus(assignment, mutants=tmp_path / "mutants")}
    files = {"reference": entries["reference"].file.read_bytes(), WRONG: entries[WRONG].file.read_bytes()}
    course = tmp_path / "course"
    course.mkdir()
    toks = svc.tokens(course, "--add", "ref", "wrong")
    toks.update(svc.tokens(course, "--instructor"))
    server = svc.start(course, "--jobs", "1", assignment=L1)
    try:
        sent = {"reference": server.submit(toks["ref"], files["reference"]).body["id"],
                WRONG: server.submit(toks["wrong"], files[WRONG]).body["id"]}
        # `grade` on the same bytes: the comparison the service must match.
        matrix = corpus_matrix(["reference", f"wrong/{WRONG}"])
        expected = {"reference": matrix.report("reference"), WRONG: matrix.report(f"wrong/{WRONG}")}
        for name, data in files.items():
            assert expected[name]["extra_data"]["submission"]["sha256"] == hashlib.sha256(data).hexdigest(), \
                (name, matrix.source)
        got = {name: server.wait(toks["ref" if name == "reference" else "wrong"], i, timeout=400)
               for name, i in sent.items()}
    finally:
        server.stop()
    for name in files:
        assert (got[name]["score"], got[name]["max_score"]) == (expected[name]["score"], expected[name]["max_score"])
        for area, score in areas(expected[name]).items():
            assert f"| {area} |" in got[name]["feedback"] and f"{score:.2f} / " in got[name]["feedback"], area
    assert got["reference"]["score"] == got["reference"]["max_score"]
    assert got[WRONG]["score"] < got["reference"]["score"]
    assert "int64_overflow" in got[WRONG]["feedback"].split("Tests that did not pass")[1]
