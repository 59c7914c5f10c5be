"""Turn one file into :class:`~forensics.sources.lines.LineBatch` objects: split, unwrap, account.

The reader takes decompressed blocks (:mod:`.blocks`), indexes their newlines with numpy, and
hands whole physical lines to the file's collection wrapper (detected from the content,
:mod:`.detect`), which strips its prefix or record and may join partial lines. A wrapper may hold
back the physical lines of a logical line that is not finished yet (a CRI ``P`` chunk without its
``F``); they are read again with the next block, so a logical line is never split across
batches and a resumed load always starts at a logical line.

Accounting: every physical line is in exactly one batch, as a logical line, a joined part of one,
a rejected line, or the wrapper's framing (a JSON document's brackets); the reader's
:class:`ReadResult` holds the totals.

Example:
    >>> import tempfile; f = tempfile.NamedTemporaryFile(delete=False)
    >>> _ = f.write(b"one\\r\\ntwo\\nthree"); f.close()
    >>> r = read_lines(f.name)
    >>> [b.line(i) for b in r for i in range(len(b))], r.result.lines, r.result.wrapper
    ([b'one', b'two', b'three'], 3, 'plain')
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from forensics.errors import InputError
from forensics.sources.collect.blocks import BLOCK_BYTES, BlockStream, StreamStatus
from forensics.sources.lines import LineBatch

#: A physical line longer than this is rejected (its first bytes kept) instead of being held in
#: memory whole: memory stays bounded whatever the file holds.
MAX_LINE_BYTES = 64 << 20

#: Bytes of the decompressed head used to detect the wrapper.
HEAD_BYTES = 64 << 10


@dataclass
class ReadResult:
    """Totals of one file read, complete once the reader is exhausted.

    ``lines == logical + joined + rejected + framing`` holds for every file read.

    Example:
        >>> ReadResult().reconciles
        True
    """

    wrapper: str = "plain"
    #: why that wrapper (the detector's note), e.g. "cri: 200 of 200 sampled lines"
    detected: str = ""
    #: physical lines read (from the start offset on)
    lines: int = 0
    #: logical lines handed to the scanner
    logical: int = 0
    #: physical lines joined into an earlier logical line
    joined: int = 0
    #: physical lines set aside as rejected (with their reason)
    rejected: int = 0
    #: physical lines that are only the wrapper's framing (JSON document brackets, blank lines)
    framing: int = 0
    #: False when the stream was truncated or damaged (see ``status.problem``)
    complete: bool = True
    status: StreamStatus = field(default_factory=StreamStatus)
    #: other notes of the read (a line over the size cap, wrapper problems), one sentence each
    warnings: list[str] = field(default_factory=list)
    #: physical line and decompressed offset just after the last line read (resume point)
    next_line: int = 1
    next_offset: int = 0

    @property
    def reconciles(self) -> bool:
        """True when every physical line is accounted for."""
        return self.lines == self.logical + self.joined + self.rejected + self.framing


class LineReader:
    """Iterator of a file's :class:`LineBatch` objects; ``result`` holds the totals once exhausted.

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(delete=False); _ = f.write(b"a\\nb\\n"); f.close()
        >>> sum(len(b) for b in LineReader(Path(f.name), start_offset=2, start_line=2))
        1
    """

    def __init__(
        self, path: Path, *, wrapper: str = "auto", start_offset: int = 0, start_line: int = 1,
        block_bytes: int = BLOCK_BYTES, threaded: bool = True, context: dict[str, object] | None = None,
    ) -> None:
        self.path = path
        self.wrapper_name = wrapper
        self.start_offset = int(start_offset)
        self.start_line = int(start_line)
        self.block_bytes = int(block_bytes)
        self.threaded = threaded
        self.context = dict(context or {})
        self.result = ReadResult(next_line=self.start_line, next_offset=self.start_offset)
        if self.start_offset < 0 or self.start_line < 1:
            raise InputError(f"invalid resume point: byte {start_offset}, line {start_line}",
                             where=str(path), hint="offsets start at 0, lines at 1")

    def __iter__(self) -> Iterator[LineBatch]:
        res = self.result
        status = res.status
        stream = BlockStream(self.path, status, block_bytes=self.block_bytes, skip=self.start_offset,
                             threaded=self.threaded)
        try:
            yield from self._lines(stream)
        finally:
            stream.close()

    def _lines(self, stream: BlockStream) -> Iterator[LineBatch]:
        from forensics.sources.collect.detect import detect_wrapper, make_wrapper

        res = self.result
        status = res.status
        # the first blocks up to HEAD_BYTES (whatever the block size) show the wrapper
        ahead: list[bytes | bytearray] = []
        got = 0
        while got < HEAD_BYTES and (blk := stream.take()) is not None:
            ahead.append(blk)
            got += len(blk)
        first = bytes(ahead[0]) if ahead else b""
        if self.start_offset and first:
            # A resume point must be the start of a line: the byte before it is a newline.
            prev = _byte_before(self.path, self.start_offset)
            if prev not in (b"\n", b""):
                raise InputError(f"resume offset {self.start_offset} is not at the start of a line",
                                 where=str(self.path), hint="resume from a batch's next_offset")
        if self.wrapper_name == "auto":
            head = b"".join(ahead)[:HEAD_BYTES] if self.start_offset == 0 else _head(self.path)
            found = detect_wrapper(head)
            name, res.detected = found.name, found.note
        else:
            name, res.detected = self.wrapper_name, f"{self.wrapper_name} (given)"
        wrap = make_wrapper(name, self.path, self.context)
        res.wrapper = wrap.name
        next_line = self.start_line
        offset = self.start_offset
        pending: bytes | bytearray = b""
        skipping = False  # inside an over-long line being dropped up to its newline
        skip_line: tuple[int, bytes] | None = None

        def blocks_all() -> Iterator[bytes | bytearray]:
            # the blocks read ahead, then blocks that open with the carried-over bytes: a block is
            # never joined to what came before it (every byte is copied once, by the stream)
            nonlocal pending
            for head_block in ahead:
                joined = pending + head_block if pending else head_block
                pending = b""
                yield joined
            ahead.clear()
            while (blk := stream.take(pending)) is not None:
                pending = b""
                yield blk

        for data in blocks_all():
            block = data
            if skipping:
                nl = block.find(b"\n")
                if nl < 0:
                    offset += len(block)
                    continue
                assert skip_line is not None
                yield self._over_long(skip_line, next_line, wrap.name)
                next_line += 1
                offset += nl + 1
                block = block[nl + 1 :]
                skipping, skip_line = False, None
                data = block
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) > MAX_LINE_BYTES:
                    skipping, skip_line, pending = True, (offset, bytes(data[:4096])), b""
                    offset += len(data)
                else:
                    pending = data
                continue
            # the whole lines are a view of the block (slicing them off copied every byte again)
            view, pending = memoryview(data)[: cut + 1], bytes(data[cut + 1 :])
            phys = LineBatch.from_bytes(view, first_line=next_line, first_offset=offset)
            force = len(pending) + len(view) > MAX_LINE_BYTES
            out, used = wrap.strip(phys, final=force)
            if used < phys.phys_lines:
                # held back: read these physical lines again with the next block
                back = int(phys.offset[used]) - offset
                pending = bytes(view[back:]) + pending
                view = view[:back]
            next_line += used
            offset += len(view)
            if len(out) or out.rejected or out.phys_lines:
                yield self._account(out)
            if len(pending) > MAX_LINE_BYTES and b"\n" not in pending:
                skipping, skip_line = True, (offset, pending[:4096])
                offset += len(pending)
                pending = b""
        if skipping and skip_line is not None:
            yield self._over_long(skip_line, next_line, wrap.name)
            next_line += 1
        tail_rejected: list[tuple[int, str, bytes]] = []
        if pending:
            whole = bytes(pending)
            if status.truncated:
                # the last physical line was cut by the break of the compressed stream (bytes
                # after complete members cut nothing: a last line without newline is a line)
                nl = whole.rfind(b"\n")
                cut_line = whole[nl + 1 :]
                whole = whole[: nl + 1]
                tail_rejected.append((0, "line cut off by the end of a truncated or damaged "
                                      f"{status.compression} stream", cut_line))
            if whole:
                phys = LineBatch.from_bytes(whole, first_line=next_line, first_offset=offset)
                out, used = wrap.strip(phys, final=True)
                assert used == phys.phys_lines
                next_line += used
                offset += len(whole)
                yield self._account(out)
            if tail_rejected:
                rows = tuple((next_line, reason, raw) for _, reason, raw in tail_rejected)
                cut_batch = _only_rejected(rows, next_line, offset + len(tail_rejected[0][2]), wrap.name)
                next_line += 1
                offset += len(tail_rejected[0][2])
                yield self._account(cut_batch)
        else:
            out, used = wrap.strip(LineBatch.from_bytes(b"", first_line=next_line, first_offset=offset),
                                   final=True)
            if len(out) or out.rejected:
                yield self._account(out)
        res.complete = status.complete
        res.next_line, res.next_offset = next_line, offset
        res.warnings.extend(wrap.warnings)

    def _account(self, b: LineBatch) -> LineBatch:
        res = self.result
        if len(b) and b.wrapper != res.wrapper:
            res.wrapper = b.wrapper  # a wrapper found inside the records (``shipper-ndjson+cri``)
        if b.pod is not None:
            if self.context.get("fixed_node"):
                # the caller named the node (NODE=PATH): every line stays on the file's node
                b = replace(b, node=None)
            else:
                from forensics.sources.collect.layout import NodeRule

                rule = self.context.get("node_rule") or NodeRule()
                b = replace(b, node=_nodes(rule, b.pod, b.node))
        res.lines += b.phys_lines
        res.logical += len(b)
        res.joined += b.joined
        res.rejected += len(b.rejected)
        res.framing += b.framing
        return b

    def _over_long(self, skip: tuple[int, bytes], line_no: int, wrapper: str) -> LineBatch:
        off, head = skip
        msg = f"line {line_no} is longer than {MAX_LINE_BYTES >> 20} MiB: rejected, its first bytes kept"
        self.result.warnings.append(msg)
        rows = ((line_no, f"line longer than {MAX_LINE_BYTES >> 20} MiB (not loaded)", head),)
        return self._account(_only_rejected(rows, line_no, off, wrapper))


def _nodes(rule: object, pod: pa.Array, wrapper_node: pa.Array | None) -> pa.Array:
    """Logical node per line: a --node-map rule on the pod, else the wrapper's node (a journal's
    host), else the default rule on the pod."""
    from forensics.sources.collect.layout import NodeRule

    assert isinstance(rule, NodeRule)
    if wrapper_node is None:
        return rule.nodes_of(pod)
    mapped = pa.array([None if p is None else rule.mapped(p) for p in pod.to_pylist()], type=pa.string()) \
        if rule.rules else pa.nulls(len(pod), pa.string())
    return pc.coalesce(mapped, wrapper_node.cast(pa.string())).dictionary_encode()


def _only_rejected(rows: tuple[tuple[int, str, bytes], ...], line_no: int, offset: int, wrapper: str) -> LineBatch:
    empty = np.zeros(0, dtype=np.int64)
    return LineBatch(buf=np.zeros(0, dtype=np.uint8), starts=empty, ends=empty, line_no=empty, offset=empty,
                     phys_lines=len(rows), rejected=rows, wrapper=wrapper, next_line=line_no + len(rows),
                     next_offset=offset)


def _byte_before(path: Path, offset: int) -> bytes:
    from forensics.sources.files import open_decompressed

    with open_decompressed(path) as fh:
        if hasattr(fh, "seekable") and fh.seekable() and offset > 1 << 20:
            fh.seek(offset - 1)
        else:
            fh.read(offset - 1)
        return bytes(fh.read(1))


def _head(path: Path) -> bytes:
    from forensics.sources.files import head_bytes

    return head_bytes(path, HEAD_BYTES)


def read_lines(
    path: str | os.PathLike[str], *, wrapper: str = "auto", start_offset: int = 0, start_line: int = 1,
    block_bytes: int = BLOCK_BYTES, threaded: bool = True, context: dict[str, object] | None = None,
) -> LineReader:
    """The :class:`LineBatch` objects of one file (plain, gzip or zstd; any collection wrapper).

    ``wrapper`` is ``auto`` (detected from the content, never the name) or a wrapper name (see
    ``collect.WRAPPERS``). ``start_offset``/``start_line`` resume a load at a line start (a batch's
    ``next_offset``/``next_line``). ``context`` passes what a wrapper may need beside the bytes
    (``tz``: zone of zone-less collector times; ``year``: the year of RFC 3164 times).

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(delete=False)
        >>> _ = f.write(b"2026-08-27T03:10:00.5Z stderr F [2026-08-27 11:10:00 TP0] hello\\n"); f.close()
        >>> b = next(iter(read_lines(f.name)))
        >>> b.wrapper, b.line(0), int(b.collector_us[0])
        ('cri', b'[2026-08-27 11:10:00 TP0] hello', 1787800200500000)
    """
    return LineReader(Path(path), wrapper=wrapper, start_offset=start_offset, start_line=start_line,
                      block_bytes=block_bytes, threaded=threaded, context=context)
