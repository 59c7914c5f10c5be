"""The mutant table of ``make mutate`` still resolves against the code (every fragment found once).

When code moves (a query split into views, a loader rewritten), this names the rows to re-point in
``tests/mutation/mutants.toml``; the mutation run itself is ``make mutate`` (not part of make test).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "mutation"))
import mutate


def test_every_mutant_finds_its_target() -> None:
    mutants = mutate.load_table()
    assert len(mutants) >= 60
    problems = mutate.check(mutants)
    assert not problems, "re-point these rows of tests/mutation/mutants.toml:\n" + "\n".join(problems)


def test_every_equivalent_mutant_is_explained() -> None:
    for m in mutate.load_table():
        assert m.guards.strip(), m.id
        if m.equivalent is not None:
            assert len(m.equivalent.split()) >= 8, f"{m.id}: say why no answer can change"


@pytest.mark.parametrize(
    ("text", "find", "after", "span"),
    [
        ("a >= b AND\n   c >= b", "c >= b", None, (14, 20)),
        ("x >= 1 -- x >= 2\n", "x >= 1", None, (0, 6)),
        ("s AS (x >= 1), t AS (x >= 1)", "x >= 1", "t AS (", (21, 27)),
    ],
)
def test_fragments_are_found_by_tokens(text: str, find: str, after: str | None, span: tuple[int, int]) -> None:
    assert mutate.find_span(text, find, "sql", after) == span


@pytest.mark.parametrize(("text", "find"), [("x >= 1 OR x >= 1", "x >= 1"), ("x > 1", "x >= 1")])
def test_ambiguous_or_missing_fragments_are_errors(text: str, find: str) -> None:
    with pytest.raises(mutate.TableError):
        mutate.find_span(text, find, "sql")
