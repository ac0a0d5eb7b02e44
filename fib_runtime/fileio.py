"""Crash- and concurrency-safe file writes.

- :func:`atomic_write_text`: temp file in the same folder + ``fsync`` + ``os.replace``; readers
  see the old or the new file, never half of one.
- :func:`append_lines`: whole lines appended under an exclusive ``flock`` on the file itself, in
  one ``write`` call; a missing trailing newline left by a crashed writer is repaired first. Many
  processes (TP ranks, benchmark workers) can append to one JSONL file at once without
  interleaving or losing a line.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Tuple, Union

PathLike = Union[str, os.PathLike]


def _file_mode(path: Path) -> int:
    """Mode for a rewritten file: the old file's, else what ``open()`` would give (0666 & ~umask).

    ``mkstemp`` creates 0600 files; without this every file the store rewrote would become
    unreadable to the other users of a shared dataset folder.
    """
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write_text(path: PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def locked(path: PathLike, mode: str = "a+b") -> Iterator:
    """Open ``path`` and hold an exclusive ``flock`` on it for the ``with`` block."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield f
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def append_lines(path: PathLike, lines: Iterable[str], fsync: bool = False) -> int:
    """Append ``lines`` (without newlines) as whole lines; returns bytes written."""
    body = "".join(line.rstrip("\n") + "\n" for line in lines).encode("utf-8")
    if not body:
        return 0
    with locked(path, "a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                body = b"\n" + body
        f.seek(0, os.SEEK_END)
        f.write(body)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    return len(body)


def read_lines(path: PathLike) -> Iterator[Tuple[int, str]]:
    """Yield ``(line_number, text)`` for every non-blank line (1-based numbers)."""
    with open(path, "r", encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                yield i, line
