"""The collection-wrapper interface, and the helpers every wrapper builds its batches with.

A wrapper turns a batch of whole physical lines (``LineBatch.from_bytes`` of a block) into a
batch of logical lines: it strips its prefix or record, keeps the collector's time, stream and
pod, joins partial lines, and sets aside what is not one of its records (``rejected``, with the
reason): a wrapper line is never handed on as an engine line it could not read.

``strip(phys, final=...)`` returns the batch and how many physical lines it used: a prefix of
``phys``; the rest (the start of a logical line whose end is in the next block) is handed back.
With ``final`` (end of file) everything is used.

Example:
    >>> b = LineBatch.from_bytes(b"a\\nb\\n")
    >>> out, used = Plain(Path("x"), {}).strip(b, final=False)
    >>> out.wrapper, used, out.next_line
    ('plain', 2, 3)
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa

from forensics.sources.lines import LineBatch


class Wrapper:
    """Base class: one instance per file read (a wrapper may keep state across batches)."""

    name: ClassVar[str] = "plain"
    #: collector times are real UTC instants (False: zone-less local times, converted)
    collector_exact: ClassVar[bool] = True
    #: where the format is documented (for docs/engine.md and the tests' fixtures)
    source: ClassVar[str] = ""

    def __init__(self, path: Path, context: dict[str, object]) -> None:
        self.path = path
        self.context = context
        self.warnings: list[str] = []

    def strip(self, phys: LineBatch, *, final: bool) -> tuple[LineBatch, int]:
        """Logical lines of ``phys`` and the number of physical lines used."""
        raise NotImplementedError


class Plain(Wrapper):
    """No wrapper: every physical line is a logical line (also Loki ``logcli -o raw``)."""

    name = "plain"
    source = "bare lines as the program wrote them; Loki `logcli query -o raw` prints the same"

    def strip(self, phys: LineBatch, *, final: bool) -> tuple[LineBatch, int]:
        return replace(phys, wrapper=self.name), phys.phys_lines


def assemble(
    phys: LineBatch,
    wrapper: Wrapper,
    *,
    first: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    used: int,
    buf: np.ndarray | None = None,
    n_phys: np.ndarray | None = None,
    collector_us: np.ndarray | None = None,
    stream: np.ndarray | None = None,
    pod: pa.Array | None = None,
    rejected_idx: np.ndarray | None = None,
    reasons: str | list[str] = "",
) -> LineBatch:
    """Build a wrapper's output batch from per-logical-line arrays.

    ``first`` is each logical line's first physical line (an index into ``phys``, increasing);
    ``starts``/``ends`` address its text in ``buf`` (default ``phys.buf``); ``used`` physical
    lines are covered; ``rejected_idx`` (indices into ``phys``, all below ``used``) are set aside
    with ``reasons`` (one for all, or one each).

    Example:
        >>> b = LineBatch.from_bytes(b"xa\\nyb\\n")
        >>> out = assemble(b, Plain(Path("x"), {}), first=np.array([1]), starts=np.array([4]),
        ...                ends=np.array([5]), used=2, rejected_idx=np.array([0]), reasons="bad")
        >>> out.line(0), out.line_no.tolist(), out.rejected, out.phys_lines
        (b'b', [2], ((1, 'bad', b'xa'),), 2)
    """
    n = phys.phys_lines
    rej: tuple[tuple[int, str, bytes], ...] = ()
    if rejected_idx is not None and rejected_idx.size:
        why = [reasons] * int(rejected_idx.size) if isinstance(reasons, str) else reasons
        rej = tuple(
            (int(phys.line_no[i]), str(r), phys.line(int(i))) for i, r in zip(rejected_idx.tolist(), why, strict=True)
        )
    if pod is not None and not isinstance(pod.type, pa.DictionaryType):
        pod = pod.dictionary_encode()
    return LineBatch(
        buf=phys.buf if buf is None else buf,
        starts=starts.astype(np.int64, copy=False),
        ends=ends.astype(np.int64, copy=False),
        line_no=phys.line_no[first],
        offset=phys.offset[first],
        phys_lines=used,
        n_phys=None if n_phys is None else n_phys.astype(np.int32, copy=False),
        collector_us=collector_us,
        stream=None if stream is None else stream.astype(np.int8, copy=False),
        pod=pod,
        rejected=phys.rejected + rej,
        wrapper=wrapper.name,
        collector_exact=wrapper.collector_exact,
        next_line=int(phys.line_no[used]) if used < n else phys.next_line,
        next_offset=int(phys.offset[used]) if used < n else phys.next_offset,
    )


def concat_spans(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copy the spans back to back into a new buffer: ``(data, offsets)`` (``len(starts) + 1`` offsets).

    Example:
        >>> data, off = concat_spans(np.frombuffer(b"abcdef", dtype=np.uint8), np.array([4, 0]), np.array([6, 2]))
        >>> data.tobytes(), off.tolist()
        (b'efab', [0, 2, 4])
    """
    lengths = (ends - starts).astype(np.int64)
    n = int(starts.shape[0])
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if not offsets[-1]:
        return np.zeros(0, dtype=np.uint8), offsets
    if n == 1 or bool(np.all(starts[1:] >= ends[:-1])):
        # spans in order without overlap: a one-byte mask over the buffer (an index per byte
        # would take 8 bytes per byte)
        from forensics.sources.lines import span_mask

        return buf[span_mask(int(buf.size), starts.astype(np.int64), ends.astype(np.int64))], offsets
    idx = np.repeat(starts.astype(np.int64) - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
    return buf[idx], offsets


def join_groups(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, group: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Join consecutive spans of the same group (``group`` non-decreasing) into one text each.

    Returns ``(new_buf, starts, ends)`` of the groups, in group order, in a new buffer.

    Example:
        >>> b = np.frombuffer(b"ab-cd-ef", dtype=np.uint8)
        >>> nb, s, e = join_groups(b, np.array([0, 3, 6]), np.array([2, 5, 8]), np.array([0, 0, 1]))
        >>> [nb[x:y].tobytes() for x, y in zip(s, e)]
        [b'abcd', b'ef']
    """
    data, off = concat_spans(buf, starts, ends)
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if group.size else np.zeros(0, dtype=np.int64)
    g_start = off[first]
    g_end = np.r_[off[first[1:]], off[-1]] if first.size else np.zeros(0, dtype=np.int64)
    return data, g_start, g_end
