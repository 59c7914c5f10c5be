"""Stage 2 of the scanner: the kind of every line, by the catalogue's match rules.

The rules of ``kinds.toml`` are compiled into flat arrays (:mod:`.catalogue`) and interpreted
here by one compiled loop over the lines: literal tests (``starts``, ``contains``, ...) run in
the loop; a rule that needs a regular expression stops the loop for that line, which Python then
finishes with ``re`` from that rule on (only unprefixed odd lines ever get there).

Example:
    >>> from forensics.sources.lines import LineBatch
    >>> from forensics.sources.engine.prefix import scan_prefixes
    >>> b = LineBatch.from_bytes(b"[2026-09-02 04:51:17 TP0] Decode batch, #token: 1\\nTraceback (x)\\n")
    >>> cat = catalogue()
    >>> [cat.names[k] for k in classify(b, scan_prefixes(b), cat)]
    ['batch', 'traceback']
"""

from __future__ import annotations

import numba
import numpy as np

from forensics.sources.engine.catalogue import (
    OP_CONTAINS,
    OP_ENDS,
    OP_EQUALS,
    OP_ICONTAINS,
    OP_LEVEL,
    OP_PREFIXED,
    OP_REGEX,
    OP_STARTS,
    SCOPE_LINE,
    SCOPE_ROUTER,
    Catalogue,
    catalogue,
)
from forensics.sources.engine.prefix import P_ENGINE, P_ROUTER, Prefixes
from forensics.sources.lines import LineBatch


@numba.njit(cache=True, nogil=True)
def _find(buf: np.ndarray, s: int, e: int, lits: np.ndarray, l0: int, ln: int, fold: bool) -> bool:
    """buf[s:e] contains the literal (ASCII case-folded when ``fold``)."""
    first = lits[l0]
    for i in range(s, e - ln + 1):
        c = buf[i]
        if fold and 65 <= c <= 90:
            c += 32
        if c != first:
            continue
        ok = True
        for k in range(1, ln):
            d = buf[i + k]
            if fold and 65 <= d <= 90:
                d += 32
            if d != lits[l0 + k]:
                ok = False
                break
        if ok:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _scan_needles(buf: np.ndarray, s: int, e: int, lits: np.ndarray, needles: np.ndarray, head: np.ndarray,
                  ids: np.ndarray, found: np.ndarray) -> None:
    """First position of every contains-needle in buf[s:e] (-1 if absent), in one pass."""
    found[:] = -1
    for i in range(s, e - 1):
        a = buf[i]
        b = buf[i + 1]
        bg = (a << 8) | b
        for x in range(head[bg], head[bg + 1]):
            nid = ids[x]
            if needles[nid, 2] == 0 and found[nid] < 0:
                l0 = needles[nid, 0]
                ln = needles[nid, 1]
                if i + ln <= e:
                    ok = True
                    for k in range(2, ln):
                        if buf[i + k] != lits[l0 + k]:
                            ok = False
                            break
                    if ok:
                        found[nid] = i
        fa = a + 32 if 65 <= a <= 90 else a
        fb = b + 32 if 65 <= b <= 90 else b
        fbg = (fa << 8) | fb
        for x in range(head[fbg], head[fbg + 1]):
            nid = ids[x]
            if needles[nid, 2] == 1 and found[nid] < 0:
                l0 = needles[nid, 0]
                ln = needles[nid, 1]
                if i + ln <= e:
                    ok = True
                    for k in range(2, ln):
                        d = buf[i + k]
                        if 65 <= d <= 90:
                            d += 32
                        if d != lits[l0 + k]:
                            ok = False
                            break
                    if ok:
                        found[nid] = i


