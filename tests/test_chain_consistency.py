"""affected_requests and request_chain tell the same story: one definition of the request chain.

Both read the derived tables (request_legs, request_chains, gateway_top, chain_matches,
chain_evidence), so every affected request's row in request_chain must name the same legs
(rids), nodes, bootstrap room and evidence lines. Checked on the bundled sample and on a freshly
generated incident (another seed, another size), so no sample-specific coincidence passes it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import forensics
from forensics.sample import generate


@pytest.fixture(scope="module")
def generated_case_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("generated")
    truth = generate(root / "data", requests=4000, seed=424242)
    assert truth["leaks"], "the generated incident has no leaks: pick another seed"
    path = root / "case.duckdb"
    with forensics.open_case(path, now=dt.datetime(2026, 10, 1)) as case:
        case.ingest_gateway(root / "data" / "gateway")
        case.ingest_engine(root / "data" / "engine", tz=truth["engine_tz"])
    return path


@pytest.fixture(params=["sample", "generated"])
def case(request: pytest.FixtureRequest) -> Iterator[forensics.Case]:
    if request.param == "sample":
        yield request.getfixturevalue("sample_case")
        return
    c = forensics.open_case(request.getfixturevalue("generated_case_path"), read_only=True)
    yield c
    c.close()


def _chain_row(chain: pd.DataFrame, row: Any) -> pd.Series:
    if row.request_id is not None and row.request_id == row.request_id:
        hits = chain[chain.request_id == row.request_id]
    else:  # engine-only: the decode leg identifies the request
        hits = chain[(chain.decode_node == row.decode_node) & (chain.decode_rid == row.decode_rid)]
    assert len(hits) == 1, (row.request_id, row.decode_rid, len(hits))
    return hits.iloc[0]


def test_every_affected_request_is_its_chain_row(case: forensics.Case) -> None:
    affected = forensics.affected_requests(case).df()
    assert len(affected) > 0
    chain = forensics.request_chain(case).df()
    rooms = dict(
        ((n, r), room)
        for n, r, room in case.sql("SELECT node, rid, bootstrap_room FROM request_legs").fetchall()
    )
    n_engine = 0
    for row in affected.itertuples(index=False):
        c = _chain_row(chain, row)
        assert c.evidence == row.evidence
        assert c.tenant_id == row.tenant_id or (pd.isna(row.tenant_id) and pd.isna(c.tenant_id))
        if row.confidence == "suspected" and pd.isna(row.decode_rid):
            # a gateway record without engine evidence: its chain row has no legs either
            assert c.match_method == "none" and pd.isna(c.decode_rid) and pd.isna(c.prefill_rid)
            continue
        n_engine += 1
        assert (c.prefill_node, c.decode_node, c.decode_rid) == (row.prefill_node, row.decode_node,
                                                                 row.decode_rid)
        assert c.bootstrap_room == rooms[(row.decode_node, row.decode_rid)]
        assert c.bootstrap_room == rooms[(row.prefill_node, c.prefill_rid)]
        assert c.decode_start_ts == row.decode_start_ts
        if row.confidence == "confirmed":
            # the chain saw what made it affected: the placeholder path on the prefill leg
            assert c.prefill_tokens == 1 or not pd.isna(c.rejected_input_tokens)
            assert c.rejected_limit_tokens == row.admission_limit or pd.isna(c.rejected_limit_tokens)
    assert n_engine > 0


def test_every_leak_of_the_truth_is_found_through_the_chain(sample_case: forensics.Case,
                                                            sample_truth: dict[str, Any]) -> None:
    chain = forensics.request_chain(sample_case).df().set_index("request_id")
    affected = forensics.affected_requests(sample_case).df().set_index("request_id")
    for leak in sample_truth["leaks"]:
        c, a = chain.loc[leak["request_id"]], affected.loc[leak["request_id"]]
        assert f"rejection={leak['rejection_file']}:{leak['rejection_line']}" in c.evidence
        assert c.evidence == a.evidence
        assert (c.prefill_rid, c.decode_rid, c.bootstrap_room) == (
            leak["prefill_rid"], leak["decode_rid"], leak["bootstrap_room"])
