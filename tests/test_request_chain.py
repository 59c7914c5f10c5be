"""request_chain: how gateway records, prefill and decode legs are tied together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from conftest import Synth, fleet, t

import forensics


def _chain(s: Synth, **kw: Any) -> Any:
    return forensics.request_chain(s.case, **kw).df()


def test_match_methods(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("a", t(1), tokens=100)                       # x-request-id logged by the engine
    synth.pd_request("b", t(2), tokens=200, header=False, layer="proxy", gateway_tokens=200)
    synth.pd_request("c", t(3), tokens=300, status=None)          # no gateway record
    synth.gw("lonely", t(4))                                      # no engine record
    synth.gw("d-lit", t(5), layer="proxy")                        # LiteLLM: request_id = decode rid
    synth.req("decode-0", "received", "d-lit", t(5, 1), bootstrap_room=77, bootstrap_host="h")
    df = _chain(synth).set_index("ts")
    assert df.loc[t(1)].match_method == "header_id" and df.loc[t(1)].match_confidence == 1.0
    assert df.loc[t(2)].match_method == "time_tokens"
    assert df.loc[t(3, 1)].match_method == "engine_only"
    assert df.loc[t(4)].match_method == "none"
    assert df.loc[t(5)].match_method == "rid"
    a = df.loc[t(1)]
    assert (a.prefill_rid, a.decode_rid, a.prefill_node, a.decode_node) == ("p-a", "d-a", "prefill-0", "decode-0")


def test_pairing_by_room_and_health_checks(synth: Synth) -> None:
    fleet(synth)
    room = synth.pd_request("a", t(1), tokens=100)
    hc = {"bootstrap_host": "2.2.2.2", "bootstrap_room": 0}
    synth.req("prefill-0", "received", "HEALTH_CHECK_9", t(1), **hc)
    synth.req("decode-0", "received", "HEALTH_CHECK_9", t(1), **hc)
    df = _chain(synth)
    assert len(df) == 1
    assert df.bootstrap_room[0] == room


def test_filters(synth: Synth) -> None:
    fleet(synth)
    synth.pd_request("a", t(1), tokens=100)
    synth.pd_request("b", t(2), tokens=100, decode="decode-1")
    assert list(_chain(synth, request_id="d-b").request_id) == ["ray-b"]
    assert list(_chain(synth, request_id="a").request_id) == ["ray-a"]
    assert list(_chain(synth, node="decode-1").request_id) == ["ray-b"]
    assert list(_chain(synth, start=t(1, 30)).request_id) == ["ray-b"]


def test_sample_leak_chains(sample_case: forensics.Case, sample_truth: dict[str, Any]) -> None:
    df = forensics.request_chain(sample_case).df()
    assert df.match_method.isin(["header_id", "rid", "time", "time_tokens", "none", "engine_only"]).all()
    by_id = df.set_index("request_id")
    for leak in sample_truth["leaks"]:
        row = by_id.loc[leak["request_id"]]
        assert row.bootstrap_room == leak["bootstrap_room"]
        assert (row.prefill_rid, row.decode_rid) == (leak["prefill_rid"], leak["decode_rid"])
        assert row.prefill_tokens == 1 and row.decode_tokens == leak["prompt_tokens"]
    assert df.request_id.dropna().is_unique


def test_cli_chain_output_is_sorted(
    sample_case: forensics.Case, sample_case_path: Path, tmp_path: Path
) -> None:
    # the query returns rows in no particular order (a full export); the command sorts them
    from click.testing import CliRunner

    from forensics.cli import cli

    case = tmp_path / "case.duckdb"
    case.write_bytes(sample_case_path.read_bytes())
    out = tmp_path / "chain.csv"
    res = CliRunner().invoke(cli, ["chain", str(case), "--format", "csv", "-o", str(out)])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(out)
    assert len(df) == len(forensics.request_chain(sample_case).df())
    assert pd.to_datetime(df.ts).is_monotonic_increasing
