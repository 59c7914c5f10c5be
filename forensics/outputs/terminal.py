"""Query results as terminal tables that fit the window (rich), never raw DataFrame dumps.

Values come from :func:`forensics.outputs.export.rows_for_output` (one timestamp format, integers
as integers); NULL always prints as ``NULL``; long cells fold onto more lines instead of being cut.
Cell text is never read as rich markup, and control characters (a tenant id carrying a terminal
escape sequence or a CR) are shown as escapes, so data cannot move the cursor or recolour the screen.
"""

from __future__ import annotations

import io
import re
import shutil
import textwrap
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

#: A terminal table shows at most this many rows; the rest is counted in a footer.
MAX_TABLE_ROWS = 1000

NULL = "NULL"

#: Widest a column grows before its cells fold onto more lines.
MAX_CELL = 48

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """Control characters as escapes (``\\r``, ``\\n``, ``\\x1b``): what the data holds, shown safely.

    Example:
        >>> visible("a\\rb\\x1b[2Jc")
        'a\\\\rb\\\\x1b[2Jc'
    """
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)


def terminal_width() -> int:
    """Columns of the terminal (``$COLUMNS`` first), 120 when there is none."""
    return shutil.get_terminal_size(fallback=(120, 24)).columns


def render_table(
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    width: int | None = None,
    total: int | None = None,
) -> str:
    """A plain-text table of ``rows`` fitted to ``width`` columns (default: the terminal's).

    ``total`` is the number of rows of the whole result when ``rows`` holds only the first ones.

    Example:
        >>> print(render_table(["tenant", "n"], [["t1", 3], [None, 12]], width=40), end="")
        tenant   n
        ──────────
        t1       3
        NULL    12
    """
    from forensics.outputs.export import text_value

    if not rows:
        return "(no rows)\n"
    width = width or terminal_width()
    cells = [[NULL if v is None else visible(text_value(v)) for v in row] for row in rows]
    heads = [visible(n) for n in names]
    numeric = [
        all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in col)
        for col in zip(*rows, strict=True)
    ]
    # each column gets its natural width up to MAX_CELL (longer cells fold), never less than its
    # header; columns are kept in order while they fit, the others are named below the table
    natural = [
        max(len(h), min(MAX_CELL, max(len(c[i]) for c in cells))) for i, h in enumerate(heads)
    ]
    keep: list[int] = []
    used = 0
    for i, w in enumerate(natural):
        cost = w + (0 if i == 0 else 2)
        if keep and used + cost > width:
            break
        keep.append(i)
        used += cost
    table = Table(title=visible(title) if title else None, box=box.SIMPLE_HEAD, pad_edge=False,
                  header_style="bold", show_edge=False, collapse_padding=True)
    for i in keep:
        table.add_column(Text(heads[i]), justify="right" if numeric[i] else "left", overflow="fold",
                         min_width=min(natural[i], width), max_width=natural[i])
    for row, text_row in zip(rows, cells, strict=True):
        table.add_row(*(Text(NULL, style="dim") if row[i] is None else Text(text_row[i]) for i in keep))
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, highlight=False,
                      emoji=False, markup=False, soft_wrap=False)
    console.print(table)
    text = "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())
    hidden = [names[i] for i in range(len(names)) if i not in keep]
    if hidden:
        note = (f"({len(hidden)} more column(s) not shown at width {width}: {', '.join(hidden)}; "
                "widen the terminal or use --format csv / jsonl)")
        text += "\n".join(textwrap.wrap(note, width=max(width, 20))) + "\n"
    shown, whole = len(rows), total if total is not None else len(rows)
    if whole > shown:
        text += f"({shown:,} of {whole:,} rows shown: use --format csv, jsonl or parquet for all of them)\n"
    return text
