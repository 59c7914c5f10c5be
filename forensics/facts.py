"""Derived tables: each fact the queries share, defined once, built from the evidence tables.

A fact is one parameter-free ``SELECT`` in ``queries/facts/<name>.sql`` (a header comment says
what it holds, which tables it ``reads:`` and whether it is ``stored as:`` a table or a view). The
case keeps each fact under that name, built after the ingests (once, at the next query or the
case's close: three ingests in a row build each fact once) and rebuilt whenever rows
were added to or removed from the evidence tables it is derived from (its ``reads:``, through the
facts and schema views it reads, down to evidence tables: :func:`fact_sources`) since it was built
(checked before every query, by row counts; after editing rows in place, call :func:`refresh`
with ``force``). Only those facts are rebuilt: a gateway ingest leaves the engine-only facts
(request legs, chains) as they are. A case opened read-only whose facts
do not match its evidence (written by another toolkit version, or by an ingest that did not
finish) gets the stale ones built in memory for that connection (temporary tables: slower, nothing
written). The query files read the facts like any other table, so the request chain,
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
import json
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

#: The schema views (forensics/schema*.sql) the facts read, and what each of them reads: a fact
#: reading a view is derived from the view's tables (a test checks this against the views' SQL).
VIEW_READS: dict[str, tuple[str, ...]] = {
    "gateway_requests_unique": ("gateway_requests",),
    "evidence_paths": ("evidence_files",),
    "node_last_seen": ("node_activity",),
    "start_periods": ("engine_starts", "node_activity"),
    "engine_batch_fields": ("engine_batches",),
}

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


def uncompressed(name: str) -> list[str]:
    """The columns of a fact table stored uncompressed (its optional ``-- uncompressed:`` header line).

    Nearly unique ids barely compress, and analysing them for compression costs more than writing
    them (as the ids of gateway_requests).

    Example:
        >>> uncompressed("gateway_top"), uncompressed("match_candidates")
        (['request_id', 'header_request_id'], [])
    """
    m = re.search(r"^--\s*uncompressed:\s*(.+?)\s*$", fact_sql(name), flags=re.M)
    return [c.strip() for c in m.group(1).split(",") if c.strip()] if m else []


def _create(con: duckdb.DuckDBPyConnection, name: str, *, temp: bool = False) -> None:
    """``CREATE OR REPLACE [TEMP] TABLE|VIEW name AS`` the fact's SELECT; a table with columns stored
    uncompressed is declared from the SELECT's own column types (DESCRIBE), then filled."""
    kind = stored_as(name).upper()
    create = f"CREATE OR REPLACE {'TEMP ' if temp else ''}{kind} {name}"
    plain = uncompressed(name) if kind == "TABLE" else []
    if not plain:
        con.execute(f"{create} AS\n{fact_sql(name)}")
        return
    described = con.execute(f"DESCRIBE\n{fact_sql(name)}").fetchall()
    missing = set(plain) - {c[0] for c in described}
    if missing:
        raise QueryError(f"fact {name}.sql: '-- uncompressed:' names {', '.join(sorted(missing))}, "
                         "not a column of its SELECT", where=f"queries/facts/{name}.sql")
    columns = ", ".join(f'"{c[0]}" {c[1]}' + (" USING COMPRESSION uncompressed" if c[0] in plain else "")
                        for c in described)
    con.execute(f"{create} ({columns})")
    con.execute(f"INSERT INTO {name}\n{fact_sql(name)}")


