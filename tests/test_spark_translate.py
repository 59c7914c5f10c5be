"""The DuckDB -> Spark SQL translation layer: sqlglot plus the project's rules (no Spark needed).

What the rows mean on Spark is proven by tests/test_spark.py; these pin the text each rule writes
and how a query is split into steps.
"""

from __future__ import annotations

import pytest

from forensics.spark.translate import TranslationError, statement_steps, to_spark
from forensics.sqlfiles import load_query, query_names


@pytest.mark.parametrize(
    "duckdb_sql, spark_sql",
    [
        # $name parameters become :name (bound with spark.sql(sql, args=...))
        ("SELECT * FROM t WHERE node = $node", "SELECT * FROM t WHERE node = :node"),
        ("SELECT CAST($limit_tokens AS BIGINT) AS x", "SELECT CAST(:limit_tokens AS BIGINT) AS x"),
        # epoch seconds keep their microseconds and stay a DOUBLE
        ("SELECT EXTRACT(EPOCH FROM ts) AS e FROM t", "SELECT UNIX_MICROS(CAST(ts AS TIMESTAMP_LTZ)) / 1E6 AS e FROM t"),
        ("SELECT epoch(ts) AS e FROM t", "SELECT UNIX_MICROS(CAST(ts AS TIMESTAMP_LTZ)) / 1E6 AS e FROM t"),
        # DuckDB sorts NULLs last ascending; Spark first: made explicit
        ("SELECT a FROM t ORDER BY a", "SELECT a FROM t ORDER BY a NULLS LAST"),
        ("SELECT row_number() OVER (PARTITION BY k ORDER BY v) FROM t",
         "SELECT ROW_NUMBER() OVER (PARTITION BY k ORDER BY v NULLS LAST) FROM t"),
        # an ordered string_agg keeps its order
        ("SELECT string_agg(id, ' ' ORDER BY ts) FROM t",
         "SELECT LISTAGG(id, ' ') WITHIN GROUP (ORDER BY ts NULLS LAST) FROM t"),
        # a distinct string_agg sorted by its own value: the sorted set, joined (Spark's LISTAGG
        # DISTINCT beside another DISTINCT aggregate fails in its optimiser); NULL without values
        ("SELECT count(DISTINCT a), string_agg(DISTINCT b, ' ' ORDER BY b) FROM t",
         "SELECT COUNT(DISTINCT a), CASE WHEN COUNT(b) > 0 THEN ARRAY_JOIN(ARRAY_SORT(COLLECT_SET(b)), ' ') END FROM t"),
        ("SELECT string_agg(DISTINCT b, '/' ORDER BY b DESC) FROM t",
         "SELECT CASE WHEN COUNT(b) > 0 THEN ARRAY_JOIN(REVERSE(ARRAY_SORT(COLLECT_SET(b))), '/') END FROM t"),
        # types and literals
        ("SELECT CAST(x AS VARCHAR), CAST(x AS INTEGER) FROM t", "SELECT CAST(x AS STRING), CAST(x AS INT) FROM t"),
        ("SELECT contains(b, '\\') FROM t", "SELECT CONTAINS(b, '\\\\') FROM t"),
        ("SELECT strpos(a, 'x') FROM t", "SELECT LOCATE('x', a) FROM t"),
    ],
)
def test_translation_rules(duckdb_sql: str, spark_sql: str) -> None:
    assert to_spark(duckdb_sql) == spark_sql


def test_an_ordered_list_keeps_its_order_nulls_last() -> None:
    out = to_spark("SELECT list(v ORDER BY k) AS vs FROM t GROUP BY g")
    assert out.startswith("SELECT TRANSFORM(ARRAY_SORT(COLLECT_LIST(STRUCT(k IS NULL AS n0, k AS k0, v AS v))), s -> s.v)")


def test_what_has_no_faithful_form_is_an_error_not_a_guess() -> None:
    with pytest.raises(TranslationError, match="DESC"):
        to_spark("SELECT list(v ORDER BY k DESC) FROM t")
    with pytest.raises(TranslationError, match="cannot parse"):
        to_spark("SELECT FROM WHERE")


def test_steps_rename_ctes_so_they_never_shadow_a_table() -> None:
    steps = statement_steps(
        "WITH gateway_requests AS (SELECT 1 AS x), b AS (SELECT x FROM gateway_requests) "
        "SELECT * FROM b JOIN gateway_requests g USING (x)", "q")
    assert [(s.name, s.view, s.uses) for s in steps] == [
        ("gateway_requests", "_q__gateway_requests", 2), ("b", "_q__b", 1), (None, None, 0)]
    assert steps[1].sql == "SELECT x FROM _q__gateway_requests AS gateway_requests"
    assert "_q__gateway_requests AS g" in steps[2].sql


def test_a_recursive_with_is_one_step() -> None:
    steps = statement_steps("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
                            "SELECT max(n) FROM r", "q")
    assert len(steps) == 1 and "RECURSIVE" in steps[0].sql


@pytest.mark.parametrize("name", query_names())
def test_every_query_file_translates(name: str) -> None:
    steps = statement_steps(load_query(name).sql, name)
    assert steps[-1].name is None
    assert all("$" not in s.sql.replace("'$'", "") for s in steps)


def test_forensics_spark_ingest_stays_the_function_once_its_module_is_loaded() -> None:
    """Regression: a submodule named like the package's function replaced it (``'module' object is not callable``)."""
    import types

    import forensics.spark.distributed  # noqa: F401
    from forensics.spark import ingest

    assert callable(ingest) and not isinstance(ingest, types.ModuleType)
