"""The DuckDB reader clauses every gateway load and sample uses (lines, CSV, compression).

Example:
    >>> lit("it's")
    "'it''s'"
"""

from __future__ import annotations


def lit(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def duck_compression(comp: str) -> str:
    return {"gzip": "gzip", "zstd": "zstd"}.get(comp, "none")


def lines_reader(path: str, comp: str, rejects: str | None) -> str:
    # One VARCHAR column per physical line: no quoting, a delimiter that never splits, '\n' only
    # (a stray '\r' stays inside the line). Blank lines come back as NULL rows, so row_number()
    # is the physical line number, except for lines the reader itself rejects (invalid UTF-8,
    # over-long): those are listed in the rejects table and the numbers fixed afterwards.
    extra = ""
    if rejects:
        extra = (f", ignore_errors=true, store_rejects=true, rejects_table={lit(rejects)}, "
                 f"rejects_scan={lit(rejects + '_scan')}")
    return (
        f"read_csv({lit(path)}, columns={{'line': 'VARCHAR'}}, header=false, delim='\\x01', "
        f"quote='', escape='', auto_detect=false, strict_mode=false, new_line='\\n', "
        f"max_line_size=8388608, buffer_size=33554432, compression={lit(duck_compression(comp))}{extra})"
    )


def csv_options(delim: str, columns: tuple[str, ...] = ()) -> str:
    """The read_csv dialect of a gateway CSV file: fixed from its header, never sniffed from its rows.

    DuckDB's sniffer gives up on small exports that contain a broken row, which is exactly when
    they are needed; with the header's ``columns`` known it is not run at all (a live export cut
    inside a quoted field, the common case while the exporter writes, would otherwise refuse
    the whole file: the cut record is then rejected as too short, the rest loaded).

    Example:
        >>> csv_options(",", ("a", "b")).endswith("columns={'a': 'VARCHAR', 'b': 'VARCHAR'}")
        True
    """
    base = f"delim={lit(delim)}, quote='\"', escape='\"', header=true, strict_mode=false"
    if not columns:
        return base + ", all_varchar=true"
    return base + ", auto_detect=false, columns={" + ", ".join(f"{lit(c)}: 'VARCHAR'" for c in columns) + "}"