@numba.njit(cache=True, nogil=True)
def _same(buf: np.ndarray, i: int, lits: np.ndarray, l0: int, ln: int) -> bool:
    for k in range(ln):  # noqa: SIM110 (compiled: a plain loop)
        if buf[i + k] != lits[l0 + k]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _classify(buf: np.ndarray, msg: np.ndarray, ends: np.ndarray, pkind: np.ndarray, level: np.ndarray,
              rule_kind: np.ndarray, rule_scope: np.ndarray, rule_terms: np.ndarray, term_conds: np.ndarray,
              conds: np.ndarray, lits: np.ndarray, needles: np.ndarray, head: np.ndarray, ids: np.ndarray,
              first_bytes: np.ndarray, out: np.ndarray, pending: np.ndarray) -> int:
    n_pending = 0
    found = np.empty(max(needles.shape[0], 1), dtype=np.int64)
    for li in range(msg.shape[0]):
        s = msg[li]
        e = ends[li]
        scope = SCOPE_ROUTER if pkind[li] == P_ROUTER else SCOPE_LINE
        out[li] = -1
        pending[li] = -1
        scanned = False
        b0 = buf[s] if e > s else 0
        w = b0 >> 6
        bit = np.uint64(1) << np.uint64(b0 & 63)
        for r in range(rule_kind.shape[0]):
            if rule_scope[r] != scope:
                continue
            if e > s and (first_bytes[r, w] & bit) == 0:
                continue  # a term of this rule needs another first byte
            holds = True
            for t in range(rule_terms[r, 0], rule_terms[r, 1]):
                term = False
                needs_regex = False
                for ci in range(term_conds[t, 0], term_conds[t, 1]):
                    op = conds[ci, 0]
                    ln = conds[ci, 2]
                    within = conds[ci, 3]
                    if op == OP_STARTS:
                        term = e - s >= ln and _same(buf, s, lits, conds[ci, 1], ln)
                    elif (op == OP_CONTAINS or op == OP_ICONTAINS) and conds[ci, 4] < 0:  # noqa: SIM109
                        term = _find(buf, s, min(e, s + within), lits, conds[ci, 1], ln, op == OP_ICONTAINS)
                    elif op == OP_CONTAINS or op == OP_ICONTAINS:  # noqa: SIM109
                        if not scanned:
                            _scan_needles(buf, s, e, lits, needles, head, ids, found)
                            scanned = True
                        pos = found[conds[ci, 4]]
                        term = pos >= 0 and (within == 0 or pos + ln <= s + within)
                    elif op == OP_EQUALS:
                        term = e - s == ln and _same(buf, s, lits, conds[ci, 1], ln)
                    elif op == OP_ENDS:
                        term = e - s >= ln and _same(buf, e - ln, lits, conds[ci, 1], ln)
                    elif op == OP_LEVEL:
                        term = (conds[ci, 4] >> level[li]) & 1 == 1
                    elif op == OP_PREFIXED:
                        term = (pkind[li] == P_ENGINE) == (conds[ci, 4] == 1)
                    elif op == OP_REGEX:
                        needs_regex = True
                    if term:
                        break
                if not term:
                    if needs_regex:
                        pending[li] = r
                        n_pending += 1
                    holds = False
                    break
            if pending[li] >= 0:
                break
            if holds:
                out[li] = rule_kind[r]
                break
    return n_pending


def _finish_in_python(msg: str, pkind: int, level: int, start_rule: int, cat: Catalogue) -> int:
    """The kind of one line from rule ``start_rule`` on, regexes included (same rules, in Python)."""
    c = cat.compiled
    scope = SCOPE_ROUTER if pkind == P_ROUTER else SCOPE_LINE
    raw = msg.encode("utf-8")
    for r in range(start_rule, len(c.rule_kind)):
        if c.rule_scope[r] != scope:
            continue
        holds = True
        for t in range(c.rule_terms[r, 0], c.rule_terms[r, 1]):
            term = False
            for ci in range(c.term_conds[t, 0], c.term_conds[t, 1]):
                op, l0, ln, within, param = (int(x) for x in c.conds[ci])
                lit = c.lits[l0 : l0 + ln].tobytes()
                hay = raw[:within] if within else raw
                if op == OP_STARTS:
                    ok = hay.startswith(lit)
                elif op == OP_CONTAINS:
                    ok = lit in hay
                elif op == OP_ICONTAINS:
                    ok = lit in bytes(b + 32 if 65 <= b <= 90 else b for b in hay)
                elif op == OP_EQUALS:
                    ok = hay == lit
                elif op == OP_ENDS:
                    ok = raw.endswith(lit)
                elif op == OP_LEVEL:
                    ok = bool((param >> level) & 1)
                elif op == OP_PREFIXED:
                    ok = (pkind == P_ENGINE) == (param == 1)
                else:  # OP_REGEX: on the message's first `within` characters
                    ok = c.regexes[param].search(msg[:within] if within else msg) is not None
                if ok:
                    term = True
                    break
            if not term:
                holds = False
                break
        if holds:
            return int(c.rule_kind[r])
    return -1


def classify(batch: LineBatch, pfx: Prefixes, cat: Catalogue | None = None) -> np.ndarray:
    """The catalogue kind index of every line of ``batch`` (int32).

    Example:
        >>> from forensics.sources.engine.prefix import scan_prefixes
        >>> b = LineBatch.from_bytes(b"I0917 16:19:42.193368 1 transfer_engine.cpp:486] x")
        >>> catalogue().names[classify(b, scan_prefixes(b))[0]]
        'foreign_glog'
    """
    cat = cat or catalogue()
    c = cat.compiled
    n = len(batch)
    out = np.empty(n, dtype=np.int32)
    pending = np.empty(n, dtype=np.int32)
    if n == 0:
        return out
    n_pending = _classify(batch.buf, pfx.msg_start, batch.ends, pfx.kind, pfx.level, c.rule_kind, c.rule_scope,
                          c.rule_terms, c.term_conds, c.conds, c.lits, c.needles, c.bigram_head,
                          c.bigram_ids, c.first_bytes, out, pending)
    if n_pending:
        for li in np.flatnonzero(pending >= 0):
            text = batch.buf[pfx.msg_start[li] : batch.ends[li]].tobytes().decode("utf-8", "replace")
            out[li] = _finish_in_python(text, int(pfx.kind[li]), int(pfx.level[li]), int(pending[li]), cat)
    return out
