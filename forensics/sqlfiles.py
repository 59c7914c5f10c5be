"""Find, parse and run the ``.sql`` files of ``queries/``.

Each query file holds one query and a header comment::

    -- affected_requests: the 200 responses that should have been 400.
    -- param $limit_tokens BIGINT: admission limit override (NULL: derived per node start)
    -- param $start TIMESTAMP: only requests at or after this UTC time (NULL: no bound)
    -- columns: request_id, header_request_id, tenant_id, ts, prompt_tokens, status, ...
    -- more columns: decode_rid, decode_start_ts, ...

``-- columns:`` declares the query's output contract, in order: what every face writes as CSV
(``forensics <command> --format csv``, ``forensics investigate``'s ``<name>.csv``). ``-- more
columns:`` declares the columns the result has after those (the relation, JSON, Parquet and the
terminal keep them: they feed other queries, or repeat the evidence text as numbers). Both may
span several lines; a test checks them against the columns the query returns. ``-- order:`` is
the row order a face applies to a query that leaves its rows unordered (a full export).

Values are bound with DuckDB ``$name`` parameters, never string formatting. The files are found
in the installed wheel (``forensics/queries/``, package data) or, in an editable checkout, in the
repository's top-level ``queries/`` directory.

A query may read the result of another query file instead of repeating its body::

    -- input: affected_requests (the result of queries/affected_requests.sql, provided by the caller ...)

The body then reads ``FROM affected_requests_result`` (``<input>_result``); a query may declare
several inputs, one ``-- input:`` line each (each is run and bound the same way). It declares only the
parameters it uses itself; :func:`run_query` takes those plus the parameters of its inputs
(recursively), runs each input with its own share of them and binds its result to that name for
this query only (``DuckDBPyRelation.query``; a query that also binds parameters of its own gets the
input materialised and its own result materialised: no view is left on the connection either way,
and relations returned earlier keep their own inputs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import duckdb

from forensics.errors import QueryError

_PARAM_DECL = re.compile(r"^--\s*param\s+\$(\w+)\s+([\w\[\]]+)\s*:\s*(.*)$")
_INPUT_DECL = re.compile(r"^--\s*input\s*:\s*(\w+)\b")
_COLUMNS_DECL = re.compile(r"^--\s*(more\s+)?columns\s*:\s*(.*)$")
_ORDER_DECL = re.compile(r"^--\s*order\s*:\s*(.*)$")
_PARAM_USE = re.compile(r"(?<![\w$:])\$([A-Za-z_]\w*)")


@dataclass(frozen=True)
class QueryParam:
    """One declared ``$name`` parameter of a query file."""

    name: str
    type: str
    description: str


@dataclass(frozen=True)
class QueryFile:
    """A parsed query file.

    Example:
        >>> q = load_query("exposure_windows")
        >>> [p.name for p in q.params]
        ['node', 'start', 'end', 'limit_tokens']
        >>> q.columns[:3], load_query("affected_tenants").more_columns
        (('scope', 'node', 'role'), ('request_ids',))
    """

    name: str
    purpose: str
    params: tuple[QueryParam, ...]
    sql: str
    source: str
    inputs: tuple[str, ...] = ()
    #: the output contract, in order (``-- columns:``): what every face writes as CSV
    columns: tuple[str, ...] = ()
    #: the result's further columns (``-- more columns:``), after ``columns``
    more_columns: tuple[str, ...] = ()
    #: the row order a face applies (``-- order:``), for a query that leaves its rows unordered
    order: str | None = None

    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.params]

    @property
    def result_columns(self) -> tuple[str, ...]:
        """Every column of the result, in order: ``columns`` then ``more_columns``."""
        return self.columns + self.more_columns

    def all_params(self) -> list[QueryParam]:
        """Its own parameters, then those of its inputs (recursively), each once, as declared."""
        params = list(self.params)
        for inp in self.inputs:
            params += [p for p in load_query(inp).all_params() if p.name not in {q.name for q in params}]
        return params

    def all_param_names(self) -> list[str]:
        """Its own parameters, then those of its inputs (recursively): what :func:`run_query` takes."""
        names = self.param_names
        for inp in self.inputs:
            names += [n for n in load_query(inp).all_param_names() if n not in names]
        return names

    def used_params(self) -> set[str]:
        """The ``$name`` placeholders used in the SQL body (comments and strings excluded)."""
        body = _strip_comments_and_strings(self.sql)
        return set(_PARAM_USE.findall(body))


def _strip_comments_and_strings(sql: str) -> str:
    out = re.sub(r"--[^\n]*", " ", sql)
    out = re.sub(r"/\*.*?\*/", " ", out, flags=re.S)
    return re.sub(r"'(?:[^']|'')*'", "''", out)


def queries_dir() -> Traversable:
    """Where the query files are: the wheel's package data, else the checkout's ``queries/``.

    Example:
        >>> queries_dir().joinpath("pool_audit.sql").is_file()
        True
    """
    packaged = resources.files("forensics").joinpath("queries")
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "queries"
    if checkout.is_dir():
        return checkout
    raise QueryError(
        "the queries/ directory was not found next to the package or inside it",
        hint="reinstall forensics (pip install .) or run from a checkout",
    )


def query_names() -> list[str]:
    """Names of all query files, sorted (an engine's own form, ``<name>.spark.sql``, is not a query)."""
    return sorted(
        p.name[: -len(".sql")] for p in queries_dir().iterdir()
        if p.name.endswith(".sql") and "." not in p.name[: -len(".sql")]
    )


@cache
def load_query(name: str) -> QueryFile:
    """Read and parse ``queries/<name>.sql``.

    Example:
        >>> load_query("no_such_query")
        Traceback (most recent call last):
        ...
        forensics.errors.QueryError: query file no_such_query.sql not found (known: ...)
    """
    f = queries_dir().joinpath(f"{name}.sql")
    if not f.is_file():
        raise QueryError(f"query file {name}.sql not found (known: {', '.join(query_names())})")
    text = f.read_text(encoding="utf-8")
    purpose = ""
    params: list[QueryParam] = []
    inputs: list[str] = []
    columns: dict[bool, list[str]] = {False: [], True: []}
    order: str | None = None
    for line in text.splitlines():
        if not line.startswith("--"):
            if line.strip():
                break
            continue
        m = _PARAM_DECL.match(line.strip())
        if m:
            params.append(QueryParam(m.group(1), m.group(2), m.group(3).strip()))
        elif mi := _INPUT_DECL.match(line.strip()):
            inputs.append(mi.group(1))
        elif mc := _COLUMNS_DECL.match(line.strip()):
            columns[bool(mc.group(1))] += [c.strip() for c in mc.group(2).split(",") if c.strip()]
        elif mo := _ORDER_DECL.match(line.strip()):
            order = mo.group(1).strip()
        elif not purpose:
            purpose = line.lstrip("-").strip()
    if name in inputs:
        raise QueryError(f"query {name}.sql declares itself as input", where=str(f))
    return QueryFile(
        name=name, purpose=purpose, params=tuple(params), sql=text, source=str(f), inputs=tuple(inputs),
        columns=tuple(columns[False]), more_columns=tuple(columns[True]), order=order,
    )


#: (query name, its parameters) -> its materialised result, kept while a reader of an unchanging
#: case reuses the results other queries take as input (``Case.reusing``)
Memo = dict[tuple[str, tuple[tuple[str, Any], ...]], Any]


@cache
def input_queries() -> frozenset[str]:
    """The queries some other query reads as its input (their results are what a memo keeps).

    Example:
        >>> sorted(input_queries())
        ['affected_requests', 'affected_tenants', 'leak_sources', 'post_fix_check']
    """
    return frozenset(inp for n in query_names() for inp in load_query(n).inputs)


def run_query(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any], memo: Memo | None = None
) -> duckdb.DuckDBPyRelation:
    """Run a query file with exactly its declared parameters (and those of its inputs) bound.

    With ``memo`` (a dict), the result of a query that others take as input (:func:`input_queries`)
    is computed once per parameters, materialised, and reused by every later call and input; the
    caller guarantees the case does not change meanwhile.

    Example:
        >>> from forensics.sample import sample_case
        >>> rel = run_query(sample_case().con, "pool_audit", {"node": "prefill-0"})
        >>> [r[0] for r in rel.project("verdict").fetchall()]
        ['ok', 'exposed', 'ok']
        >>> memo: Memo = {}
        >>> a = run_query(sample_case().con, "affected_tenants", {"limit_tokens": None, "start": None, "end": None, "node": None}, memo)
        >>> sorted(k[0] for k in memo)
        ['affected_requests', 'affected_tenants']
    """
    if memo is not None and name in input_queries():
        key = (name, tuple(sorted(params.items())))
        try:
            table = memo.get(key)
        except TypeError:  # an unhashable parameter value: not reused
            return _run_query(con, name, params, memo)
        if table is None:
            try:
                table = memo[key] = _run_query(con, name, params, memo).to_arrow_table()
            except duckdb.Error as exc:  # it fails while it runs, here, not at the caller's fetch
                raise _failed(name, exc) from exc
        return con.from_arrow(table)
    return _run_query(con, name, params, memo)


