"""The case database's schema: its DDL files, in the order they run, and their Markdown (docs/schema.md).

Example:
    >>> SCHEMA_FILES[0]
    'schema_tables.sql'
"""

from __future__ import annotations

import re
from importlib import resources

#: The schema's files, in the order they run: the tables, then the views that read them.
SCHEMA_FILES = ("schema_tables.sql", "schema_engine.sql", "schema.sql")


def schema_sql() -> str:
    """Return the DDL of the case database (``forensics/schema_tables.sql``, ``schema_engine.sql``, ``schema.sql``).

    Example:
        >>> "CREATE TABLE IF NOT EXISTS gateway_requests" in schema_sql()
        True
    """
    root = resources.files("forensics")
    return "\n".join(root.joinpath(name).read_text(encoding="utf-8") for name in SCHEMA_FILES)


def schema_markdown() -> str:
    """Render the schema (tables, columns, types, comments) as the Markdown of docs/schema.md.

    Example:
        >>> "| request_id |" in schema_markdown()
        True
    """
    out = [
        "# Case database schema",
        "",
        "Generated from `forensics/schema*.sql` by `forensics.schema.schema_markdown()` (a test keeps",
        "this file in step). All timestamps are `TIMESTAMP` values in UTC; `file_id` + `line_no`",
        "point at `evidence_files` and the 1-based line (or record) of the source.",
        "",
    ]
    table_comment: list[str] = []
    in_table = False
    last_col: list[str] | None = None
    for raw in schema_sql().splitlines():
        line = raw.strip()
        m = re.match(r"CREATE TABLE IF NOT EXISTS (\w+)", line)
        v = re.match(r"CREATE OR REPLACE VIEW (\w+)", line)
        if m or v:
            name = (m or v).group(1)  # type: ignore[union-attr]
            out += [f"## `{name}`{' (view)' if v else ''}", ""]
            out += [c for c in table_comment if c] + ([""] if any(table_comment) else [])
            table_comment = []
            if m:
                out += ["| column | type | meaning |", "|---|---|---|"]
                in_table = True
            continue
        if in_table:
            if line.startswith(")"):
                in_table = False
                out.append("")
                continue
            if line.startswith("--") and last_col is not None:
                # a comment continuing the previous column's comment
                out[-1] = out[-1][: -len(" |")] + " " + line.lstrip("-").strip() + " |"
                continue
            cm = re.match(r"(\w+)\s+(.+?),?\s*(?:--\s*(.*))?$", line)
            if cm:
                col, typ, comment = cm.group(1), cm.group(2).rstrip(","), cm.group(3) or ""
                # a storage choice, not part of the column's type
                typ = re.sub(r"\s+USING COMPRESSION \w+", "", typ).replace("|", "\\|")
                out.append(f"| {col} | `{typ}` | {comment.replace('|', '/')} |")
                last_col = [col]
            continue
        if line.startswith("--"):
            table_comment.append(line.lstrip("-").strip())
        elif not line:
            table_comment = []  # a comment block only describes the table right below it
    return "\n".join(out).rstrip() + "\n"
