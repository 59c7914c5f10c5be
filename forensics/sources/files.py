"""Shared plumbing of the loaders: find files, fingerprint them, register the evidence.

Sources are opened read-only and never modified. Each file read gets one ``evidence_files`` row
with its sha256, size and counts; a file whose sha256 is already in the case is skipped
(idempotent ingest).
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import numpy as np

from forensics.errors import InputError

if TYPE_CHECKING:
    import duckdb
    from rich.progress import Progress


#: Raw bytes kept per rejected line.
RAW_CAP = 4096

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass(frozen=True)
class Unreadable:
    """A path that could not be read (permission, I/O error), for the summary's "not read" list."""

    path: Path
    reason: str


def walk_files(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    skip_unreadable: bool = False,
) -> tuple[list[Path], list[Unreadable]]:
    """Expand files, directories (recursively) and globs into files, and the paths not readable.

    Directories are walked following symbolic links (a link to a directory is read like the
    directory; a link back to an ancestor is a loop, taken once); hidden entries (``.name``)
    inside them are ignored, an explicit path is always taken. A file or directory that cannot
    be read is an :class:`~forensics.errors.InputError` naming it, or with ``skip_unreadable``
    is listed in the second result. Files are de-duplicated by their resolved path.

    Example:
        >>> walk_files([])
        Traceback (most recent call last):
        ...
        forensics.errors.InputError: no input paths given (pass a file, a directory or a glob)
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    items = [os.fspath(p) for p in paths]
    if not items:
        raise InputError("no input paths given", hint="pass a file, a directory or a glob")
    out: list[Path] = []
    unreadable: list[Unreadable] = []

    refuse = _refuser(skip_unreadable, unreadable)

    for item in items:
        p = Path(item)
        try:
            kind = "dir" if p.is_dir() else "file" if p.exists() else None
        except OSError as exc:  # e.g. a path inside a directory we may not enter
            refuse(p, exc)
            continue
        if kind == "dir":
            found = _walk_dir(p, refuse)
            if not found and not unreadable:
                raise InputError(f"directory {item} contains no files", hint="check the path")
            out.extend(found)
        elif kind == "file":
            if not os.access(p, os.R_OK):
                refuse(p, "permission denied")
            elif p.is_file():
                out.append(p)
            else:
                raise InputError(f"{item} is not a regular file", hint="pass a file, a directory or a glob")
        elif glob.has_magic(item):
            found = sorted(Path(q) for q in glob.glob(item, recursive=True) if Path(q).is_file())
            if not found:
                raise InputError(f"no files match {item}", hint="check the glob pattern")
            out.extend(found)
        elif p.is_symlink():
            raise InputError(f"{item} is a broken symbolic link", hint="check where it points")
        else:
            raise InputError(f"{item}: no such file or directory", hint="check the path")
    # de-duplicate while keeping order
    seen: set[Path] = set()
    unique = []
    for q in out:
        r = q.resolve()
        if r not in seen:
            seen.add(r)
            unique.append(q)
    return unique, unreadable


def expand_paths(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The files :func:`walk_files` expands ``paths`` into, in the order a loader reads them.

    Example:
        >>> import tempfile; d = Path(tempfile.mkdtemp()); _ = (d / "b.log").write_text("x")
        >>> _ = (d / "a.log").write_text("y")
        >>> [p.name for p in expand_paths(d)]
        ['a.log', 'b.log']
    """
    return walk_files(paths)[0]


def _refuser(skip_unreadable: bool, unreadable: list[Unreadable]) -> Callable[[Path, OSError | str], None]:
    def refuse(path: Path, exc: OSError | str) -> None:
        reason = exc if isinstance(exc, str) else (exc.strerror or type(exc).__name__).lower()
        if not skip_unreadable:
            raise InputError(f"cannot read {path}: {reason}",
                             hint="fix its permissions, or pass --skip-unreadable to list it as not read")
        unreadable.append(Unreadable(path, reason))

    return refuse


