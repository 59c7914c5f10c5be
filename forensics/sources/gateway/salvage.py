"""Salvage: the readable prefix of a truncated or corrupt compressed file, whole lines only."""

from __future__ import annotations

import tempfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.sources.files import RAW_CAP, compression_of, gunzip_block
from forensics.sources.gateway.load import Counts, load_file
from forensics.sources.gateway.sniffing import FilePlan

if TYPE_CHECKING:
    from forensics.case import Case


def salvage_to_file(path: Path, dest: Path) -> tuple[int, bytes]:
    """Decompress the readable prefix of a truncated gzip/zstd file into ``dest`` (whole lines).

    Returns ``(lines_written, partial_tail)``: the bytes of a line cut by the break.

    Example:
        >>> import gzip, tempfile; d = Path(tempfile.mkdtemp()); p = d / "t.gz"
        >>> _ = p.write_bytes(gzip.compress(bytes(range(256)) * 400 + b"\\n" * 10)[:-20])
        >>> salvage_to_file(p, d / "out")[0] > 0
        True
    """
    comp = compression_of(path)
    n_lines = 0
    tail = b""
    with open(dest, "wb") as out:
        def emit(block: bytes) -> None:
            nonlocal tail, n_lines
            data = tail + block
            cut = data.rfind(b"\n")
            if cut < 0:
                tail = data
                return
            out.write(data[: cut + 1])
            n_lines += data.count(b"\n", 0, cut + 1)
            tail = data[cut + 1:]

        if comp == "gzip":
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            with open(path, "rb") as fh:
                try:
                    while block := fh.read(1 << 20):
                        d, data = gunzip_block(d, block)
                        emit(data)
                except zlib.error:
                    pass
        elif comp == "zstd":
            import zstandard

            with open(path, "rb") as raw:
                reader = zstandard.ZstdDecompressor().stream_reader(raw)
                try:
                    while block := reader.read(1 << 20):
                        emit(block)
                except zstandard.ZstdError:
                    pass
    return n_lines, tail


def is_truncation(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("gzip", "zstd", "end of", "truncat", "decompress", "unexpected end"))


def load_salvaged(case: Case, plan: FilePlan, file_id: int, tz: str) -> tuple[Counts, str]:
    tmp_root = None if case.path == ":memory:" else Path(case.path).with_name(Path(case.path).name + ".tmp")
    if tmp_root is not None:
        tmp_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tmp_root) as d:
        dest = Path(d) / "salvaged.txt"
        n_lines, tail = salvage_to_file(plan.path, dest)
        counts = load_file(case, plan, file_id, tz, str(dest), "none", lambda: n_lines)
    if tail:
        case.con.execute("INSERT INTO rejected_lines VALUES (?, ?, ?, ?, ?)",
                         [file_id, n_lines + 1, "line cut by the end of the truncated compressed stream",
                          tail[:RAW_CAP], len(tail)])
        counts.lines += 1
        counts.rejected += 1
    warning = (f"truncated {compression_of(plan.path)} stream: kept the {n_lines} complete lines before "
               f"the break; the rest of the file is unreadable")
    return counts, warning