def _run_query(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any], memo: Memo | None
) -> duckdb.DuckDBPyRelation:
    q = load_query(name)
    declared = set(q.all_param_names())
    given = set(params)
    if declared != given:
        raise QueryError(
            f"query {name}.sql declares parameters {sorted(declared)} but was called with {sorted(given)}",
            where=q.source,
        )
    sql = q.sql.strip().rstrip(";")
    own = {k: v for k, v in params.items() if k in set(q.param_names)}
    try:
        if len(q.inputs) > 1:
            # several inputs (notifications: recipients and sources): each materialised and bound
            # by name for this one statement, like the single-input path with parameters below
            results = {
                inp: run_query(con, inp, {k: params[k] for k in load_query(inp).all_param_names()}, memo).to_arrow_table()
                for inp in q.inputs
            }
            for inp, table in results.items():
                con.register(f"{inp}_result", table)
            try:
                result = (con.sql(sql, params=own) if own else con.sql(sql)).to_arrow_table()
            finally:
                for inp in results:
                    con.unregister(f"{inp}_result")
            return con.from_arrow(result)
        if q.inputs:
            (inp,) = q.inputs
            rel = run_query(con, inp, {k: params[k] for k in load_query(inp).all_param_names()}, memo)
            if not own:
                out = rel.query(f"{inp}_result", sql)
                if out is None:
                    raise QueryError(f"query {name} returned no result", where=q.source)
                return out
            # Relation.query() binds no parameters: the input (a small result, such as the affected
            # set) is materialised, bound by name for this one statement, and so is the output, so
            # no view outlives the call and the returned relation does not depend on one.
            view = f"{inp}_result"
            con.register(view, rel.to_arrow_table())
            try:
                result = con.sql(sql, params=own).to_arrow_table()
            finally:
                con.unregister(view)
            return con.from_arrow(result)
        return con.sql(sql, params=own) if own else con.sql(sql)
    except duckdb.Error as exc:
        raise _failed(name, exc) from exc


def _failed(name: str, exc: duckdb.Error) -> QueryError:
    """The one error a query that DuckDB could not run becomes (``query NAME failed: ...``)."""
    return QueryError(f"query {name} failed: {exc}", where=load_query(name).source)