def walk_dir(root: Path, *, skip_unreadable: bool = False, unread: list[Unreadable] | None = None,
             dangling: list[Path] | None = None) -> list[Path]:
    """Every readable regular file under ``root`` (links followed, loops cut, hidden entries skipped).

    An unreadable file or directory is an InputError naming it, or with ``skip_unreadable`` is
    appended to ``unread``. Symbolic links whose target is missing are appended to ``dangling``.

    Example:
        >>> import tempfile; d = Path(tempfile.mkdtemp()); _ = (d / "a.log").write_text("x")
        >>> (d / "loop").symlink_to(d)
        >>> [p.name for p in walk_dir(d)]
        ['a.log']
    """
    return _walk_dir(root, _refuser(skip_unreadable, unread if unread is not None else []), dangling)


def _walk_dir(root: Path, refuse: Callable[[Path, OSError | str], None],
              dangling: list[Path] | None = None) -> list[Path]:
    """Every readable regular file under ``root``, following directory links once (loop-safe)."""
    found: list[Path] = []
    visited: set[tuple[int, int]] = set()

    def onerror(exc: OSError) -> None:
        refuse(Path(exc.filename) if exc.filename else root, exc)

    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=onerror):
        here = Path(dirpath)
        try:
            st = here.stat()
        except OSError as exc:
            refuse(here, exc)
            dirnames[:] = []
            continue
        key = (st.st_dev, st.st_ino)
        if key in visited:  # a link back to a directory already walked: a loop (or a second name)
            dirnames[:] = []
            continue
        visited.add(key)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            f = here / name
            if not f.is_file():
                if dangling is not None and f.is_symlink() and not f.exists():
                    dangling.append(f)
                continue  # a broken link, a socket, a device: not evidence files
            if not os.access(f, os.R_OK):
                refuse(f, "permission denied")
                continue
            found.append(f)
    return sorted(found)


@dataclass(frozen=True)
class Snapshot:
    """A source file as it was when opened: everything read from it stops at ``size`` bytes.

    A live log keeps growing while it is read; the evidence is the ``size`` bytes seen at open
    (hashed exactly), and :meth:`changed` tells afterwards whether the file moved meanwhile.

    Example:
        >>> import tempfile; p = Path(tempfile.mkdtemp()) / "a.log"; _ = p.write_bytes(b"one\\n")
        >>> snap = Snapshot.take(p); _ = open(p, "ab").write(b"two\\n")
        >>> with snap.open() as fh: fh.read()
        b'one\\n'
        >>> snap.changed()
        'it grew from 4 to 8 bytes while it was read'
    """

    path: Path
    size: int
    mtime_ns: int
    dev: int
    ino: int
    #: 'gzip', 'zstd' or 'none', by the magic bytes
    compression: str = "none"
    #: the absolute path with every link resolved (what the evidence record names)
    resolved: str = ""

    @classmethod
    def take(cls, path: Path) -> Snapshot:
        """Stat ``path`` through an open descriptor (so it is readable); InputError if not."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            reason = (exc.strerror or type(exc).__name__).lower()
            raise InputError(f"cannot read {path}: {reason}",
                             hint="fix its permissions, or pass --skip-unreadable to list it as not read") from exc
        try:
            st = os.fstat(fd)
            head = os.read(fd, 4)
        finally:
            os.close(fd)
        comp = "gzip" if head[:2] == GZIP_MAGIC else "zstd" if head == ZSTD_MAGIC else "none"
        return cls(path, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, comp, os.path.realpath(path))

    @contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        """The file for binary reading, bounded to the snapshot's size (seekable)."""
        with open(self.path, "rb") as fh:
            yield cast(IO[bytes], _BoundedFile(fh, self.size))

    def changed(self) -> str | None:
        """None if the file is as it was at open; else what changed, as a phrase."""
        try:
            st = self.path.stat()
        except OSError as exc:
            return f"it could no longer be read after it was read ({exc.strerror or exc})"
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            return "it was replaced by another file while it was read"
        if st.st_size > self.size:
            return f"it grew from {self.size} to {st.st_size} bytes while it was read"
        if st.st_size < self.size:
            return f"it shrank from {self.size} to {st.st_size} bytes while it was read"
        if st.st_mtime_ns != self.mtime_ns:
            return "it was modified while it was read"
        return None


