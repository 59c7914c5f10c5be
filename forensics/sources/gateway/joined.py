"""Small files read as one: their decoded lines joined into one plain file per thread.

``read_json`` costs about a millisecond of CPU per file beyond its bytes, and a file's few hundred
rows fill the mapping's vectors a tenth (642 hourly ``.gz`` Logpush files of 230 records: the
toolkit's INSERT 2.4 CPU-s over the files, 0.9 over the same lines as one plain file). So the pass
that hashes and counts each file of a batch (:func:`scan_file`) also writes its decoded bytes to a
joined file, one per thread, the files in order; ``read_json`` reads the joined files, and each
row's file and line come from the files' line counts (:func:`number_joined`). What DuckDB parses is
then exactly the bytes that were hashed. That holds only when every line is one row, read as in a file of its own: a
file that may have a blank line (``Scan.maybe_blank``) or starts with a byte-order mark (which
``read_json`` drops at a file's start only: ``Scan.bom``) is read on its own, and a joined file whose row count
is not the sum of its files' lines is not kept (the caller reads those files the usual way).

Example:
    >>> import tempfile
    >>> from forensics.sources.files import Snapshot
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "a").write_bytes(b"1\\n2\\n"); _ = (d / "b").write_bytes(b"3")
    >>> scans, joined = scan_joined([Snapshot.take(d / "a"), Snapshot.take(d / "b")], [[], []], [True, True], d)
    >>> [s.lines for s in scans], [len(j.parts) for j in joined]
    ([2, 1], [1, 1])
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from forensics.sources.files import Snapshot
from forensics.sources.gateway.scan import Scan, scan_file

#: Decoded bytes a batch may write to joined files (beyond it, files are read as they are):
#: bounds the temporary disk a batch of up to 1 GiB of compressed files needs.
JOINED_MAX_BYTES = 512 << 20


@dataclass
class Part:
    """One file's lines in a joined file."""

    #: the file's position in the batch
    index: int
    #: its decoded bytes' place in the joined file (a line end added after an open last line)
    start: int
    end: int
    #: its physical lines (= its rows)
    lines: int
    #: the file's evidence id, once registered
    file_id: int = 0


@dataclass
class Joined:
    """One joined file and the files it holds, in order."""

    path: Path
    parts: list[Part] = field(default_factory=list)


def scan_joined(snaps: Sequence[Snapshot], cuts: Sequence[list[int]], join: Sequence[bool],
                dest: Path, budget: int = JOINED_MAX_BYTES) -> tuple[list[Scan], list[Joined]]:
    """Scan every file (two threads); those marked ``join`` are also decoded into joined files.

    The batch is cut in two runs of files of about equal size, one per thread, each written to its
    own joined file in file order (``dest/joined-<k>.ndjson``), until ``budget`` bytes are written.
    """
    total = sum(s.size for s in snaps)
    cut, acc = len(snaps), 0
    for i, s in enumerate(snaps):
        if acc >= total / 2:
            cut = i
            break
        acc += s.size
    runs = [range(0, cut), range(cut, len(snaps))]
    scans: list[Scan | None] = [None] * len(snaps)

    def work(k: int) -> Joined:
        joined = Joined(dest / f"joined-{k}.ndjson")
        with open(joined.path, "wb") as sink:
            for i in runs[k]:
                if not join[i] or sink.tell() >= budget // 2:
                    scans[i] = scan_file(snaps[i], cuts[i])
                    continue
                start = sink.tell()
                sc = scans[i] = scan_file(snaps[i], cuts[i], sink=sink)
                if sc.open_tail:
                    sink.write(b"\n")  # else the next file's first line would continue this one's last
                joined.parts.append(Part(i, start, sink.tell(), sc.lines))
        return joined

    with ThreadPoolExecutor(max_workers=2) as pool:
        out = list(pool.map(work, range(len(runs))))
    done = [s for s in scans if s is not None]
    assert len(done) == len(snaps)
    return done, [j for j in out if j.parts]


def keep_only(joined: list[Joined], wanted: dict[int, int]) -> list[Joined]:
    """The joined files with only the parts of ``wanted`` (batch position -> file id) in them.

    A joined file that holds a file not to read this way (skipped as already in the case, to be
    read on its own) is written again without it: rare, so simply copied.
    """
    out: list[Joined] = []
    for j in joined:
        keep = [p for p in j.parts if p.index in wanted]
        for p in keep:
            p.file_id = wanted[p.index]
        if not keep:
            continue
        if len(keep) < len(j.parts):
            again = Joined(j.path.with_name(j.path.stem + "-kept.ndjson"))
            with open(j.path, "rb") as src, open(again.path, "wb") as sink:
                for p in keep:
                    src.seek(p.start)
                    start = sink.tell()
                    sink.write(src.read(p.end - p.start))
                    again.parts.append(Part(p.index, start, sink.tell(), p.lines, p.file_id))
            out.append(again)
        else:
            out.append(Joined(j.path, keep))
    return out


def number_joined(con: duckdb.DuckDBPyConnection, joined: list[Joined]) -> bool:
    """Give the freshly committed rows of joined files their files and lines; False if unsure.

    The INSERT wrote every row of a joined file with its first file's id; with insertion order
    preserved its rows are one block of rowids in line order, so the rows of its k-th file are the
    next ``lines`` rowids after those of the files before it. False (nothing changed) when a joined
    file's rows are not one block or not as many as its files' lines: the caller reads them again.
    """
    holders = [j.parts[0].file_id for j in joined]
    spans = dict((int(f), (int(lo), int(hi), int(n))) for f, lo, hi, n in con.execute(
        "SELECT file_id, min(rowid), max(rowid), count(*) FROM gateway_requests "
        "WHERE list_contains($h, file_id) GROUP BY file_id", {"h": holders}).fetchall())
    fids: list[int] = []
    los: list[int] = []
    ns: list[int] = []
    for j, holder in zip(joined, holders, strict=True):
        lo, hi, n = spans.get(holder, (0, -1, 0))
        if n != sum(p.lines for p in j.parts) or hi - lo + 1 != n:
            return False
        for p in j.parts:
            fids.append(p.file_id)
            los.append(lo)
            ns.append(p.lines)
            lo += p.lines
    # one row per line (rowid, file, line) joined on the rowid: a range join of the rows with the
    # files' bounds cost 15x more (0.35 against 0.02 CPU-s for 148,270 rows of 642 files)
    con.execute(
        "UPDATE gateway_requests g SET file_id = x.fid, line_no = x.k + 1 FROM ("
        "SELECT p.fid, p.lo + r.k AS rid, r.k FROM (SELECT unnest($f) AS fid, unnest($lo) AS lo, unnest($n) AS n) p, "
        "LATERAL (SELECT range AS k FROM range(p.n)) r) x WHERE g.rowid = x.rid",
        {"f": fids, "lo": los, "n": ns})
    return True
