"""Writing a file so that a reader sees the old one or the new one, never half of either; and the
machine-wide folders that must be the grader's alone."""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


@contextlib.contextmanager
def replacing(path: Path, mode: str = "w", **open_args):
    """Open a temporary file beside `path`; on a clean exit it is flushed to disk and renamed
    over `path` (readable by all, as a plain write would leave it); on an error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **open_args) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: Path, data: str | bytes) -> None:
    if isinstance(data, bytes):
        with replacing(path, "wb") as f:
            f.write(data)
    else:
        with replacing(path, "w", encoding="utf-8") as f:
            f.write(data)


def private_folder(folder: Path, others_read: bool = False) -> Path:
    """`folder`, made if missing (mode 0700), once it is a real folder of this user that nobody
    else may enter: under /tmp anyone could have made it first, and then read or remove the
    locks the grader keeps there. `others_read`: mode 0755, and nobody else may write it (what
    the grader's workers read, such as grader/bytecode.py's folder)."""
    folder = Path(folder)
    folder.mkdir(mode=0o755 if others_read else 0o700, parents=True, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & (0o022 if others_read else 0o077):
        raise RuntimeError(f"{folder} is not a private folder of ours; refusing to use it")
    return folder


def ours_or_none(folder: Path, others_read: bool = False) -> Path | None:
    """`private_folder(folder, others_read)`, or None where it is not ours to use."""
    try:
        return private_folder(folder, others_read)
    except (OSError, RuntimeError):
        return None


def cannot_write(path: Path) -> str | None:
    """Why a file the grader writes (a report, a CSV) cannot go at `path`, asked before the work
    that makes it, so that a grading's minutes are not lost to a path; None once its folder
    exists and takes a file. The write replaces the file there (`replacing`), so only a plain
    file may be there already: never a device or a link, which as root would be replaced."""
    if path.is_dir() and not path.is_symlink():
        return "it is a folder; give a file path"
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return "something other than a plain file is there; give a new path or a plain file's"
    existing = next(p for p in path.parents if p.exists())
    if not existing.is_dir():
        return f"{existing} is not a folder"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path.parent).close()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
