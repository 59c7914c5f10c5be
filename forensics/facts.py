"""Derived tables: each fact the queries share, defined once, built from the evidence tables.

A fact is one parameter-free ``SELECT`` in ``queries/facts/<name>.sql`` (a header comment says
what it holds, which tables it ``reads:`` and whether it is ``stored as:`` a table or a view). The
case keeps each fact under that name, built at the end of every ingest and rebuilt whenever rows
were added to or removed from the evidence tables since (checked before every query, by row
counts; after editing rows in place, call :func:`refresh`). A case opened read-only whose facts
do not match its evidence (written by another toolkit version, or by an ingest that did not
finish) gets them built in memory for that connection (temporary tables: slower, nothing written). The query files read the facts like any other table, so the request chain,
the gateway matching and the evidence text exist once, and a query such as ``affected_requests``
holds only its judgement.

Another engine (Spark) builds the same tables by running the files of :data:`FACTS` in order.

Example:
    >>> import forensics
    >>> case = forensics.open_case(":memory:")
    >>> refresh(case)
    True
    >>> case.sql("SELECT count(*) FROM request_chains").fetchall()
    [(0,)]
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from functools import cache
from typing import TYPE_CHECKING

import duckdb

from forensics import __version__
from forensics.errors import CaseError, QueryError

if TYPE_CHECKING:
    from forensics.case import Case

#: The facts in build order: each reads only evidence tables, schema views and facts before it.
FACTS: tuple[str, ...] = (
    "node_activity",
    "request_legs",
    "rejections_by_rid",
    "transfer_failures",
    "request_chains",
    "chain_evidence",
    "gateway_top",
    "record_evidence",
    "match_candidates",
    "chain_matches",
    "request_keys",
    "requests",
)

#: The evidence tables the facts are derived from (their row counts decide whether a rebuild is due).
SOURCES: tuple[str, ...] = (
    "evidence_files",
    "gateway_requests",
    "engine_starts",
    "engine_requests",
    "engine_rejections",
    "engine_events",
    "engine_other_lines",
    "router_requests",
)

_KEY = "facts_built_from"


@cache
def fact_sql(name: str) -> str:
    """The ``SELECT`` of one fact (``queries/facts/<name>.sql``), without a trailing semicolon.

    Example:
        >>> fact_sql("request_legs").splitlines()[0].startswith("-- request_legs: ")
        True
    """
    from forensics.sqlfiles import queries_dir

    f = queries_dir().joinpath("facts").joinpath(f"{name}.sql")
    if not f.is_file():
        raise QueryError(f"fact {name}.sql not found in queries/facts/ (known: {', '.join(FACTS)})")
    return f.read_text(encoding="utf-8").strip().rstrip(";")


@cache
def _code() -> str:
    return hashlib.sha256("\n".join(fact_sql(n) for n in FACTS).encode()).hexdigest()[:16]


def fact_reads(name: str) -> list[str]:
    """The tables and views one fact reads (its ``-- reads:`` header line).

    Example:
        >>> fact_reads("request_chains")
        ['request_legs', 'rejections_by_rid', 'transfer_failures']
    """
    m = re.search(r"^--\s*reads:\s*(.+?)\s*$", fact_sql(name), flags=re.M)
    if not m:
        raise QueryError(f"fact {name}.sql has no '-- reads: ...' header line")
    return [t.strip() for t in m.group(1).split(",") if t.strip()]


def stored_as(name: str) -> str:
    """``'table'`` (built once and kept: costly to compute) or ``'view'`` (cheap, computed when read).

    Example:
        >>> stored_as("request_chains"), stored_as("transfer_failures")
        ('table', 'view')
    """
    m = re.search(r"^--\s*stored as:\s*(table|view)\s*$", fact_sql(name), flags=re.M)
    if not m:
        raise QueryError(f"fact {name}.sql has no '-- stored as: table|view' header line")
    return m.group(1)


def _fingerprint(con: duckdb.DuckDBPyConnection) -> str:
    counts = ", ".join(f"(SELECT count(*) FROM {t})" for t in SOURCES)
    dup = "(SELECT count(*) FROM gateway_requests WHERE is_duplicate)"
    row = con.execute(f"SELECT {counts}, {dup}").fetchall()[0]
    return f"forensics {__version__}; facts {_code()}; rows {row}"


def _built_from(con: duckdb.DuckDBPyConnection) -> str | None:
    rows = con.execute("SELECT value FROM schema_info WHERE key = $k", {"k": _KEY}).fetchall()
    return str(rows[0][0]) if rows else None


def _present(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Name -> 'table' | 'view' of the objects in the case's main schema."""
    rows = con.execute(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main'"
    ).fetchall()
    return {r[0]: ("view" if r[1] == "VIEW" else "table") for r in rows}


