"""What an ingest did: per-file counts, totals, elapsed time and throughput."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass
class FileSummary:
    """Counts for one source file.

    ``lines_read == rows_loaded + rows_rejected + rows_duplicate + lines_joined + lines_framing``
    always holds for a file that was read (``skipped`` is set instead when it was already in the
    case). ``lines_joined`` are partial lines a collector split and the loader joined into the
    line they continue (CRI ``P`` chunks, Docker records without ``\n``); ``lines_framing`` the
    lines of a wrapper that hold no log line (a JSON document's brackets, blank lines between records).

    Example:
        >>> FileSummary(path="a.log", lines_read=3, rows_loaded=2, rows_rejected=1).reconciles
        True
    """

    path: str
    file_id: int | None = None
    kind: str = ""
    format: str = ""
    layer: str | None = None
    node: str | None = None
    size: int = 0
    lines_read: int = 0
    rows_loaded: int = 0
    rows_rejected: int = 0
    rows_duplicate: int = 0
    lines_joined: int = 0
    lines_framing: int = 0
    complete: bool = True
    skipped: str | None = None  # e.g. "already in case as file_id 3"
    not_read: str | None = None  # why an unreadable file was not read (--skip-unreadable)
    warnings: list[str] = field(default_factory=list)
    detected: str | None = None  # "auto-detected cloudflare-http (RayID, EdgeStartTimestamp)"

    @property
    def reconciles(self) -> bool:
        """True when every line read is accounted for."""
        return self.lines_read == (self.rows_loaded + self.rows_rejected + self.rows_duplicate
                                   + self.lines_joined + self.lines_framing)


@dataclass
class IngestSummary:
    """The result of one ingest call.

    Example:
        >>> s = IngestSummary(files=[FileSummary("a", lines_read=2, rows_loaded=2, size=10)], elapsed_s=1.0)
        >>> s.rows_loaded, s.rows_per_s
        (2, 2.0)
    """

    files: list[FileSummary] = field(default_factory=list)
    elapsed_s: float = 0.0
    #: unrecognised-line samples and counts by kind (engine loader), for the summary
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def lines_read(self) -> int:
        return sum(f.lines_read for f in self.files)

    @property
    def rows_loaded(self) -> int:
        return sum(f.rows_loaded for f in self.files)

    @property
    def rows_rejected(self) -> int:
        return sum(f.rows_rejected for f in self.files)

    @property
    def rows_duplicate(self) -> int:
        return sum(f.rows_duplicate for f in self.files)

    @property
    def bytes_read(self) -> int:
        return sum(f.size for f in self.files if f.skipped is None and f.not_read is None)

    @property
    def rows_per_s(self) -> float:
        return self.lines_read / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def warnings(self) -> list[str]:
        return [f"{f.path}: {w}" for f in self.files for w in f.warnings]

    def extend(self, other: IngestSummary) -> None:
        """Merge another summary into this one (used when one CLI call loads several kinds)."""
        self.files.extend(other.files)
        self.elapsed_s += other.elapsed_s
        for k, v in other.notes.items():
            self.notes.setdefault(k, v)

    def to_frame(self) -> pd.DataFrame:
        """One row per file, as a DataFrame."""
        rows = [dataclasses.asdict(f) for f in self.files]
        for r in rows:
            r["warnings"] = "; ".join(r["warnings"])
        return pd.DataFrame(rows)

    def render(self) -> str:
        """A plain-text table of the summary, as the CLI prints it."""
        lines = [
            f"{'file':<60} {'format':<22} {'read':>10} {'loaded':>10} {'rejected':>9} {'dup':>7}  note"
        ]
        for f in self.files:
            name = f.path if len(f.path) <= 60 else "..." + f.path[-57:]
            note = (f"NOT READ: {f.not_read}" if f.not_read else f.skipped
                    or ("INCOMPLETE " if not f.complete else "") + "; ".join(f.warnings))
            fmt = (f.format or "")[:22]
            lines.append(
                f"{name:<60} {fmt:<22} {f.lines_read:>10} {f.rows_loaded:>10} "
                f"{f.rows_rejected:>9} {f.rows_duplicate:>7}  {note}".rstrip()
            )
        unread = sum(1 for f in self.files if f.not_read)
        lines.append(
            f"total: {len(self.files)} files{f' ({unread} NOT READ)' if unread else ''}, "
            f"{self.lines_read} read, {self.rows_loaded} loaded, "
            f"{self.rows_rejected} rejected, {self.rows_duplicate} duplicate; "
            f"{self.elapsed_s:.2f} s, {self.rows_per_s:,.0f} rows/s, {self.mb_per_s:.1f} MB/s"
        )
        for key, value in self.notes.items():
            lines.append(f"{key}: {value}")
        return "\n".join(lines)