class _BoundedFile(io.RawIOBase):
    """A read-only view of the first ``size`` bytes of an open file."""

    def __init__(self, fh: IO[bytes], size: int) -> None:
        self.fh, self.size = fh, size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.fh.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        target = {0: offset, 1: self.fh.tell() + offset, 2: self.size + offset}[whence]
        return self.fh.seek(max(0, min(target, self.size)))

    def readinto(self, buf: Any) -> int:
        left = self.size - self.fh.tell()
        if left <= 0:
            return 0
        view = memoryview(buf)[: min(len(buf), left)]
        return int(self.fh.readinto(view) or 0)  # type: ignore[attr-defined]

    def read(self, n: int = -1) -> bytes:
        left = self.size - self.fh.tell()
        if left <= 0:
            return b""
        return self.fh.read(left if n is None or n < 0 else min(n, left))


@dataclass(frozen=True)
class Fingerprint:
    """The sha256 of a snapshot's bytes, of its first 4 KiB, and of the prefixes asked for."""

    sha256: str
    head_sha256: str
    prefixes: dict[int, str]


def fingerprint(snap: Snapshot, cuts: Iterable[int] = (), chunk: int = 1 << 20) -> Fingerprint:
    """Hash exactly the snapshot's bytes, and their first 4 KiB and ``cuts`` prefixes, in one pass.

    Example:
        >>> import tempfile; p = Path(tempfile.mkdtemp()) / "a"; _ = p.write_bytes(b"abc")
        >>> fp = fingerprint(Snapshot.take(p), [1])
        >>> fp.sha256 == hashlib.sha256(b"abc").hexdigest(), fp.prefixes[1] == hashlib.sha256(b"a").hexdigest()
        (True, True)
    """
    h = PrefixHasher(cuts)
    with snap.open() as fh:
        first = fh.read(4096)
        head = hashlib.sha256(first).hexdigest()
        h.update(first)
        while block := fh.read(chunk):
            h.update(block)
    return Fingerprint(h.hexdigest(), head, h.prefixes)


class PrefixHasher:
    """sha256 of a stream and of some of its prefixes, in one pass (growth: is a known file a prefix?).

    Example:
        >>> h = PrefixHasher([2]); h.update(b"abc")
        >>> h.prefixes[2] == hashlib.sha256(b"ab").hexdigest(), h.hexdigest() == hashlib.sha256(b"abc").hexdigest()
        (True, True)
    """

    def __init__(self, cuts: Iterable[int] = ()) -> None:
        self.h = hashlib.sha256()
        self.pos = 0
        self._cuts = sorted({int(c) for c in cuts if c > 0}, reverse=True)
        #: prefix size -> hex sha256 of the stream's first that many bytes
        self.prefixes: dict[int, str] = {}

    def update(self, data: bytes | memoryview) -> None:
        mv = memoryview(data)
        while self._cuts and self.pos + len(mv) >= self._cuts[-1]:
            k = self._cuts.pop() - self.pos
            self.h.update(mv[:k])
            self.pos += k
            mv = mv[k:]
            self.prefixes[self.pos] = self.h.copy().hexdigest()
        self.h.update(mv)
        self.pos += len(mv)

    def hexdigest(self) -> str:
        return self.h.hexdigest()


def count_newlines(data: bytes) -> int:
    """Number of ``\\n`` bytes in ``data``.

    ``bytes.count`` scans a byte at a time (~2.5 GB/s); numpy's vectorised compare is ~3x faster,
    which matters when a multi-GB file is counted beside its load (measured: 3.6 GB, 1.3 s -> 0.4 s).

    Example:
        >>> count_newlines(b"a\\nb\\n\\nc")
        3
    """
    if len(data) < 4096:
        return data.count(b"\n")
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == 10))