@cache
def _upstream(name: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the evidence tables, the earlier facts) one fact is derived from, through everything it reads."""
    tables: set[str] = set()
    facts: set[str] = set()
    todo = list(fact_reads(name))
    while todo:
        dep = todo.pop()
        if dep in FACTS:
            if dep not in facts:
                facts.add(dep)
                dep_tables, dep_facts = _upstream(dep)
                tables |= dep_tables
                facts |= dep_facts
        elif dep in VIEW_READS:
            todo.extend(VIEW_READS[dep])
        else:
            tables.add(dep)
    return frozenset(tables), frozenset(facts)


def fact_sources(name: str) -> list[str]:
    """The evidence tables one fact is derived from (through the facts and views it reads), sorted.

    Example:
        >>> fact_sources("request_chains")
        ['engine_events', 'engine_rejections', 'engine_requests', 'engine_starts']
    """
    return sorted(_upstream(name)[0])


@cache
def _sources() -> tuple[str, ...]:
    return tuple(sorted(set().union(*(_upstream(n)[0] for n in FACTS))))


@cache
def _code(name: str) -> str:
    """A digest of the SQL of one fact and of every fact it is derived from (a change to any rebuilds it)."""
    names = [n for n in FACTS if n == name or n in _upstream(name)[1]]
    return hashlib.sha256("\n".join(fact_sql(n) for n in names).encode()).hexdigest()[:16]


def _keys(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Fact -> what it is built from now: the toolkit version, its SQL, its evidence tables' row counts.

    Delivery-retry duplicates are flagged in place (gateway_requests.is_duplicate), so their count
    is one of gateway_requests' counts.
    """
    # one UNION ALL, not one SELECT of ten scalar subqueries: DuckDB plans that in ~50 ms against
    # ~3 ms, and this runs before every query (the freshness check)
    counts = [f"SELECT '{t}', count(*) FROM {t}" for t in _sources()]
    counts.append("SELECT 'duplicates', count(*) FROM gateway_requests WHERE is_duplicate")
    rows = {str(t): str(n) for t, n in con.execute(" UNION ALL ".join(counts)).fetchall()}
    rows["gateway_requests"] = f"{rows['gateway_requests']} ({rows.pop('duplicates')} duplicates)"
    return {
        name: f"forensics {__version__}; facts {_code(name)}; rows "
              + ", ".join(f"{t} {rows[t]}" for t in fact_sources(name))
        for name in FACTS
    }


