"""What counts as a submission, decided in one place for every way in: `python -m grader grade`,
grade-all's course folders and Gradescope's run_autograder.

A submission is a regular file of UTF-8 Python source handed in under the assignment's file
name. A link (to the reference, to a classmate's file, to /etc/passwd), a folder, a device or
a pipe is refused without reading what it points at: the grader runs as root, and following a
link would score whatever file it names. The file is opened once, without following links,
and checked on the opened descriptor, so it cannot be swapped between the check and the read;
everything after grades the bytes read here, never the path again.
"""
from __future__ import annotations

import ast
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

# nbgrader's own bookkeeping beside a submission: not something the student handed in.
TIMESTAMP = "timestamp.txt"             # nbgrader's submit time, written beside the file
BOOKKEEPING = frozenset({TIMESTAMP})

# Far above any hand-written kernel file; bounds what a grading reads into memory.
MAX_BYTES = 4 * 2**20


@dataclass(frozen=True)
class Accepted:
    """A file to grade. `source` is what Python compiles: a UTF-8 byte-order mark dropped
    and CRLF line ends as LF, as Python's own import reads the file."""
    name: str
    data: bytes
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class Refused:
    """Nothing to grade, and why, in words for the student (they say what to do about it).
    `empty`: nothing at all was handed in (grade-all lists the student as missing)."""
    name: str
    reason: str
    data: bytes = b""
    empty: bool = False

    @property
    def sha256(self) -> str:
        # A regular file's own bytes; otherwise the refusal itself, so that grade-all can tell
        # whether its report is current without reading whatever a link points at.
        return hashlib.sha256(self.data if self.data else f"refused\0{self.reason}".encode()).hexdigest()


Picked = Accepted | Refused


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read(path: str | Path, dir_fd: int | None = None) -> Picked:
    """The file at `path` (relative to `dir_fd` if given), never following a link."""
    name = os.path.basename(os.fspath(path))
    try:
        st = os.lstat(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return Refused(name, f"there is no file {name}")
    except OSError as exc:
        return Refused(name, f"{name} could not be read ({exc.strerror})")
    if not stat.S_ISREG(st.st_mode):
        return Refused(name, f"{name} is {_kind(st.st_mode)}, not a file: hand in the file itself")
    try:
        # O_NONBLOCK: a pipe put in the file's place after the check must not hang the open.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        return Refused(name, f"{name} is a symbolic link or could not be opened ({exc.strerror}): "
                             "hand in the file itself")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Refused(name, f"{name} is {_kind(st.st_mode)}, not a file: hand in the file itself")
        if st.st_size > MAX_BYTES:
            return Refused(name, f"{name} is {st.st_size / 2**20:.1f} MiB, too large for a Python source "
                                 f"file (the limit is {MAX_BYTES // 2**20} MiB)")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        return Refused(name, f"{name} could not be read ({exc.strerror})")
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        return Refused(name, f"{name} is too large for a Python source file", data[:MAX_BYTES])
    return decode(name, data)


def decode(name: str, data: bytes) -> Picked:
    if b"\0" in data:
        return Refused(name, "the submission is not a Python source file (it contains binary data)", data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return Refused(name, "the submission is not UTF-8 text, so it is not a Python source file", data)
    return Accepted(name, data, text.replace("\r\n", "\n"))


def find(folder: str | Path, expected: str, ignore=BOOKKEEPING) -> Picked:
    """The submission in a student's hand-in folder: the file named `expected`, exactly. Any
    other name is refused with the rename that would have been graded, so that one upload
    gets the same result in grade-all and on Gradescope."""
    folder = os.fspath(folder)
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        why = "it is a symbolic link" if os.path.islink(folder) else exc.strerror
        return Refused(expected, f"the hand-in folder {os.path.basename(folder)} could not be opened as a "
                                 f"folder ({why}): hand in {expected} itself")
    try:
        names = sorted(n for n in os.listdir(dfd) if n not in ignore)
        if expected in names:
            return read(expected, dir_fd=dfd)
    finally:
        os.close(dfd)
    if not names:
        return Refused(expected, f"nothing was handed in: hand in {expected}", empty=True)
    same = [n for n in names if n.lower() == expected.lower()]
    python = [n for n in names if n.lower().endswith(".py")]
    if len(same) == 1 or len(python) == 1:
        found = same[0] if len(same) == 1 else python[0]
        return Refused(expected, f"your file is named {found}: rename {found} to {expected} and hand it in again")
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return Refused(expected, f"no {expected} among the files handed in (found {shown}): hand in one file "
                             f"named {expected}")


def pick(path: str | Path, expected: str) -> Picked:
    """A path given on the command line: a hand-in folder is searched as `find` does; a file
    named explicitly is graded under whatever name it has (the instructor chose it)."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            return find(path, expected)
    except OSError:
        pass
    return read(path)


NOT_WRITTEN = "not written yet: "


def _is_stub(body: list) -> bool:
    """A body that is only a docstring, `pass`, `...`, `raise NotImplementedError(...)`, or an
    assertion of False (`assert False`, `tl.static_assert(False, ...)`: a kernel's stub, where a
    `raise` does not compile)."""
    rest = [s for s in body if not (isinstance(s, ast.Pass) or (isinstance(s, ast.Expr)
                                                                 and isinstance(s.value, ast.Constant)
                                                                 and (s.value.value is Ellipsis
                                                                      or isinstance(s.value.value, str))))]
    if not rest:
        return True
    if len(rest) != 1:
        return False
    s = rest[0]
    if isinstance(s, ast.Raise):
        exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
        return getattr(exc, "id", getattr(exc, "attr", None)) == "NotImplementedError"
    if isinstance(s, ast.Assert):
        return isinstance(s.test, ast.Constant) and s.test.value is False
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
        call = s.value
        name = getattr(call.func, "attr", getattr(call.func, "id", None))
        return (name == "static_assert" and bool(call.args) and isinstance(call.args[0], ast.Constant)
                and call.args[0].value is False)
    return False


def unwritten(source: str, names) -> list[str]:
    """The functions of `names` (the assignment's) that the file still leaves as a template's stub:
    their last top-level definition only raises NotImplementedError or has no body. A name bound
    some other way (an assignment) counts as written. Reads the source; runs none of it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    last: dict[str, bool] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            last[node.name] = _is_stub(node.body)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(target, ast.Name) and target.id in names:
                    last[target.id] = False
    return [n for n in names if last.get(n)]
