"""Find the records of a JSON document streamed line by line (``aws logs``, ``gcloud logging read``, ES ``_search``).

CLI exports are pretty-printed documents: ``{"events": [ {...}, {...} ], "nextToken": ...}``, one
record spanning several lines, sometimes several documents one after another (pages). This
module finds each record of the array at a given key path, with its byte span and lines, in one
vectorised pass over the structural characters (quotes located with numpy, string interiors
masked, nesting depth by a cumulative sum); only the few characters at the nesting levels above
the records are looked at in Python. The state between batches (depth, enclosing keys) is kept,
and a record not finished at the end of a batch is handed back whole, with the state at the start
of its first line.

Example:
    >>> doc = b'{\\n "events": [\\n  {"message": "a"},\\n  {"message": "b"}\\n ],\\n "next": 1\\n}\\n'
    >>> sc = DocScanner(("events",))
    >>> found = sc.scan(np.frombuffer(doc, dtype=np.uint8), np.array([0, 2, 17, 37, 56, 60, 72]), final=True)
    >>> [doc[s:e].decode() for s, e in zip(found.starts, found.ends)], found.first_line.tolist(), found.used
    (['{"message": "a"}', '{"message": "b"}'], [2, 3], 7)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_STRUCT = np.zeros(256, dtype=bool)
for _c in b"{}[]:,":
    _STRUCT[_c] = True
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[ord("{")] = 1
_OPEN[ord("[")] = 1
_OPEN[ord("}")] = -1
_OPEN[ord("]")] = -1


@dataclass
class _State:
    depth: int = 0
    #: enclosing containers, outermost first: (kind '{' or '[', key it is the value of)
    stack: list[tuple[int, str | None]] = field(default_factory=list)
    key: str | None = None

    def copy(self) -> _State:
        return _State(self.depth, list(self.stack), self.key)


@dataclass
class Found:
    """Records found in one batch: byte spans, first/last line (indices into the batch's lines)."""

    starts: np.ndarray
    ends: np.ndarray
    first_line: np.ndarray
    last_line: np.ndarray
    #: lines of the batch used (the rest starts an unfinished record and is handed back)
    used: int
    #: the text is not JSON the scanner can follow (an unterminated string): lines from
    #: ``bad_from`` on are not records (the caller rejects them); the state is reset
    bad_from: int | None = None


class DocScanner:
    """Records (JSON objects) that are elements of the array at ``path`` (keys from the root).

    ``path`` ``()`` means the root is the array itself (``gcloud logging read --format=json``).
    """

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        self.state = _State()

    def _is_target(self, stack: list[tuple[int, str | None]]) -> bool:
        if not stack or stack[-1][0] != ord("["):
            return False
        keys = tuple(k for _, k in stack if k is not None)
        if keys != self.path:
            return False
        # every container above the array must be an object (a key path), except a root array
        return all(kind == ord("{") for kind, _ in stack[:-1])

    def scan(self, buf: np.ndarray, line_starts: np.ndarray, *, final: bool) -> Found:
        """Find the records in ``buf`` (whole lines; ``line_starts`` their byte offsets)."""
        n_lines = int(line_starts.shape[0])
        quotes = np.flatnonzero(buf == 34)
        if quotes.size:
            maybe = quotes[(quotes > 0) & (buf[np.maximum(quotes - 1, 0)] == 92)]
            if maybe.size:
                esc = [q for q in maybe.tolist() if _backslashes_before(buf, q) % 2 == 1]
                if esc:
                    quotes = np.setdiff1d(quotes, np.array(esc, dtype=np.int64), assume_unique=True)
        bad_from: int | None = None
        if quotes.size % 2:
            # an unterminated string: JSON cannot continue over a newline, stop at its line
            cut = int(quotes[-1])
            bad_from = int(np.searchsorted(line_starts, cut, side="right") - 1)
            quotes = quotes[:-1]
            limit = int(line_starts[bad_from])
        else:
            limit = int(buf.size)
        struct = np.flatnonzero(_STRUCT[buf[:limit]])
        if quotes.size and struct.size:
            inside = np.searchsorted(quotes, struct, side="right") % 2 == 1
            struct = struct[~inside]
        delta = _OPEN[buf[struct]].astype(np.int64)
        depth_after = self.state.depth + np.cumsum(delta)
        depth_before = depth_after - delta
        # records are the objects opened at this depth inside the target array
        level = len(self.path) + 1
        # where a container opened at `level` closes again (first closer back to `level` after it)
        closers = struct[(delta == -1) & (depth_after == level)]
        low = np.flatnonzero(depth_before <= level)
        ev_pos = struct[low]
        ev_line = np.searchsorted(line_starts, ev_pos, side="right") - 1
        q_ends = quotes[1::2]
        q_starts = quotes[0::2]
        st = self.state
        starts: list[int] = []
        ends: list[int] = []
        lines0: list[int] = []
        lines1: list[int] = []
        used = n_lines
        cur_line = -1
        line_snap = (0, st.copy())
        held: tuple[int, _State] | None = None
        skip_until = -1
        for pos, ln, db in zip(ev_pos.tolist(), ev_line.tolist(), depth_before[low].tolist(), strict=True):
            if pos < skip_until:
                continue
            if ln != cur_line:
                line_snap = (ln, st.copy())
                cur_line = ln
            c = int(buf[pos])
            if db == level and c in (123, 91):  # '{' or '[' at the records' level
                k = int(np.searchsorted(closers, pos, side="right"))
                if k >= closers.size:
                    # an unfinished record (or other value at this level): wait for its end
                    held = line_snap
                    break
                close = int(closers[k])
                if c == 123 and self._is_target(st.stack):
                    starts.append(pos)
                    ends.append(close + 1)
                    lines0.append(ln)
                    lines1.append(int(np.searchsorted(line_starts, close, side="right") - 1))
                skip_until = close + 1
                continue
            if c in (123, 91):
                st.stack.append((c, st.key))
                st.key = None
                st.depth += 1
            elif c in (125, 93):
                if st.stack:
                    st.stack.pop()
                st.depth = max(0, st.depth - 1)
                st.key = None
            elif c == 58:  # ':'
                st.key = _key_before(buf, pos, q_starts, q_ends)
            else:  # ','
                st.key = None
        if held is not None:
            if final or bad_from is not None:
                # a record cut off by the end of the stream is not a record: its lines are framing
                self.state = _State()
            else:
                used = min(used, held[0])
                self.state = held[1]
        else:
            self.state = st if bad_from is None else _State()
        return Found(
            starts=np.array(starts, dtype=np.int64), ends=np.array(ends, dtype=np.int64),
            first_line=np.array(lines0, dtype=np.int64), last_line=np.array(lines1, dtype=np.int64),
            used=used, bad_from=bad_from,
        )


def _backslashes_before(buf: np.ndarray, q: int) -> int:
    k = 0
    while q - k - 1 >= 0 and buf[q - k - 1] == 92:
        k += 1
    return k


def _key_before(buf: np.ndarray, colon: int, q_starts: np.ndarray, q_ends: np.ndarray) -> str | None:
    i = int(np.searchsorted(q_ends, colon)) - 1
    if i < 0:
        return None
    raw = buf[int(q_starts[i]) + 1 : int(q_ends[i])].tobytes()
    try:
        import json

        return str(json.loads(b'"' + raw + b'"'))
    except ValueError:
        return raw.decode("utf-8", "replace")