def _built_from(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Fact -> what it was built from (the marker; empty when missing or of an older toolkit)."""
    rows = con.execute("SELECT value FROM schema_info WHERE key = $k", {"k": _KEY}).fetchall()
    try:
        built = json.loads(rows[0][0]) if rows else {}
    except ValueError:  # an older toolkit's marker (one fingerprint of every fact): all are rebuilt
        return {}
    return {str(k): str(v) for k, v in built.items()} if isinstance(built, dict) else {}


def _present(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Name -> 'table' | 'view' of the objects in the case's main schema (not this connection's temporary ones)."""
    rows = con.execute(
        "SELECT table_name, table_type FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_catalog = current_database()"
    ).fetchall()
    return {r[0]: ("view" if r[1] == "VIEW" else "table") for r in rows}


def _stale(con: duckdb.DuckDBPyConnection, keys: dict[str, str], *, force: bool = False) -> list[str]:
    """The facts of the case's file to rebuild, in build order: missing, of the wrong kind, built from
    other evidence rows, SQL or toolkit (their key changed), or derived from a fact that is rebuilt."""
    built = _built_from(con)
    present = _present(con)
    stale: list[str] = []
    for name in FACTS:
        if (force or present.get(name) != stored_as(name) or built.get(name) != keys[name]
                or not _upstream(name)[1].isdisjoint(stale)):
            stale.append(name)
    return stale


def stale(case: Case) -> list[str]:
    """The facts a :func:`refresh` of the case would rebuild now, in build order (empty: all fresh).

    Example:
        >>> import forensics
        >>> c = forensics.open_case(":memory:"); _ = refresh(c)
        >>> stale(c)
        []
    """
    con = case.con
    keys = _keys(con)
    in_memory = getattr(case, "_facts_in_memory", None)
    if in_memory is not None:
        return [] if in_memory == json.dumps(keys, sort_keys=True) else list(FACTS)
    return _stale(con, keys)


def is_fresh(case: Case) -> bool:
    """True when every fact exists and was built from the evidence rows the case holds now.

    Example:
        >>> import forensics
        >>> c = forensics.open_case(":memory:"); _ = refresh(c)
        >>> is_fresh(c)
        True
    """
    return not stale(case)


#: What the process holds outside DuckDB while the facts are built (the interpreter and the libraries:
#: ~230 MiB measured after the imports), taken off the load budget like a loader's reserve.
REFRESH_RESERVE_BYTES = 256 << 20


def _build(con: duckdb.DuckDBPyConnection, name: str, present: dict[str, str], keys: dict[str, str]) -> None:
    """One fact (re)built in a transaction of its own, with the record of what it was built from."""
    kind = stored_as(name)
    con.execute("BEGIN TRANSACTION")
    try:
        if present.get(name, kind) != kind:  # the fact changed from a view to a table, or back
            con.execute(f"DROP {present[name].upper()} {name}")
        _create(con, name)
        built = _built_from(con)
        built[name] = keys[name]
        con.execute(
            "INSERT INTO schema_info VALUES ($k, $v) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            {"k": _KEY, "v": json.dumps(built, sort_keys=True)},
        )
        con.execute("COMMIT")
        present[name] = kind  # (a rolled-back DROP left the old object: it is dropped again)
    except BaseException:
        # a statement interrupted by Ctrl-C has rolled the transaction back already: a
        # failing ROLLBACK then would hide the interrupt behind "no transaction is active"
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


def refresh(case: Case, *, force: bool = False) -> bool:
    """(Re)build the facts whose evidence changed (every fact with ``force``); True if it built any.

    A fact is rebuilt when the row counts of the evidence tables it is derived from
    (:func:`fact_sources`), its SQL or the toolkit changed since it was built, or a fact it reads
    is rebuilt; the others stay as they are. Each is built under the load memory budget
    (``Case.loading``) in a transaction of its own that also records what it was built from: one
    transaction for all of them kept every new table (and the one it replaces) in memory until the
    commit, out of memory under the budget at 1 M requests. A fact DuckDB cannot build under the
    load budget (out of memory: its plan could not spill) is built again under it on one thread, and
    if that fails too under the query limit. A refresh that fails or is interrupted
    leaves the facts it did not finish marked stale, and the next query or close builds them (and
    only them) again. The case must be writable.

    Example:
        >>> import forensics
        >>> c = forensics.open_case(":memory:")
        >>> refresh(c), refresh(c), refresh(c, force=True)
        (True, False, True)
    """
    con = case.con
    keys = _keys(con)
    todo = _stale(con, keys, force=force)
    if not todo:
        return False
    if case.read_only:
        raise CaseError(
            f"{case.path} is open read-only: its derived tables cannot be rebuilt in the file",
            hint=f"open it writable (forensics refresh {case.path}); read-only queries build them in memory",
        )
    name = todo[0]
    try:
        present = _present(con)
        for name in todo:
            try:
                with case.loading(REFRESH_RESERVE_BYTES):
                    _build(con, name, present, keys)
            except duckdb.OutOfMemoryException:
                # DuckDB could not spill this fact's plan under the load budget (at 1 M requests,
                # request_chains of an engine-only case, one run in two): built again under the same
                # budget on one thread (every thread holds its own share of a join: 4 s and 696 MiB
                # peak, where the query limit's retry peaked at 1.7 GiB), and only if that fails too
                # under the query limit, as a query reading the case would run: never left unbuilt
                try:
                    with case.loading(REFRESH_RESERVE_BYTES), case.single_threaded():
                        _build(con, name, present, keys)
                except duckdb.OutOfMemoryException:
                    _build(con, name, present, keys)
    except duckdb.Error as exc:
        from forensics.sources.ledger import _interrupted

        if _interrupted(exc):
            raise KeyboardInterrupt from None  # Ctrl-C inside a fact's query: not a fault of the fact
        raise QueryError(f"building the derived table {name} failed: {exc}",
                         where=f"queries/facts/{name}.sql") from exc
    return True


def _build_in_memory(case: Case) -> None:
    """Build the file's stale facts as temporary tables and views of this connection (a read-only case).

    The temporary ones hide the file's of the same name; the file's fresh facts are read as they are.
    """
    con = case.con
    keys = _keys(con)
    todo = _stale(con, keys)
    temporary = dict(con.execute(
        "SELECT table_name, 'TABLE' FROM duckdb_tables() WHERE temporary "
        "UNION ALL SELECT view_name, 'VIEW' FROM duckdb_views() WHERE temporary AND NOT internal").fetchall())
    try:
        for name in FACTS:
            if name in todo:
                if temporary.get(name, stored_as(name).upper()) != stored_as(name).upper():
                    con.execute(f"DROP {temporary[name]} temp.main.{name}")
                _create(con, name, temp=True)
            elif name in temporary:  # built in memory before, fresh in the file now
                con.execute(f"DROP {temporary[name]} temp.main.{name}")
    except duckdb.Error as exc:
        raise QueryError(f"building the derived tables failed: {exc}", where="queries/facts/") from exc
    case._facts_in_memory = json.dumps(keys, sort_keys=True)


def ensure(case: Case) -> None:
    """Make sure the facts match the evidence before a query reads them.

    A writable case rebuilds the stale ones in place; a read-only one builds them in memory.

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
