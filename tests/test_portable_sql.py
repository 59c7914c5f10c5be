"""The SQL files are written in the subset that DuckDB, Spark SQL and standard SQL share.

The translation layer (``forensics/spark/translate.py``) would turn a bare ``VARCHAR`` cast, an
``EXTRACT(EPOCH ...)`` or a double-quoted identifier into Spark's forms, but a query that needs no
translation is one fewer place where two engines can disagree, and the next engine (Trino, a
warehouse) gets the same text. Each rule here is one the files used to break.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The Spark overrides are Spark SQL by definition; the loaders' SQL (forensics/sources) is DuckDB's
# own ingest and never runs elsewhere.
FILES = sorted(
    p for p in [*ROOT.joinpath("queries").rglob("*.sql"), *ROOT.joinpath("forensics").glob("*.sql")]
    if not p.name.endswith(".spark.sql")
)

# post_fix_check's output column is called "check", a reserved word in DuckDB and in standard SQL
# (CHECK constraints): it must be quoted, and renaming it would change the report and CSV columns
# that responders already read. Standard SQL quotes identifiers with double quotes; sqlglot turns
# them into Spark's backticks.
QUOTED_ALLOWED = {"check"}

RULES = [
    ("a bare VARCHAR cast: write VARCHAR(n) (Spark refuses VARCHAR without a length)",
     re.compile(r"\bAS\s+VARCHAR\s*\)", re.IGNORECASE)),
    ("DuckDB's :: cast: write CAST(x AS type)", re.compile(r"::\s*[A-Za-z]")),
    ("EXTRACT(EPOCH ...) is not standard SQL: write date_diff('microsecond', TIMESTAMP "
     "'1970-01-01 00:00:00', ts) as match_candidates.sql does", re.compile(r"EXTRACT\s*\(\s*EPOCH\b", re.IGNORECASE)),
]


def _code(sql: str) -> str:
    """The SQL with comments and string literals blanked out (positions kept)."""
    # One left-to-right scan: an apostrophe inside a comment ("the node's pool") opens no literal.
    return re.sub(r"--[^\n]*|'(?:[^']|'')*'", lambda m: re.sub(r"[^\n]", " ", m.group()), sql)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def test_the_files_are_found() -> None:
    names = {p.name for p in FILES}
    assert {"affected_requests.sql", "schema.sql"} <= names
    assert any(p.parent.name == "facts" for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_sql_file_is_in_the_portable_subset(path: Path) -> None:
    text = path.read_text()
    code = _code(text)
    bad = [f"{path.name}:{_line(code, m.start())}: {why}: {m.group()!r}"
           for why, rx in RULES for m in rx.finditer(code)]
    bad += [f"{path.name}:{_line(code, m.start())}: double-quoted identifier {m.group()}: name it "
            "without quotes" for m in re.finditer(r'"([^"\n]*)"', code)
            if m.group(1) not in QUOTED_ALLOWED]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("sql", "caught"),
    [
        ("SELECT CAST(n AS VARCHAR) FROM t", True),
        ("SELECT CAST(n AS varchar ) FROM t", True),
        ("SELECT CAST(n AS VARCHAR(64)) FROM t", False),
        ("SELECT n::VARCHAR FROM t", True),
        ("SELECT EXTRACT(epoch FROM ts) FROM t", True),
        ("SELECT 'AS VARCHAR)' AS s FROM t -- CAST(n AS VARCHAR)", False),
        ("SELECT n -- the node's pool\n, CAST(n AS VARCHAR) FROM t", True),
    ],
)
def test_the_rules_catch_what_they_name(sql: str, caught: bool) -> None:
    code = _code(sql)
    assert any(rx.search(code) for _, rx in RULES) is caught
