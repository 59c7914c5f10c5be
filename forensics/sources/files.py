"""Shared plumbing of the loaders: find files, fingerprint them, register the evidence.

Sources are opened read-only and never modified. Each file read gets one ``evidence_files`` row
with its sha256, size and counts; a file whose sha256 is already in the case is skipped
(idempotent ingest).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import numpy as np

from forensics import __version__
from forensics.errors import InputError

if TYPE_CHECKING:
    from rich.progress import Progress

    from forensics.case import Case

#: Raw bytes kept per rejected line.
RAW_CAP = 4096

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def expand_paths(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand files, directories (recursively) and globs into a sorted list of files.

    Hidden files (``.name``) inside directories are ignored; an explicit path is always taken.

    Example:
        >>> expand_paths([])
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
    for item in items:
        p = Path(item)
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            found = sorted(
                q
                for q in p.rglob("*")
                if q.is_file() and not any(part.startswith(".") for part in q.relative_to(p).parts)
            )
            if not found:
                raise InputError(f"directory {item} contains no files", hint="check the path")
            out.extend(found)
        elif glob.has_magic(item):
            found = sorted(Path(q) for q in glob.glob(item, recursive=True) if Path(q).is_file())
            if not found:
                raise InputError(f"no files match {item}", hint="check the glob pattern")
            out.extend(found)
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
    return unique


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes.

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(delete=False); _ = f.write(b"x"); f.close()
        >>> sha256_file(Path(f.name))[:12]
        '2d711642b726'
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


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


def gunzip_block(d: zlib._Decompress, block: bytes) -> tuple[zlib._Decompress, bytes]:
    """Decompress one block of gzip input, continuing across concatenated gzip members.

    Returns the decompressor for the next block (a new one once a member ended inside this block)
    and everything this block decompressed to. Rotated and ``cat``-joined logs hold several members.

    Example:
        >>> import gzip; data = gzip.compress(b"a\\n") + gzip.compress(b"b\\n")
        >>> gunzip_block(zlib.decompressobj(16 + zlib.MAX_WBITS), data)[1]
        b'a\\nb\\n'
    """
    out = d.decompress(block)
    while d.eof and d.unused_data:
        rest = d.unused_data
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out += d.decompress(rest)
    return d, out


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
    """The first ``n`` decompressed bytes (for format detection); tolerant of truncation."""
    try:
        with open_decompressed(path) as fh:
            return fh.read(n)
    except (EOFError, OSError, zlib.error):
        return salvage_prefix(path, limit=n)[0]


def salvage_prefix(path: Path, limit: int | None = None) -> tuple[bytes, bool]:
    """Decompress as much of a (possibly truncated or corrupt) gzip/zstd file as possible.

    Returns ``(data, complete)``. Only whole lines are returned when the file is incomplete:
    a line cut by the break is dropped from the prefix (the caller records it as rejected).

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(delete=False)
        >>> import gzip; _ = f.write(gzip.compress(b"a\\nb\\n")[:-6]); f.close()
        >>> salvage_prefix(Path(f.name))[1]
        False
    """
    comp = compression_of(path)
    out = bytearray()
    complete = True
    if comp == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        with open(path, "rb") as fh:
            try:
                while block := fh.read(1 << 20):
                    d, data = gunzip_block(d, block)
                    out += data
                    if limit is not None and len(out) >= limit:
                        return bytes(out[:limit]), True
                complete = d.eof
            except zlib.error:
                complete = False
    elif comp == "zstd":
        import zstandard

        with open(path, "rb") as raw:
            reader = zstandard.ZstdDecompressor().stream_reader(raw)
            try:
                while block := reader.read(1 << 20):
                    out += block
                    if limit is not None and len(out) >= limit:
                        return bytes(out[:limit]), True
            except zstandard.ZstdError:
                complete = False
    else:
        with open(path, "rb") as fh:
            data = fh.read() if limit is None else fh.read(limit)
        return data, True
    return bytes(out), complete


@dataclass
class FileRecord:
    """An evidence_files row being filled in by a loader."""

    file_id: int
    path: Path
    sha256: str
    size: int
    compression: str


def find_existing(case: Case, sha256: str) -> int | None:
    """The file_id of an already ingested file with this sha256, if any."""
    row = case.con.execute(
        "SELECT file_id FROM evidence_files WHERE sha256 = $s ORDER BY file_id LIMIT 1", {"s": sha256}
    ).fetchall()
    # fetchall, not fetchone: a half-read result keeps the connection busy for the next statement
    return int(row[0][0]) if row else None


def register_file(
    case: Case,
    path: Path,
    *,
    kind: str,
    format: str | None,
    layer: str | None = None,
    node: str | None = None,
    tz: str | None = None,
    options: dict[str, Any] | None = None,
    sha256: str | None = None,
    complete: bool | None = False,
    file_id: int | None = None,
) -> FileRecord | int:
    """Add an ``evidence_files`` row for ``path``; return the record, or the existing file_id.

    A return of ``int`` means the same bytes (sha256) are already in the case: the caller must
    skip the file and say so. ``complete`` is the row's initial flag (NULL marks a load in
    progress). A caller registering many files may pass ``file_id`` (the next free one, known to
    it) after checking the sha256 itself: the look-ups are then skipped.
    """
    digest = sha256 or sha256_file(path)
    if file_id is None:
        existing = find_existing(case, digest)
        if existing is not None:
            return existing
        row = case.con.execute("SELECT coalesce(max(file_id), 0) + 1 FROM evidence_files").fetchall()[0]
        file_id = int(row[0]) if row else 1
    size = path.stat().st_size
    comp = compression_of(path)
    case.con.execute(
        """
        INSERT INTO evidence_files (file_id, path, sha256, size, kind, format, layer, node,
            compression, tz, lines_read, rows_loaded, rows_rejected, rows_duplicate, complete,
            warning, ingested_at, toolkit_version, options)
        VALUES ($file_id, $path, $sha, $size, $kind, $format, $layer, $node, $comp, $tz,
            0, 0, 0, 0, $complete, NULL, $at, $version, $options)
        """,
        {
            "file_id": file_id,
            "path": str(path.resolve()),
            "sha": digest,
            "size": size,
            "kind": kind,
            "format": format,
            "layer": layer,
            "node": node,
            "comp": comp,
            "tz": tz,
            "at": case.utcnow(),
            "version": __version__,
            "options": json.dumps(options or {}, sort_keys=True, default=str),
            "complete": complete,
        },
    )
    return FileRecord(file_id=file_id, path=path, sha256=digest, size=size, compression=comp)


def finish_file(
    case: Case,
    file_id: int,
    *,
    lines_read: int,
    rows_loaded: int,
    rows_rejected: int,
    rows_duplicate: int,
    complete: bool,
    warning: str | None = None,
    format: str | None = None,
    layer: str | None = None,
) -> None:
    """Write the final counts of a file into ``evidence_files``."""
    case.con.execute(
        """
        UPDATE evidence_files SET lines_read = $lr, rows_loaded = $rl, rows_rejected = $rr,
            rows_duplicate = $rd, complete = $c, warning = $w,
            format = coalesce($f, format), layer = coalesce($layer, layer)
        WHERE file_id = $id
        """,
        {
            "lr": lines_read,
            "rl": rows_loaded,
            "rr": rows_rejected,
            "rd": rows_duplicate,
            "c": complete,
            "w": warning,
            "f": format,
            "layer": layer,
            "id": file_id,
        },
    )


def store_rejected(case: Case, file_id: int, rows: Sequence[tuple[int, str, bytes]]) -> int:
    """Keep rejected lines ``(line_no, reason, raw)``; raw is capped at 4 KiB, length kept."""
    if not rows:
        return 0
    case.con.executemany(
        "INSERT INTO rejected_lines VALUES (?, ?, ?, ?, ?)",
        [(file_id, ln, reason, raw[:RAW_CAP], len(raw)) for ln, reason, raw in rows],
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