def is_fresh(case: Case) -> bool:
    """True when every fact exists and was built from the evidence rows the case holds now.

    Example:
        >>> import forensics
        >>> c = forensics.open_case(":memory:"); _ = refresh(c)
        >>> is_fresh(c)
        True
    """
    con = case.con
    in_memory = getattr(case, "_facts_in_memory", None)
    if in_memory is not None:
        return bool(in_memory == _fingerprint(con))
    present = _present(con)
    if any(present.get(name) != stored_as(name) for name in FACTS):
        return False
    return _built_from(con) == _fingerprint(con)


#: What the process holds outside DuckDB while the facts are built (the interpreter and the libraries:
#: ~230 MiB measured after the imports), taken off the load budget like a loader's reserve.
REFRESH_RESERVE_BYTES = 256 << 20


def refresh(case: Case, *, force: bool = False) -> bool:
    """(Re)build every fact table when the evidence changed (or ``force``); True if it built them.

    The facts are built under the load memory budget (``Case.loading``), one transaction each: one
    transaction for all of them kept every new table (and the one it replaces) in memory until the
    commit, out of memory under the budget at 1 M requests. The marker that the facts match the
    evidence is removed first and written last, so a refresh that fails or is interrupted leaves
    the case marked stale, and the next query or ingest builds them again. The case must be writable.

    Example:
        >>> import forensics
        >>> c = forensics.open_case(":memory:")
        >>> refresh(c), refresh(c), refresh(c, force=True)
        (True, False, True)
    """
    if not force and is_fresh(case):
        return False
    if case.read_only:
        raise CaseError(
            f"{case.path} is open read-only: its derived tables cannot be rebuilt in the file",
            hint=f"open it writable (forensics refresh {case.path}); read-only queries build them in memory",
        )
    con = case.con
    name = FACTS[0]
    try:
        with case.loading(REFRESH_RESERVE_BYTES):
            con.execute("DELETE FROM schema_info WHERE key = $k", {"k": _KEY})
            present = _present(con)
            for name in FACTS:
                kind = stored_as(name)
                con.execute("BEGIN TRANSACTION")
                try:
                    if present.get(name, kind) != kind:  # the fact changed from a view to a table, or back
                        con.execute(f"DROP {present[name].upper()} {name}")
                    con.execute(f"CREATE OR REPLACE {kind.upper()} {name} AS\n{fact_sql(name)}")
                    con.execute("COMMIT")
                except BaseException:
                    # a statement interrupted by Ctrl-C has rolled the transaction back already: a
                    # failing ROLLBACK then would hide the interrupt behind "no transaction is active"
                    with contextlib.suppress(duckdb.Error):
                        con.execute("ROLLBACK")
                    raise
            con.execute(
                "INSERT INTO schema_info VALUES ($k, $v) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                {"k": _KEY, "v": _fingerprint(con)},
            )
    except duckdb.Error as exc:
        from forensics.sources.ledger import _interrupted

        if _interrupted(exc):
            raise KeyboardInterrupt from None  # Ctrl-C inside a fact's query: not a fault of the fact
        raise QueryError(f"building the derived table {name} failed: {exc}",
                         where=f"queries/facts/{name}.sql") from exc
    return True


def _build_in_memory(case: Case) -> None:
    """Build the facts as temporary tables and views of this connection (a read-only case)."""
    con = case.con
    try:
        for name in FACTS:
            con.execute(f"CREATE OR REPLACE TEMP {stored_as(name).upper()} {name} AS\n{fact_sql(name)}")
    except duckdb.Error as exc:
        raise QueryError(f"building the derived tables failed: {exc}", where="queries/facts/") from exc
    case._facts_in_memory = _fingerprint(con)


def ensure(case: Case) -> None:
    """Make sure the facts match the evidence before a query reads them.

    A writable case rebuilds them in place; a read-only one builds them in memory.

    Example:
        >>> import forensics
        >>> ensure(forensics.open_case(":memory:"))
    """
    if is_fresh(case):
        return
    if case.read_only:
        _build_in_memory(case)
    else:
        refresh(case)