def compression_of(path: Path) -> str:
    """'gzip', 'zstd' or 'none', by the file's magic bytes (not its name).

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(delete=False); _ = f.write(b"{}"); f.close()
        >>> compression_of(Path(f.name))
        'none'
    """
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    if head == ZSTD_MAGIC:
        return "zstd"
    return "none"


@contextmanager
def open_decompressed(path: Path) -> Iterator[IO[bytes]]:
    """Open a file for binary reading, transparently decompressing gzip and zstd.

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(delete=False); _ = f.write(b"ab"); f.close()
        >>> with open_decompressed(Path(f.name)) as fh: fh.read()
        b'ab'
    """
    with open(path, "rb") as raw, decompressing(raw, compression_of(path)) as fh:
        yield fh


@contextmanager
def decompressing(raw: IO[bytes], comp: str) -> Iterator[IO[bytes]]:
    """Read ``raw`` decompressed (``comp``: 'gzip', 'zstd' or 'none'), every gzip member and zstd frame.

    Gzip is inflated with ISA-L (~6x zlib's speed); its errors are raised as ``zlib.error``, which
    callers expect. ``raw`` stays open (a caller may go on reading it, say to hash the rest).

    Example:
        >>> import gzip, io
        >>> with decompressing(io.BytesIO(gzip.compress(b"a") + gzip.compress(b"b")), "gzip") as fh: fh.read()
        b'ab'
    """
    if comp == "gzip":
        from isal import igzip, igzip_lib

        try:
            with igzip.IGzipFile(fileobj=raw) as fh:
                yield cast(IO[bytes], fh)
        except cast("type[Exception]", igzip_lib.IsalError) as exc:
            raise zlib.error(str(exc)) from exc
    elif comp == "zstd":
        import zstandard

        # rotated or cat-joined .zst files hold several frames: read them all, not just the first
        with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False) as fh:
            yield fh
    else:
        yield raw


def head_bytes(path: Path, n: int = 65536) -> bytes:
    """The first ``n`` decompressed bytes (for format detection); tolerant of damaged streams.

    Example:
        >>> import gzip, tempfile; f = tempfile.NamedTemporaryFile(delete=False)
        >>> _ = f.write(gzip.compress(b"abc\\n" * 100)[:-9]); f.close()
        >>> head_bytes(Path(f.name), 8)
        b'abc\\nabc\\n'
    """
    from forensics.sources.compressed import StreamReport, decoded_blocks, zstd_layout

    comp = compression_of(path)
    out = bytearray()
    with open(path, "rb") as fh:
        layout = zstd_layout(fh) if comp == "zstd" else None
        for block in decoded_blocks(fh, comp, StreamReport(comp), block=min(n, 1 << 20), zstd_layout=layout):
            out += block
            if len(out) >= n:
                break
    return bytes(out[:n])


def store_rejected(con: duckdb.DuckDBPyConnection, file_id: int, rows: Sequence[tuple[int, str, bytes]]) -> int:
    """Keep rejected lines ``(line_no, reason, raw)``: raw redacted (no prompt text), capped at 4 KiB.

    ``raw_length`` keeps the original length.
    """
    if not rows:
        return 0
    from forensics.sources.redact import redact_raw

    con.executemany(
        "INSERT INTO rejected_lines VALUES (?, ?, ?, ?, ?)",
        [(file_id, ln, reason, redact_raw(raw)[:RAW_CAP], len(raw)) for ln, reason, raw in rows],
    )
    return len(rows)


@contextmanager
def progress_bar(quiet: bool, total_bytes: int, description: str) -> Iterator[Progress | None]:
    """A rich progress bar over files and bytes (None when quiet or not a terminal).

    Example:
        >>> with progress_bar(True, 0, "x") as bar: bar is None
        True
    """
    if quiet:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[file]}"),
        transient=True,
    ) as bar:
        bar.add_task(description, total=total_bytes, file="")
        yield bar
