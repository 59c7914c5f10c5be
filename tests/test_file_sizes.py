"""No Python file (package, tests, benchmarks) over 800 lines, no SQL file over 250: a file that grows past its
budget is split along a real seam (a stage, a format table, a query), not left to grow."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


@pytest.mark.parametrize(
    ("folder", "pattern", "budget"),
    [
        ("forensics", "*.py", 800),
        ("forensics", "*.sql", 250),
        ("queries", "*.sql", 250),
        ("tests", "*.py", 800),
        ("benchmarks", "*.py", 800),
    ],
)
def test_no_file_over_its_line_budget(folder: str, pattern: str, budget: int) -> None:
    files = sorted((ROOT / folder).rglob(pattern))
    assert files, f"no {pattern} under {folder}/: the test would pass on nothing"
    over = {str(p.relative_to(ROOT)): n for p in files if (n := _lines(p)) > budget}
    assert not over, f"over {budget} lines (split them along a real seam): {over}"


@pytest.mark.parametrize(("text", "lines"), [(b"", 0), (b"a\n", 1), (b"a\nb", 2), (b"a\n\n", 2)])
def test_line_count_counts_physical_lines(tmp_path: Path, text: bytes, lines: int) -> None:
    f = tmp_path / "x.py"
    f.write_bytes(text)
    assert _lines(f) == lines
