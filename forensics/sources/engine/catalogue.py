"""The line-kind catalogue: every kind of engine/router line the loader knows, declared as data.

``kinds.toml`` (beside this module) holds one entry per kind, in classification order (the first
entry whose match rule holds wins), the way lnav's format files and Plaso's parser plugins
declare formats: the match rule, the target table, the fields with their types and how each is
read, the releases and source it was verified against, and sample lines with the values they
must give (checked by ``tests/test_engine_catalogue.py``). The scanner's classifier, the
extraction of the rare kinds and the kinds table of ``docs/engine.md`` are generated from it, so a
new release's quirk is one entry and its sample.

A match rule is a list of alternatives (any may hold); an alternative is a table of conditions
that must all hold. A condition's value is a string, a list of strings (any of them) or a list
of lists (each inner list must have one that holds):

================  ==========================================================================
``starts``        the message starts with the text
``ends``          the message ends with the text
``contains``      the message contains the text (``within = N``: in its first N bytes)
``icontains``     the same, ASCII case-insensitive (text given in lower case)
``equals``        the message is exactly the text (``""``: an empty message)
``regex``         a Python ``re`` (ASCII) search, anchored by ``^`` where written (``within``
                  applies); evaluated outside the compiled pass, on the few lines that reach it
``level``         the router line's level is one of these
``prefixed``      ``true``: the line carries an engine ``[time]`` prefix
================  ==========================================================================

Example:
    >>> cat = catalogue()
    >>> cat.kind("batch").table, cat.kind("rej_input_length").stored_kind
    ('engine_batches', 'input_length')
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from forensics.kinds import LINE_FAMILIES, LineFamily, member

#: Condition op codes of the compiled classifier.
OP_STARTS, OP_CONTAINS, OP_ICONTAINS, OP_EQUALS, OP_REGEX, OP_LEVEL, OP_PREFIXED, OP_ENDS = range(8)
_OPS = {"starts": OP_STARTS, "contains": OP_CONTAINS, "icontains": OP_ICONTAINS, "equals": OP_EQUALS,
        "regex": OP_REGEX, "level": OP_LEVEL, "prefixed": OP_PREFIXED, "ends": OP_ENDS}

#: Scopes: a router line (router time and level prefix) or any other line.
SCOPE_LINE, SCOPE_ROUTER = 0, 1

LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR")


@dataclass(frozen=True)
class Field:
    """One column a kind fills, and how it is read from the message."""

    name: str
    type: str
    #: Python ``re`` patterns tried in order (the first non-empty group 1 wins)
    regex: tuple[str, ...] = ()
    #: characters stripped from both ends of the value (SQL ``trim(x, chars)``)
    strip: str = ""
    #: a constant value
    const: Any = None
    #: a value the loader provides: 'message' (the message, capped at 1 KiB)
    source: str | None = None


@dataclass(frozen=True)
class Sample:
    """A sample line and the values it must give."""

    line: str
    expect: dict[str, Any]
    cite: str = ""


@dataclass(frozen=True)
class Kind:
    """One line kind of the catalogue."""

    name: str
    scope: int
    match: tuple[dict[str, Any], ...]
    table: str
    stored_kind: str | None
    extractor: str | None
    fields: tuple[Field, ...]
    shape: str
    releases: str
    source: str
    samples: tuple[Sample, ...]
    #: 'engine' for SGLang's own lines, 'router', 'foreign' (another library sharing the log), 'noise'
    #: (blank lines, progress bars) or 'unknown' (unrecognised)
    family: LineFamily = "engine"
    #: fields' regexes search group 1 of this regex (the whole message when unset)
    head: str | None = None
    #: startup fact name (``engine_startup_facts.fact``) of a startup kind
    fact: str | None = None


@dataclass
class Compiled:
    """The match rules as flat arrays for the compiled classifier (see :mod:`.classify`)."""

    rule_kind: np.ndarray  # int32 kind index per alternative
    rule_scope: np.ndarray  # int8
    rule_terms: np.ndarray  # int32 [start, end) into term_conds per alternative
    term_conds: np.ndarray  # int32 [start, end) into conds per term
    conds: np.ndarray  # int64 rows: op, lit_start, lit_len, within, param
    lits: np.ndarray  # uint8, the literal bytes back to back
    regexes: list[re.Pattern[str]] = field(default_factory=list)
    #: the distinct ``contains``/``icontains`` literals, found in one pass over a message:
    #: per literal (lit_start, lit_len, folded), and a CSR index by the literal's first two bytes
    #: (folded ones by their lower-cased bytes)
    needles: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int64))
    bigram_head: np.ndarray = field(default_factory=lambda: np.zeros(65537, dtype=np.int32))
    bigram_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    #: per alternative, the bytes a message can start with for it to hold (4 x 64 bits; all set
    #: unless one of its terms is only ``starts``/``equals`` texts): a cheap first test
    first_bytes: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), dtype=np.uint64))


@dataclass(frozen=True)
class Catalogue:
    """The loaded catalogue: kinds in classification order, and the compiled rules."""

    kinds: tuple[Kind, ...]
    compiled: Compiled

    def kind(self, name: str) -> Kind:
        for k in self.kinds:
            if k.name == name:
                return k
        raise KeyError(name)

    def index(self, name: str) -> int:
        return [k.name for k in self.kinds].index(name)

    @property
    def names(self) -> list[str]:
        return [k.name for k in self.kinds]


def _conds(op: str, value: Any) -> list[list[Any]]:
    """A condition value as AND-of-OR lists."""
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return [list(v) for v in value]
    if isinstance(value, list):
        return [list(value)]
    return [[value]]


def _compile(kinds: list[Kind]) -> Compiled:
    rule_kind: list[int] = []
    rule_scope: list[int] = []
    rule_terms: list[tuple[int, int]] = []
    term_conds: list[tuple[int, int]] = []
    conds: list[tuple[int, int, int, int, int]] = []
    lits = bytearray()
    regexes: list[re.Pattern[str]] = []
    needle_ids: dict[tuple[bytes, bool], int] = {}
    for ki, k in enumerate(kinds):
        for alt in k.match:
            within = int(alt.get("within", 0))
            t0 = len(term_conds)
            for op, value in alt.items():
                if op == "within":
                    continue
                code = _OPS[op]
                if code == OP_PREFIXED:
                    c0 = len(conds)
                    conds.append((OP_PREFIXED, 0, 0, 0, 1 if value else 0))
                    term_conds.append((c0, len(conds)))
                    continue
                if code == OP_LEVEL:
                    mask = 0
                    for lv in value if isinstance(value, list) else [value]:
                        mask |= 1 << (LEVELS.index(lv) + 1)
                    c0 = len(conds)
                    conds.append((OP_LEVEL, 0, 0, 0, mask))
                    term_conds.append((c0, len(conds)))
                    continue
                for group in _conds(op, value):
                    c0 = len(conds)
                    for text in group:
                        if code == OP_REGEX:
                            regexes.append(re.compile(text, re.ASCII))
                            conds.append((OP_REGEX, 0, 0, within, len(regexes) - 1))
                        else:
                            b = str(text).encode("utf-8")
                            param = 0
                            if code in (OP_CONTAINS, OP_ICONTAINS):
                                if len(b) < 2:
                                    raise ValueError(f"{k.name}: a contains text needs 2 bytes or more")
                                if within:
                                    param = -1  # searched directly in the first `within` bytes
                                else:
                                    key = (b, code == OP_ICONTAINS)
                                    param = needle_ids.setdefault(key, len(needle_ids))
                            conds.append((code, len(lits), len(b), within, param))
                            lits += b
                    term_conds.append((c0, len(conds)))
            rule_kind.append(ki)
            rule_scope.append(k.scope)
            rule_terms.append((t0, len(term_conds)))
    # the first-byte filter of each alternative
    first = np.full((len(rule_terms), 4), np.iinfo(np.uint64).max, dtype=np.uint64)
    for r, (t0, t1) in enumerate(rule_terms):
        for t in range(t0, t1):
            c0, c1 = term_conds[t]
            cs = conds[c0:c1]
            if cs and all(c[0] in (OP_STARTS, OP_EQUALS) and c[2] > 0 for c in cs):
                fmask = np.zeros(4, dtype=np.uint64)
                for c in cs:
                    b0 = lits[c[1]]
                    fmask[b0 >> 6] |= np.uint64(1) << np.uint64(b0 & 63)
                first[r] &= fmask
    # needles: their bytes after the rule literals, indexed by first bigram
    needles = []
    by_bigram: dict[int, list[int]] = {}
    for (b, folded), nid in sorted(needle_ids.items(), key=lambda kv: kv[1]):
        needles.append((len(lits), len(b), int(folded)))
        lits += b
        by_bigram.setdefault(b[0] << 8 | b[1], []).append(nid)
    head = np.zeros(65537, dtype=np.int32)
    ids: list[int] = []
    for bg in range(65536):
        head[bg] = len(ids)
        ids.extend(by_bigram.get(bg, []))
    head[65536] = len(ids)
    return Compiled(
        rule_kind=np.array(rule_kind, dtype=np.int32),
        rule_scope=np.array(rule_scope, dtype=np.int8),
        rule_terms=np.array(rule_terms, dtype=np.int32).reshape(-1, 2),
        term_conds=np.array(term_conds, dtype=np.int32).reshape(-1, 2),
        conds=np.array(conds, dtype=np.int64).reshape(-1, 5),
        lits=np.frombuffer(bytes(lits) or b"\0", dtype=np.uint8).copy(),
        regexes=regexes,
        needles=np.array(needles, dtype=np.int64).reshape(-1, 3),
        bigram_head=head,
        bigram_ids=np.array(ids, dtype=np.int32),
        first_bytes=first,
    )


def _field(name: str, spec: Any) -> Field:
    if not isinstance(spec, dict):
        return Field(name=name, type="VARCHAR", const=spec)
    rx = spec.get("regex", ())
    return Field(name=name, type=spec.get("type", "VARCHAR"),
                 regex=tuple([rx] if isinstance(rx, str) else rx), strip=spec.get("strip", ""),
                 const=spec.get("const"), source=spec.get("source"))


def load(text: str) -> Catalogue:
    """Parse catalogue TOML text (the bundled ``kinds.toml`` unless testing another)."""
    data = tomllib.loads(text)
    fieldsets: dict[str, dict[str, Any]] = data.get("fieldset", {})
    kinds: list[Kind] = []
    for e in data["kind"]:
        fields = dict(fieldsets[e["fields_from"]]) if "fields_from" in e else {}
        fields.update(e.get("fields", {}))
        kinds.append(Kind(
            name=e["name"],
            scope=SCOPE_ROUTER if e.get("scope", "line") == "router" else SCOPE_LINE,
            match=tuple(e.get("match", [])),
            table=e["table"],
            stored_kind=e.get("stored_kind"),
            extractor=e.get("extractor"),
            fields=tuple(_field(n, s) for n, s in fields.items()),
            shape=e.get("shape", ""),
            releases=e.get("releases", ""),
            source=e.get("source", ""),
            samples=tuple(Sample(line=s["line"], expect=dict(s.get("expect", {})), cite=s.get("cite", ""))
                          for s in e.get("sample", [])),
            family=member(e.get("family", "router" if e.get("scope") == "router" else "engine"), LINE_FAMILIES,
                          f"line kind {e.get('name')!r}: family"),
            head=e.get("head"),
            fact=e.get("fact"),
        ))
    names = [k.name for k in kinds]
    if len(set(names)) != len(names):
        raise ValueError("duplicate kind names in the catalogue")
    return Catalogue(kinds=tuple(kinds), compiled=_compile(kinds))


@functools.cache
def catalogue() -> Catalogue:
    """The bundled catalogue (``kinds.toml``), loaded once.

    Example:
        >>> catalogue().names[:3]
        ['router_request', 'router_pd_error', 'router_startup']
    """
    text = resources.files("forensics.sources.engine").joinpath("kinds.toml").read_text("utf-8")
    return load(text)


def docs_table(cat: Catalogue | None = None) -> str:
    """The kinds table of ``docs/engine.md`` (Markdown), generated from the catalogue.

    Example:
        >>> docs_table().splitlines()[0]
        '| kind | shape | releases, source | table |'
    """
    cat = cat or catalogue()
    out = ["| kind | shape | releases, source | table |", "|---|---|---|---|"]
    for k in cat.kinds:
        where = "; ".join(x for x in (k.releases, k.source) if x)
        table = f"`{k.table}`" + (f" (`{k.stored_kind}`)" if k.stored_kind else "")
        cells = [f"`{k.name}`", k.shape, where, table]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out)


def write_docs(path: str) -> bool:
    """Rewrite the kinds table between ``<!-- kinds:begin -->`` and ``<!-- kinds:end -->`` in ``path``.

    Returns whether the file changed. ``python -m forensics.sources.engine docs/engine.md``.
    """
    from pathlib import Path

    p = Path(path)
    text = p.read_text(encoding="utf-8")
    begin, end = "<!-- kinds:begin -->\n", "\n<!-- kinds:end -->"
    a, b = text.index(begin) + len(begin), text.index(end)
    new = text[:a] + docs_table() + text[b:]
    if new != text:
        p.write_text(new, encoding="utf-8")
    return new != text

