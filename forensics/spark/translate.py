"""DuckDB SQL (the one source of truth, ``queries/*.sql`` and the case views) to Spark SQL.

sqlglot does the dialect work (``read="duckdb", write="spark"``: types, ``$name`` -> ``:name``,
``NULLS LAST`` made explicit because the engines sort NULLs differently, ordered ``string_agg``
-> ``LISTAGG ... WITHIN GROUP``). The project's own rules, applied to the syntax tree before it is
written, cover what sqlglot translates into something that means less:

* ``EXTRACT(EPOCH FROM ts)`` and ``epoch(ts)``: DuckDB gives seconds *with* the microseconds;
  sqlglot's ``UNIX_TIMESTAMP`` truncates to whole seconds (time matching would change). Written as
  ``unix_micros(CAST(ts AS TIMESTAMP_LTZ)) / 1E6`` (a double, as DuckDB's; the zone is UTC).
* ``list(x ORDER BY ...)`` / ``array_agg(x ORDER BY ...)``: sqlglot drops the order
  (``COLLECT_LIST``); written as the values sorted by the keys (``array_sort`` of structs).
* Anything sqlglot cannot express raises :class:`TranslationError` (never a silent guess): such a
  query gets its own ``<name>.spark.sql`` beside it, proven equal by the parity tests.

:func:`statement_steps` splits a query into its top-level CTEs, each a step Spark plans on its own:
one statement of 40 CTEs produced a plan Spark never finished optimising (measured); as separate
temp views, and with the CTEs read more than once materialised, the same query runs in seconds.

Example:
    >>> to_spark("SELECT CAST(x AS VARCHAR) AS s FROM t WHERE n = $node ORDER BY s")
    'SELECT CAST(x AS STRING) AS s FROM t WHERE n = :node ORDER BY s NULLS LAST'
    >>> to_spark("SELECT EXTRACT(EPOCH FROM ts) AS e FROM t")
    'SELECT UNIX_MICROS(CAST(ts AS TIMESTAMP_LTZ)) / 1E6 AS e FROM t'
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from forensics.errors import QueryError


class TranslationError(QueryError):
    """A DuckDB statement has no faithful Spark SQL form (write a ``<name>.spark.sql`` override)."""


# -- the project's rules ---------------------------------------------------------------------


def _epoch_seconds(arg: exp.Expression) -> exp.Expression:
    ltz = exp.Cast(this=arg.copy(), to=exp.DataType.build("TIMESTAMPLTZ"))
    return exp.Div(
        this=exp.Anonymous(this="UNIX_MICROS", expressions=[ltz]),
        # a DOUBLE literal (1000000.0 would be a DECIMAL in Spark: exact, but not DuckDB's double)
        expression=exp.Literal.number("1E6"),
    )


def _ordered_list(node: exp.Expression) -> exp.Expression | None:
    """``list(x ORDER BY k1, k2)``: the values sorted by the keys, nulls as DuckDB orders them."""
    inner = node.this
    if not isinstance(inner, exp.Order):
        return None
    value = inner.this
    keys = list(inner.expressions)
    fields: list[exp.Expression] = []
    for i, key in enumerate(keys):
        if key.args.get("desc"):
            raise TranslationError("list()/array_agg() ordered DESC has no faithful Spark form",
                                   hint="sort ascending, or write a <name>.spark.sql override")
        fields.append(exp.PropertyEQ(this=exp.to_identifier(f"k{i}"), expression=key.this.copy()))
    fields.append(exp.PropertyEQ(this=exp.to_identifier("v"), expression=value.copy()))
    # array_sort orders structs field by field with NULLs first: DuckDB's ASC puts them last, so
    # each key is preceded by its IS NULL flag (false < true)
    flagged: list[exp.Expression] = []
    for i, key in enumerate(keys):
        flagged.append(exp.PropertyEQ(this=exp.to_identifier(f"n{i}"),
                                      expression=exp.Is(this=key.this.copy(), expression=exp.Null())))
        flagged.append(fields[i].copy())
    flagged.append(fields[-1].copy())
    structs = exp.Anonymous(this="COLLECT_LIST", expressions=[exp.Struct(expressions=flagged)])
    sorted_ = exp.Anonymous(this="ARRAY_SORT", expressions=[structs])
    lam = exp.Lambda(this=exp.Dot(this=exp.column("s"), expression=exp.to_identifier("v")),
                     expressions=[exp.to_identifier("s")])
    return exp.Anonymous(this="TRANSFORM", expressions=[sorted_, lam])


def _distinct_sorted_string_agg(node: exp.GroupConcat) -> exp.Expression | None:
    """``string_agg(DISTINCT x, sep ORDER BY x)``: the distinct values sorted and joined.

    Spark's ``LISTAGG(DISTINCT ...) WITHIN GROUP`` beside another DISTINCT aggregate of the same
    GROUP BY fails in its optimiser (``RewriteDistinctAggregates`` casts the ordering to the wrong
    class: Spark 4.0); ``array_join(array_sort(collect_set(x)), sep)`` is the same value, and NULL
    when no value is there, as DuckDB's.
    """
    order = node.this
    if not isinstance(order, exp.Order) or not isinstance(order.this, exp.Distinct):
        return None
    values = order.this.expressions
    keys = order.expressions
    if len(values) != 1 or len(keys) != 1 or keys[0].this != values[0]:
        return None
    value = values[0]
    ordered: exp.Expression = exp.Anonymous(
        this="ARRAY_SORT", expressions=[exp.Anonymous(this="COLLECT_SET", expressions=[value.copy()])])
    if keys[0].args.get("desc"):
        ordered = exp.Anonymous(this="REVERSE", expressions=[ordered])
    separator = node.args.get("separator") or exp.Literal.string(",")
    joined = exp.Anonymous(this="ARRAY_JOIN", expressions=[ordered, separator.copy()])
    present = exp.GT(this=exp.Count(this=value.copy()), expression=exp.Literal.number(0))
    return exp.Case(ifs=[exp.If(this=present, true=joined)])


def _rewrite(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.GroupConcat):
        distinct = _distinct_sorted_string_agg(node)
        if distinct is not None:
            return distinct
    if isinstance(node, exp.Extract) and node.this.name.upper() == "EPOCH":
        return _epoch_seconds(node.expression)
    if isinstance(node, exp.Anonymous) and node.name.upper() == "EPOCH" and len(node.expressions) == 1:
        return _epoch_seconds(node.expressions[0])
    if isinstance(node, exp.UnixSeconds | exp.TimeToUnix):
        return _epoch_seconds(node.this)
    if isinstance(node, exp.ArrayAgg):
        ordered = _ordered_list(node)
        if ordered is not None:
            return ordered
    return node


def _parse(sql: str, read: str = "duckdb") -> exp.Expression:
    try:
        tree = sqlglot.parse_one(sql, read=read)
    except SqlglotError as exc:
        raise TranslationError(f"cannot parse the {read} SQL: {_short(exc)}",
                               hint="write a <name>.spark.sql override beside the query") from exc
    if not isinstance(tree, exp.Expression):
        raise TranslationError(f"not a statement: {sql[:80]!r}")
    return tree


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def _write(tree: exp.Expression) -> str:
    try:
        return tree.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE, comments=False)
    except SqlglotError as exc:
        raise TranslationError(f"no Spark SQL form: {_short(exc)}",
                               hint="write a <name>.spark.sql override beside the query") from exc


def translate_tree(tree: exp.Expression) -> str:
    """Apply the project's rules to a parsed DuckDB statement and write it as Spark SQL."""
    return _write(tree.copy().transform(_rewrite))


