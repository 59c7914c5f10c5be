"""Joins without request headers: the affected set is the same when no engine line carries the gateway's id.

Many deployments never set SGLANG_LOG_REQUEST_HEADERS: then no engine request line carries the
x-request-id, and gateway records meet their engine chains through the router's line of the same
id (its span), or by time (and tokens) alone (match_candidates). On the sample, stripped of every
engine header id (and then of the router's lines too), the answer must not move: the same
requests, the same confidence, the same tenants, except where the logs cannot decide; there the
request is flagged ambiguous_match and listed by ambiguous_matches, never guessed silently.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

import forensics


def _affected(case: forensics.Case) -> pd.DataFrame:
    df = forensics.affected_requests(case).df()
    return df.set_index("request_id")[["confidence", "tenant_id", "ambiguous_match"]]


VARIANTS = [
    # (what is stripped, SQL run on a copy of the sample, the tier most records then match by, its least count)
    ("engine request headers: the router's lines pair them",
     ["UPDATE engine_requests SET header_request_id = NULL"], "router", 8000),
    ("engine request headers and the router log: time alone",
     ["UPDATE engine_requests SET header_request_id = NULL", "DELETE FROM router_requests"], "time", 8000),
]


@pytest.fixture(scope="module")
def with_headers(sample_case_path: Path) -> pd.DataFrame:
    with forensics.open_case(sample_case_path, read_only=True) as case:
        methods = dict(case.sql("SELECT match_method, count(*) FROM chain_matches GROUP BY 1").fetchall())
        assert methods.get("header_id", 0) > 8000
        return _affected(case)


@pytest.mark.parametrize(("what", "strip", "tier", "least"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_affected_set_is_the_same_without_request_headers(
    sample_case_path: Path, tmp_path: Path, with_headers: pd.DataFrame, what: str, strip: list[str], tier: str,
    least: int,
) -> None:
    path = tmp_path / "no_headers.duckdb"
    shutil.copy(sample_case_path, path)
    with forensics.open_case(path) as case:
        for sql in strip:
            case.sql(sql)
        case.refresh(force=True)
        without = _affected(case)
        methods = dict(case.sql("SELECT match_method, count(*) FROM chain_matches GROUP BY 1").fetchall())
        confidence = case.sql("SELECT max(match_confidence) FROM chain_matches WHERE match_method = $m",
                              params={"m": tier}).fetchall()[0][0]
        listed = set(forensics.ambiguous_matches(case).df().request_id.dropna())
    assert len(with_headers) == 35 and not with_headers.ambiguous_match.any()
    # the same requests with the same confidence
    assert without.confidence.sort_index().to_dict() == with_headers.confidence.sort_index().to_dict(), what
    # the same tenants, except where the match was ambiguous: then it is flagged and listed
    sure = without[~without.ambiguous_match.astype(bool)]
    assert sure.tenant_id.to_dict() == with_headers.tenant_id[sure.index].to_dict()
    assert set(without.index[without.ambiguous_match.astype(bool)]) <= listed
    assert "header_id" not in methods and methods[tier] > least
    # a match without an id is never as sure as one by id: its confidence says so
    assert confidence < 1.0
