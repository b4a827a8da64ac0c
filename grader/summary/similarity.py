"""Which hand-ins of a class are one file handed in several times: evidence for a person to read.

Every pair of hand-ins is compared by copydetect's winnowed fingerprints (the method MOSS uses):
the code is tokenized and every name becomes one letter, so renamed variables, comments and blank
lines change nothing, and a file is a set of fingerprints, so reordered functions change little.
Fingerprints of the assignment's template (the file every student starts from) are dropped
before any comparison: what the class was given scores nothing. Each hand-in is also held
against the assignment's reference solution, since a leaked solution is the commonest copy.

This module knows an assignment only as data: the submission's file name, the template and the
reference that assignment.toml names.
"""
from __future__ import annotations

import bisect
import io
import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path

from ..grading import submission_file
from ..course.folder import Course

# Shortest run of matching code, in characters of tokenized code (every name one letter, no
# spaces or comments), that counts as shared. At copydetect's default of 25 a few calls such
# as `V.V(V+V*V+V,V=V)` match between any two kernels; 40 is about one line of real code.
NOISE = 40
# Winnowing keeps one fingerprint in every window; files of a few hundred tokens are cheap
# enough to keep them all, which makes every shared run of NOISE characters certain to count.
WINDOW = 1
# A pair whose mean share of each other's own code reaches this is listed (see docs/instructor.md
# for the measurement it comes from). Honest answers to a short kernel share calls and idioms;
# that stays well below it, while a copy with renamed names and moved functions stays near 1.
THRESHOLD = 0.75
# Less shared code than this (tokenized characters, about three lines) is never a pair: two
# files that each add a line to the template may share all of it and still prove nothing.
MIN_SHARED = 120


class SimilarityError(ValueError):
    """The course cannot be compared: one line for the instructor, no traceback."""


@dataclass(frozen=True)
class HandIn:
    student: str
    text: str
    sha256: str


@dataclass(frozen=True)
class Skipped:
    student: str
    reason: str


@dataclass(frozen=True)
class Match:
    """Two files' shared code: for each side, 1-based (first, last) line ranges."""
    similarity: float           # mean of the two shares below
    share_a: float              # fraction of a's own code (beyond the template) found in b
    share_b: float
    lines_a: tuple[tuple[int, int], ...]
    lines_b: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    identical: bool             # the same bytes
    match: Match


@dataclass(frozen=True)
class NearReference:
    student: str
    match: Match                # a is the student, b the reference


@dataclass
class Result:
    threshold: float
    compared: int                                   # hand-ins compared
    pairs: list[Pair] = field(default_factory=list)              # above the threshold, most similar first
    near_reference: list[NearReference] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)         # handed in but not comparable, and why
    texts: dict[str, str] = field(default_factory=dict)          # student (and REFERENCE) -> source


REFERENCE = "(reference solution)"


def hand_ins(course: Course) -> tuple[list[HandIn], list[Skipped]]:
    """Every student's file as grade-all would grade it (grader/grading/submission_file.py's rule), and
    those who handed in something that is not comparable source (a binary, a non-UTF-8 file, a
    link, a misnamed file), with the reason. Students with nothing handed in are neither."""
    if not (course.root / "submitted").is_dir():
        raise SimilarityError(f"no submitted/ folder in {course.root}: is it a course in nbgrader's layout?")
    found, skipped = [], []
    for student in course.students():
        picked, _ = course.submission(student)
        if picked is None:
            continue
        if isinstance(picked, submission_file.Refused):
            skipped.append(Skipped(student, picked.reason))
        else:
            found.append(HandIn(student, picked.source, picked.sha256))
    if not found:
        raise SimilarityError(f"no hand-ins of {course.assignment.id} under {course.root / 'submitted'}"
                              + (f" that can be read ({len(skipped)} cannot)" if skipped else ""))
    return found, skipped


