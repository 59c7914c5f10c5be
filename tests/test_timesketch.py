"""forensics export timesketch: every line is an event Timesketch imports as it is.

The rules checked are Timesketch's own: its server's JSONL reader (timesketch/lib/utils.py,
read_and_validate_jsonl) needs message, datetime and timestamp_desc on every line and takes
timestamp as microseconds since the epoch; the import client (timesketch_import_client/importer.py)
drops fields starting with "_" and writes datetime with an explicit UTC offset; tag is a list.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import forensics
from forensics.case import Case

MANDATORY = ("message", "datetime", "timestamp_desc")


@pytest.fixture(scope="module")
def events(sample_case_path: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    out = tmp_path_factory.mktemp("ts") / "timeline.jsonl"
    res = subprocess.run([sys.executable, "-m", "forensics", "export", "timesketch", str(sample_case_path),
                          "-o", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    raw = out.read_bytes()
    assert raw.endswith(b"\n") and b"\r" not in raw
    return [json.loads(line) for line in raw.decode("utf-8").splitlines()]


def test_every_line_is_a_valid_timesketch_event(events: list[dict[str, object]]) -> None:
    assert events
    for e in events:
        assert all(isinstance(e.get(k), str) and e[k] for k in MANDATORY), e
        when = dt.datetime.fromisoformat(str(e["datetime"]))
        assert when.utcoffset() == dt.timedelta(0)
        assert isinstance(e["timestamp"], int)
        assert e["timestamp"] == (when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
        assert not any(k.startswith("_") or "." in k for k in e), e.keys()
        assert all(not isinstance(v, dict) for v in e.values())  # flat: no nested OpenSearch objects
        assert all(v is not None for v in e.values())
        if "tag" in e:
            assert isinstance(e["tag"], list) and all(isinstance(x, str) for x in e["tag"])
        assert re.fullmatch(r"forensics:[a-z_]+", str(e["data_type"]))
        assert re.fullmatch(r".+:\d+", str(e["evidence"])) and e["evidence"] == f"{e['evidence_file']}:{e['evidence_line']}"


def test_one_event_per_record_of_each_affected_request(events: list[dict[str, object]], sample_case: Case) -> None:
    affected = forensics.affected_requests(sample_case).df()
    by_request = Counter(e.get("request_id") for e in events if "request_id" in e)
    assert set(by_request) == set(affected["request_id"])
    for r in affected.itertuples():
        kinds = {e["data_type"] for e in events if e.get("request_id") == r.request_id}
        assert "forensics:gateway_request" in kinds
        if r.confidence == "confirmed":
            assert {"forensics:prefill_received", "forensics:decode_received", "forensics:decode_finished"} <= kinds
            assert "forensics:scheduler_rejection" in kinds or "placeholder_prompt_tokens" in r.reasons
    # and every node start
    starts = [e for e in events if e["data_type"] == "forensics:node_start"]
    assert len(starts) == len(forensics.pool_audit(sample_case).df())
    # no record twice
    keys = [(e["data_type"], e["evidence"], e.get("request_id")) for e in events]
    assert len(keys) == len(set(keys))


def test_events_are_in_time_order_and_name_their_evidence(events: list[dict[str, object]]) -> None:
    stamps = [int(str(e["timestamp"])) for e in events]
    assert stamps == sorted(stamps)
    rejection = next(e for e in events if e["data_type"] == "forensics:scheduler_rejection")
    assert rejection["node"] in ("prefill-0", "prefill-1")
    assert "tokens, limit" in str(rejection["message"]) and rejection["tag"][0] == "affected"