def to_spark(sql: str) -> str:
    """Translate one DuckDB statement to Spark SQL (``$name`` becomes ``:name``).

    Example:
        >>> to_spark("SELECT string_agg(id, ' ' ORDER BY ts) AS ids FROM t")
        "SELECT LISTAGG(id, ' ') WITHIN GROUP (ORDER BY ts NULLS LAST) AS ids FROM t"
    """
    return translate_tree(_parse(sql))


# -- a query in steps ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One top-level CTE of a query (or its final SELECT, ``name`` None) as Spark SQL.

    ``view`` is the temp view name the later steps read it by (unique per query, so a CTE never
    shadows a case table); ``uses`` counts how often the later steps read it (more than once:
    worth materialising).
    """

    name: str | None
    view: str | None
    sql: str
    uses: int


def _table_refs(tree: exp.Expression, names: set[str]) -> list[exp.Table]:
    return [t for t in tree.find_all(exp.Table) if not t.args.get("db") and t.name in names]


def statement_steps(sql: str, prefix: str, *, read: str = "duckdb") -> list[Step]:
    """Split a query into Spark SQL steps: its top-level CTEs, then the final SELECT.

    ``read`` is the dialect of ``sql``: ``duckdb`` (translated), or ``spark`` for an override. A
    recursive WITH, or a CTE name reused inside a nested WITH, is kept whole (one step).

    Example:
        >>> [(s.name, s.uses) for s in statement_steps(
        ...     "WITH a AS (SELECT 1 AS x), b AS (SELECT x FROM a) SELECT * FROM a JOIN b USING (x)", "q")]
        [('a', 2), ('b', 1), (None, 0)]
        >>> statement_steps("WITH a AS (SELECT 1 AS x) SELECT x FROM a", "q")[1].sql
        'SELECT x FROM _q__a AS a'
    """
    tree = _parse(sql, read)
    with_ = tree.args.get("with_") or tree.args.get("with")
    if not isinstance(with_, exp.With) or with_.args.get("recursive"):
        return [Step(None, None, translate_tree(tree), 0)]
    ctes = list(with_.expressions)
    names = [c.alias for c in ctes]
    inner_names = {c.alias for w in tree.find_all(exp.With) if w is not with_ for c in w.expressions}
    if inner_names & set(names):
        return [Step(None, None, translate_tree(tree), 0)]
    views = {n: f"_{prefix}__{n}" for n in names}
    bodies: list[tuple[str | None, exp.Expression]] = [(c.alias, c.this.copy()) for c in ctes]
    final = tree.copy()
    final.set("with_", None)
    final.set("with", None)
    bodies.append((None, final))
    uses = dict.fromkeys(names, 0)
    for _, body in bodies:
        for t in _table_refs(body, set(names)):
            uses[t.name] += 1
    steps: list[Step] = []
    for name, body in bodies:
        for t in _table_refs(body, set(names)):
            if not t.alias:  # columns may be qualified by the CTE's name
                t.set("alias", exp.TableAlias(this=exp.to_identifier(t.name)))
            t.set("this", exp.to_identifier(views[t.name]))
        steps.append(Step(name, views.get(name) if name else None, translate_tree(body),
                          uses[name] if name else 0))
    return steps
