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


#: The column read after a CSV header's own: a record with more fields than the header fills it
#: (DuckDB's non-strict reader would drop them silently), so the record is rejected, not shortened.
CSV_EXTRA_COLUMN = "\x01forensics_extra_field"

#: What read_csv returns for a field equal to it (never in a log): an empty field stays '' and a
#: field missing from a short record is NULL, so the two can be told apart.
CSV_NO_NULL = "\x01forensics_no_null\x01"

#: The ``line`` a CSV record of the wrong width becomes (no field of it: nothing to redact); the
#: reason names the fault and the raw bytes are read from the file once its lines are numbered.
CSV_TOO_MANY = '["csv record", "too many fields"]'
CSV_TOO_FEW = '["csv record", "too few fields"]'


#: read_csv's buffer for a CSV file's records. DuckDB's default is 16 of its longest line (2 MiB):
#: 32 MB a buffer, and its parallel reader holds about three at once, most of a small load budget.
#: Still four times the longest line it accepts (``max_line_size`` stays at its 2 MiB).
CSV_BUFFER_BYTES = 8 << 20


def csv_records(path: str, delim: str, columns: tuple[str, ...], comp: str, rejects: str,
                parallel: bool = True) -> str:
    """SQL of ``(line)`` for a CSV file's records: JSON objects, or a marker for a wrong width.

    Read with the header's columns plus :data:`CSV_EXTRA_COLUMN`, short records padded with NULL
    (``null_padding``) and empty fields kept as '' (:data:`CSV_NO_NULL`): a record with more
    fields than the header fills the extra column, one with fewer leaves its last column NULL;
    both become :data:`CSV_TOO_MANY` / :data:`CSV_TOO_FEW` and are rejected. ``strict_mode``
    stays off: it refuses a whole file whose lines end in both CRLF and LF. Empty fields become
    NULL in the JSON, as DuckDB's default reading gives them.

    The reader is DuckDB's parallel one unless ``parallel`` is False: its single-threaded reader
    holds memory in proportion to the file (a 1.43 GB LiteLLM export ran out of the 572 MiB load
    budget, where the parallel reader stays near a bare read). The parallel reader refuses
    ``null_padding`` beside a quoted newline (:func:`refused_quoted_newline`); such a file is read
    again on one thread.

    Example:
        >>> "null_padding=true" in csv_records("a.csv", ",", ("a", "b"), "none", "r")
        True
        >>> "parallel=false" in csv_records("a.csv", ",", ("a", "b"), "none", "r", parallel=False)
        True
    """
    names = [*columns, CSV_EXTRA_COLUMN]
    cols = "{" + ", ".join(f"{lit(c)}: 'VARCHAR'" for c in names) + "}"

    def ident(c: str) -> str:
        return '"' + c.replace('"', '""') + '"'

    record = ", ".join(f"{ident(c)} := nullif(c.{ident(c)}, '')" for c in columns)
    return (
        f"SELECT CASE WHEN c.{ident(CSV_EXTRA_COLUMN)} IS NOT NULL THEN {lit(CSV_TOO_MANY)} "
        f"WHEN c.{ident(columns[-1])} IS NULL THEN {lit(CSV_TOO_FEW)} "
        f"ELSE to_json(struct_pack({record})) END AS line "
        f"FROM read_csv({lit(path)}, delim={lit(delim)}, quote='\"', escape='\"', header=true, "
        f"strict_mode=false, auto_detect=false, columns={cols}, null_padding=true, buffer_size={CSV_BUFFER_BYTES}, "
        f"{'' if parallel else 'parallel=false, '}"
        f"nullstr={lit(CSV_NO_NULL)}, ignore_errors=true, store_rejects=true, rejects_table={lit(rejects)}, "
        f"rejects_scan={lit(rejects + '_scan')}, compression={lit(duck_compression(comp))}) c"
    )


def refused_quoted_newline(exc: BaseException) -> bool:
    """True when DuckDB's parallel CSV reader refused a file for a quoted newline (see :func:`csv_records`).

    It refuses it even with ``ignore_errors``, at the first record that holds one; the file must
    then be read on one thread.

    Example:
        >>> refused_quoted_newline(ValueError("The parallel scanner does not support null_padding "
        ...                                   "in conjunction with quoted new lines."))
        True
    """
    return "null_padding in conjunction with quoted new lines" in str(exc)
