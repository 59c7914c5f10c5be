"""Each fixed vocabulary of ``forensics.kinds`` is the one its code and SQL use: every value the
sample case holds is in it, and every value of it is written by the code or query that produces
the column (no stale value), so the ``Literal`` types cannot drift from the database."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forensics import analysis, kinds
from forensics.case import Case
from forensics.outputs import charts, export
from forensics.sources.engine.catalogue import catalogue

ROOT = Path(__file__).resolve().parent.parent


def _sql(query: str) -> Callable[[Case], list[Any]]:
    return lambda case: [r[0] for r in case.sql(query).fetchall()]


def _column(func: Callable[..., Any], column: str) -> Callable[[Case], list[Any]]:
    return lambda case: func(case).df()[column].tolist()


VOCABULARIES = [
    # (values, files that write them, the values the sample case holds)
    (kinds.FILE_KINDS, ["forensics/sources/gateway/ingest.py", "forensics/sources/engine/loader.py"],
     _sql("SELECT DISTINCT kind FROM evidence_files")),
    (kinds.ROLES, ["forensics/sources/engine/starts.py"], _sql("SELECT DISTINCT role FROM engine_starts")),
    (kinds.ROLE_SOURCES, ["forensics/sources/engine/starts.py"],
     _sql("SELECT DISTINCT role_source FROM engine_starts")),
    (kinds.REQUEST_RECORD_KINDS, ["forensics/sources/engine/sql.py", "forensics/sources/engine/kinds.toml"],
     _sql("SELECT DISTINCT kind FROM engine_requests")),
    (kinds.REJECTION_KINDS, ["forensics/sources/engine/kinds.toml"],
     _sql("SELECT DISTINCT kind FROM engine_rejections")),
    (kinds.LINE_FAMILIES, ["forensics/sources/engine/kinds.toml", "forensics/sources/engine/loader.py"],
     _sql("SELECT DISTINCT family FROM engine_line_kinds")),
    (kinds.START_VERDICTS, ["forensics/schema.sql"], _sql("SELECT DISTINCT verdict FROM start_periods")),
    (kinds.WINDOW_SCOPES, ["queries/exposure_windows.sql"], _column(analysis.exposure_windows, "scope")),
    (kinds.MATCH_METHODS, ["queries/facts/match_candidates.sql"],
     _sql("SELECT DISTINCT match_method FROM chain_matches")),
    (kinds.CONFIDENCES, ["queries/affected_requests.sql"], _column(analysis.affected_requests, "confidence")),
    (kinds.NOTICE_TYPES, ["queries/notifications.sql"], _column(analysis.notifications, "notice_type")),
    (kinds.POST_FIX_RESULTS, ["queries/post_fix_check.sql"], _column(analysis.post_fix_check, "result")),
    (kinds.GAP_PROBLEMS, ["queries/evidence_gaps.sql"], _column(analysis.evidence_gaps, "problem")),
    (kinds.ANSWER_VERDICTS, ["queries/impact_summary.sql"], _column(analysis.impact_summary, "answer")),
]


@pytest.mark.parametrize(("values", "files", "found"), VOCABULARIES, ids=[str(v[0][0]) for v in VOCABULARIES])
def test_vocabulary_is_the_one_the_code_writes(values: tuple[str, ...], files: list[str],
                                               found: Callable[[Case], list[Any]], sample_case: Case) -> None:
    assert len(set(values)) == len(values)
    text = "\n".join((ROOT / f).read_text(encoding="utf-8") for f in files)
    stale = [v for v in values if not re.search(rf"['\"]{re.escape(v)}['\"]", text)]
    assert stale == [], f"values no file of {files} writes"
    held = {v for v in found(sample_case) if v is not None}
    assert held, "the sample holds none of these values: the check would pass on nothing"
    assert held <= set(values), f"the case holds values outside the vocabulary: {held - set(values)}"


@pytest.mark.parametrize(
    ("registry", "values"),
    [
        (export.FORMATS, kinds.TABLE_FORMATS),
        (charts.CHART_FORMATS, kinds.CHART_FORMATS),
        (tuple(sorted({k.family for k in catalogue().kinds})), tuple(sorted(kinds.LINE_FAMILIES))),
    ],
)
def test_code_registries_are_the_vocabularies(registry: tuple[str, ...], values: tuple[str, ...]) -> None:
    assert registry == values


def test_loaders_registered_are_the_file_kinds() -> None:
    import forensics.sources  # noqa: F401  (registers the loaders)
    from forensics.case import _LOADERS

    assert sorted(_LOADERS) == sorted(kinds.FILE_KINDS)


@pytest.mark.parametrize(("value", "ok"), [("csv", True), ("CSV", False), ("", False), (None, False)])
def test_member_accepts_only_the_vocabulary(value: object, ok: bool) -> None:
    if ok:
        assert kinds.member(value, kinds.TABLE_FORMATS, "format") == value
    else:
        with pytest.raises(ValueError, match=r"format .* is not one of table, csv, json, jsonl, parquet"):
            kinds.member(value, kinds.TABLE_FORMATS, "format")