def read_source(path: Path, what: str) -> str:
    """The template or the reference: UTF-8 text, or a one-line error naming the file."""
    try:
        return path.read_bytes().decode("utf-8-sig").replace("\r\n", "\n")
    except OSError as exc:
        raise SimilarityError(f"cannot read the {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SimilarityError(f"the {what} {path} is not UTF-8 text") from None


class _Fingerprinter:
    """copydetect's fingerprints of one assignment's files, the template's removed.

    copydetect hashes with Python's hash(), which differs between processes: every fingerprint
    compared must come from this one object."""

    def __init__(self, filename: str, template: str | None):
        import numpy as np
        from copydetect import CodeFingerprint
        self._make = CodeFingerprint
        self.filename = filename      # its extension picks the tokenizer (pygments)
        boilerplate = self._make(filename, NOISE, 1, fp=io.StringIO(template)).hashes if template else ()
        self.boilerplate = np.unique(np.array(sorted(boilerplate), dtype=np.int64))

    def __call__(self, text: str):
        logging.getLogger().disabled, was = True, logging.getLogger().disabled   # copydetect warns through root
        try:
            return self._make(self.filename, NOISE, WINDOW, self.boilerplate, fp=io.StringIO(text))
        finally:
            logging.getLogger().disabled = was


def compare(fp_a, fp_b, given: frozenset[str] = frozenset(), least: int = MIN_SHARED) -> Match | None:
    """The shared code of two fingerprinted files; None when they share less than `least`.
    `given`: the template's lines, never shown as shared."""
    from copydetect import compare_files
    if not fp_a.token_coverage or not fp_b.token_coverage:
        return None                    # nothing beyond the template: nothing to share
    shared, (share_a, share_b), (slices_a, slices_b) = compare_files(fp_a, fp_b)
    if shared < least or not shared:
        return None
    share_a, share_b = min(1.0, float(share_a)), min(1.0, float(share_b))
    return Match((share_a + share_b) / 2, share_a, share_b,
                 _lines(fp_a.raw_code, slices_a, given), _lines(fp_b.raw_code, slices_b, given))


def _lines(text: str, slices, given: frozenset[str]) -> tuple[tuple[int, int], ...]:
    """copydetect's character slices as 1-based line ranges, counting only lines of code that
    are not the template's (a slice runs through a docstring or a comment it skipped); a gap of
    blank or comment lines alone does not split a range."""
    ends = [i for i, c in enumerate(text) if c == "\n"]
    lines = text.split("\n")
    hit = set()
    for begin, end in zip(slices[0], slices[1]):
        first = bisect.bisect_left(ends, int(begin))
        last = bisect.bisect_left(ends, max(int(begin), int(end) - 1))
        hit.update(range(first, last + 1))

    def code(n: int) -> bool:
        line = lines[n].strip()
        return bool(line) and not line.startswith("#")
    ranges: list[list[int]] = []
    for n in sorted(n for n in hit if n < len(lines) and code(n) and lines[n].strip() not in given):
        if ranges and not any(code(m) for m in range(ranges[-1][1], n)):
            ranges[-1][1] = n + 1
        else:
            ranges.append([n + 1, n + 1])
    return tuple((a, b) for a, b in ranges)


def detect(found: list[HandIn], filename: str, template: str | None = None, reference: str | None = None,
           threshold: float = THRESHOLD, progress: bool = False) -> Result:
    """Every pair of `found` above `threshold`, and every hand-in above it against `reference`."""
    from tqdm import tqdm
    fingerprint = _Fingerprinter(filename, template)
    given = frozenset(line.strip() for line in (template or "").splitlines())
    result = Result(threshold, len(found), texts={h.student: h.text for h in found})
    prints = {h.student: fingerprint(h.text) for h in tqdm(found, desc="fingerprints", unit="file",
                                                           disable=not progress, leave=False)}
    if reference is not None:
        result.texts[REFERENCE] = reference
        solution = fingerprint(reference)
        for h in found:
            match = compare(prints[h.student], solution, given)
            if match and match.similarity >= threshold:
                result.near_reference.append(NearReference(h.student, match))
    total = len(found) * (len(found) - 1) // 2
    for x, y in tqdm(itertools.combinations(found, 2), total=total, desc="pairs compared", unit="pair",
                     disable=not progress, mininterval=0.5, unit_scale=True):
        # The same bytes are evidence however little they add to the template; the template alone is not.
        identical = x.sha256 == y.sha256
        match = compare(prints[x.student], prints[y.student], given, least=1 if identical else MIN_SHARED)
        if match and (identical or match.similarity >= threshold):
            result.pairs.append(Pair(x.student, y.student, identical, match))
    # Identical bytes first, then by similarity: the strongest evidence at the top.
    result.pairs.sort(key=lambda p: (not p.identical, -p.match.similarity, p.a, p.b))
    result.near_reference.sort(key=lambda n: (-n.match.similarity, n.student))
    return result


def detect_course(course: Course, threshold: float = THRESHOLD, progress: bool = False,
                  skip_unreadable: bool = True) -> Result:
    """`detect` over a course's hand-ins, with the assignment's own template and reference."""
    found, skipped = hand_ins(course)
    if skipped and not skip_unreadable:
        first = skipped[0]
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise SimilarityError(f"cannot compare {first.student}'s hand-in: {first.reason}{more}; "
                              "--skip-unreadable compares the others")
    a = course.assignment
    template = read_source(a.template, "template") if a.template else None
    reference = read_source(a.reference, "reference solution") if a.reference else None
    result = detect(found, a.submission, template, reference, threshold, progress)
    result.skipped = skipped
    return result
