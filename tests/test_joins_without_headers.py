"""Joins without request headers: the affected set is the same when no engine line carries the gateway's id.

Many deployments never set SGLANG_LOG_REQUEST_HEADERS: then no engine request line carries the
x-request-id, and gateway records meet their engine chains by rid or by time (and tokens) instead
(chain_matches). On the sample, stripped of every engine header id, the answer must not move.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import forensics


def _answer(case: forensics.Case) -> dict[str, str]:
    df = forensics.affected_requests(case).df()
    return dict(zip(df.request_id, df.confidence, strict=True))


def test_affected_set_is_the_same_without_request_headers(sample_case_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "no_headers.duckdb"
    shutil.copy(sample_case_path, path)
    with forensics.open_case(path) as case:
        with_headers = _answer(case)
        methods = dict(case.sql("SELECT match_method, count(*) FROM chain_matches GROUP BY 1").fetchall())
        assert methods.get("header_id", 0) > 0
        case.sql("UPDATE engine_requests SET header_request_id = NULL")
        case.refresh(force=True)
        without = _answer(case)
        methods = dict(case.sql("SELECT match_method, count(*) FROM chain_matches GROUP BY 1").fetchall())
        confidence = case.sql("SELECT min(match_confidence), max(match_confidence) FROM chain_matches "
                              "WHERE match_method = 'time'").fetchall()[0]
    assert without == with_headers and len(without) == 35
    assert "header_id" not in methods and methods["time"] > 8000
    # a time match is never as sure as an id: its confidence says so
    assert confidence[1] < 1.0
