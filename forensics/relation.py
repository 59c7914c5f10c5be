"""What every analysis function returns: a DuckDB relation whose ``.arrow()`` is a whole table.

DuckDB's own ``DuckDBPyRelation.arrow()`` hands back a ``pyarrow.RecordBatchReader``: a stream
holding the connection's one open result until it is read to the end, so a half-read reader blocks
the next query on the case ("connection has an open result"). :class:`Relation` wraps a relation:
``.arrow()`` reads the result whole into a ``pyarrow.Table`` (the connection is free again at once);
every other attribute is the relation's own (``.df()``, ``.fetchall()``, ``.order()``,
``.filter()``, ``.columns``, ...), and the relations those return are wrapped again. A stream is
still there by its own name, ``.to_arrow_reader()``: read it to the end (or drop it) before the
next query on the same case.

Example:
    >>> import duckdb
    >>> rel = Relation(duckdb.sql("SELECT range AS i FROM range(3)"))
    >>> rel.arrow().num_rows, type(rel.order("i DESC")).__name__, rel.columns
    (3, 'Relation', ['i'])
"""

from __future__ import annotations

from typing import Any, TypeVar

import duckdb
import pandas as pd
import pyarrow as pa
from duckdb.sqltypes import DuckDBPyType

__all__ = ["AnyRelation", "Relation"]


def _wrap(value: Any, keep: Any) -> Any:
    return Relation(value, keep) if isinstance(value, duckdb.DuckDBPyRelation) else value


class Relation:
    """A query result on a case: a DuckDB relation whose ``.arrow()`` is a materialised ``pyarrow.Table``.

    ``keep`` is held for as long as the result is (the case it came from: a case opened by path
    for one call stays open while its result is used). ``.relation`` is the DuckDB relation itself,
    for an API that needs one.

    Example:
        >>> import duckdb
        >>> con = duckdb.connect()
        >>> big = Relation(con.sql("SELECT range AS i FROM range(1000000)"))
        >>> table = big.arrow()                        # read whole: the connection is free
        >>> con.sql("SELECT 42").fetchall(), table.num_rows
        ([(42,)], 1000000)
    """

    __slots__ = ("_keep", "_rel")

    def __init__(self, relation: duckdb.DuckDBPyRelation, keep: Any = None) -> None:
        if isinstance(relation, Relation):
            keep = keep if keep is not None else relation._keep
            relation = relation._rel
        self._rel = relation
        self._keep = keep

    @property
    def relation(self) -> duckdb.DuckDBPyRelation:
        """The DuckDB relation this wraps."""
        return self._rel

    def arrow(self, batch_size: int = 1_000_000) -> pa.Table:
        """The whole result as a ``pyarrow.Table`` (never a stream that holds the connection)."""
        return self._rel.to_arrow_table(batch_size)

    def to_arrow_table(self, batch_size: int = 1_000_000) -> pa.Table:
        """The whole result as a ``pyarrow.Table``."""
        return self._rel.to_arrow_table(batch_size)

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        # pa.table(rel), polars, pandas: the result read whole first, so no consumer can leave the
        # connection holding a half-read stream
        return self.arrow().__arrow_c_stream__(requested_schema)

    def df(self) -> pd.DataFrame:
        """The whole result as a pandas DataFrame."""
        frame: pd.DataFrame = self._rel.df()
        return frame

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Every row as a tuple."""
        return self._rel.fetchall()

    @property
    def columns(self) -> list[str]:
        """The column names, in order."""
        return list(self._rel.columns)

    @property
    def types(self) -> list[DuckDBPyType]:
        """The DuckDB types of the columns, in order."""
        return list(self._rel.types)

    def order(self, order_expr: str) -> Relation:
        """The rows sorted by ``order_expr`` (SQL ``ORDER BY`` terms)."""
        return Relation(self._rel.order(order_expr), self._keep)

    def filter(self, filter_expr: str | duckdb.Expression) -> Relation:
        """The rows for which ``filter_expr`` holds (SQL text or an expression)."""
        return Relation(self._rel.filter(filter_expr), self._keep)

    def select(self, *args: str | duckdb.Expression) -> Relation:
        """These columns or expressions."""
        return Relation(self._rel.select(*args), self._keep)

    def project(self, *args: str | duckdb.Expression) -> Relation:
        """These columns or expressions (as :meth:`select`)."""
        return Relation(self._rel.project(*args), self._keep)

    def limit(self, n: int, offset: int = 0) -> Relation:
        """The first ``n`` rows after ``offset``."""
        return Relation(self._rel.limit(n, offset), self._keep)

    def aggregate(self, aggr_expr: str | list[duckdb.Expression], group_expr: str = "") -> Relation:
        """Aggregates, optionally grouped (``rel.aggregate("count(*)")``)."""
        return Relation(self._rel.aggregate(aggr_expr, group_expr), self._keep)

    def __getattr__(self, name: str) -> Any:
        # everything else is the relation's own; a relation it returns is wrapped again
        if name in Relation.__slots__:
            raise AttributeError(name)
        attr = getattr(self._rel, name)
        if callable(attr) and not isinstance(attr, duckdb.DuckDBPyRelation):
            keep = self._keep

            def call(*args: Any, **kwargs: Any) -> Any:
                return _wrap(attr(*args, **kwargs), keep)

            call.__doc__ = attr.__doc__
            return call
        return _wrap(attr, self._keep)

    def __getitem__(self, name: str) -> Relation:
        return Relation(self._rel[name], self._keep)

    def __len__(self) -> int:
        return len(self._rel)

    def __contains__(self, name: str) -> bool:
        return name in self._rel

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *dir(self._rel)})

    def __repr__(self) -> str:
        return repr(self._rel)

    def __str__(self) -> str:
        return str(self._rel)




#: a function that filters or sorts either kind of relation returns the kind it was given
AnyRelation = TypeVar("AnyRelation", Relation, duckdb.DuckDBPyRelation)
