"""Make data safe for the places outputs are read: spreadsheets, browsers, Markdown viewers.

Tenant ids, models and paths come from logs an attacker may write to. Every output escapes them
for its medium, and none changes the value a reader recovers:

* CSV: a cell that a spreadsheet would run as a formula (it begins with ``=``, ``+``, ``-``, ``@``,
  tab or CR: OWASP's list) gets a leading ``'``; numbers stay numbers. :func:`csv_field` quotes a
  field holding a delimiter, quote, CR or LF, so a value can never split a row.
* HTML: text and attribute values through :func:`html_text`; JSON inside a ``<script>`` through
  :func:`json_for_script` (no ``</script>``, ``<!--`` or line separators can end or bend the block).
* Markdown: :func:`md_text` backslash-escapes the punctuation that starts inline markup (pipes
  included, so a table cell stays one cell) and writes CR/LF as character references: the rendered
  text is the original value, character for character.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

#: First characters that make a spreadsheet evaluate a cell (OWASP "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def csv_cell(text: str) -> str:
    """Neutralise a text cell a spreadsheet would evaluate as a formula (OWASP: prefix ``'``).

    A plain number written as text (``-5``, ``+1.5e3``) is left alone: it is a number to the
    spreadsheet too. A cell that already begins with ``'`` before one of those characters gets a
    second one, so dropping one leading ``'`` always gives the value back.

    Example:
        >>> [csv_cell(v) for v in ["=HYPERLINK(\\"http://x\\")", "@SUM(A1)", "-5", "ok", "'=x"]]
        ['\\'=HYPERLINK("http://x")', "'@SUM(A1)", '-5', 'ok', "''=x"]
    """
    if not text:
        return text
    if text[0] in FORMULA_START:
        return text if _PLAIN_NUMBER.fullmatch(text) else "'" + text
    if text[0] == "'" and len(text) > 1 and text[1] in (*FORMULA_START, "'"):
        return "'" + text
    return text


def csv_uncell(text: str) -> str:
    """The value :func:`csv_cell` was given (for readers and tests of the CSV outputs).

    Example:
        >>> csv_uncell(csv_cell("=1+1")), csv_uncell(csv_cell("''x")), csv_uncell("plain")
        ('=1+1', "''x", 'plain')
    """
    if len(text) > 1 and text[0] == "'" and text[1] in (*FORMULA_START, "'"):
        return text[1:]
    return text


def csv_field(text: str, delimiter: str = ",") -> str:
    """Quote a CSV field (RFC 4180) if it holds the delimiter, a quote, CR or LF.

    Python's csv module leaves a lone CR unquoted when the line terminator is LF; a spreadsheet
    then starts a new row there. Every CR or LF is quoted here.

    Example:
        >>> csv_field("a,b"), csv_field("x\\ry"), csv_field('a"b'), csv_field("plain")
        ('"a,b"', '"x\\ry"', '"a""b"', 'plain')
    """
    if any(c in text for c in (delimiter, '"', "\r", "\n")):
        return '"' + text.replace('"', '""') + '"'
    return text


def html_text(value: Any) -> str:
    """Escape a value for HTML text or a quoted attribute (``& < > " '``).

    Example:
        >>> html_text("</script><script>alert(1)</script>")
        '&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;'
    """
    return html.escape(str(value), quote=True)


_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def json_for_script(data: Any, **dumps: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">`` and still parses the same.

    ``<``, ``>`` and ``&`` are written as ``\\u`` escapes, so no ``</script>`` or ``<!--`` can
    appear; U+2028/U+2029 too (they end a line in older JavaScript).

    Example:
        >>> json_for_script({"tenant": "</script><b>"})
        '{"tenant": "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e"}'
        >>> json.loads(json_for_script({"tenant": "</script>"}))["tenant"]
        '</script>'
    """
    text = json.dumps(data, ensure_ascii=False, **dumps)
    return "".join(_SCRIPT_UNSAFE.get(c, c) for c in text)


#: ASCII punctuation that can open or close inline Markdown (CommonMark + GFM tables,
#: strikethrough, autolinks, raw HTML, entities). Backslash-escaping any ASCII punctuation is
#: allowed by CommonMark and renders the character itself.
_MD_SPECIAL = set("\\`*_[]<>&|~!#")


def md_text(value: Any) -> str:
    """Escape a value for Markdown text or a GFM table cell; the rendered text is the value itself.

    Pipes stay in their cell (``\\|``), HTML is shown, not run, and CR/LF, tabs and leading or
    trailing spaces become character references (``&#13;``, ``&#10;``, ``&#9;``, ``&#32;``) so a
    value can neither end a table row nor lose a character.

    Example:
        >>> md_text("a|b"), md_text("<b>x</b>"), md_text("line1\\nline2")
        ('a\\\\|b', '\\\\<b\\\\>x\\\\</b\\\\>', 'line1&#10;line2')
    """
    text = str(value)
    out = []
    for i, c in enumerate(text):
        if c == "_" and 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum():
            out.append(c)  # intraword: never emphasis in CommonMark, keeps file names readable
        elif c in _MD_SPECIAL:
            out.append("\\" + c)
        elif c == "\t":
            out.append("&#9;")  # a table cell's content is trimmed: a tab or edge space would vanish
        elif c == " " and (i == 0 or i == len(text) - 1):
            out.append("&#32;")
        elif c == "\n":
            out.append("&#10;")
        elif c == "\r":
            out.append("&#13;")
        else:
            out.append(c)
    return "".join(out)
