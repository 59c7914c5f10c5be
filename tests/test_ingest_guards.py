"""Loader facts the answer rests on, checked through the public ingest calls (any loader must keep them).

Each test names what it guards: the start's evidence line, rank tags in every order, the hour of a
request-metrics file in the engine's time zone, health checks by each of their marks, and
duplicates found within one layer only.
"""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

import pytest

import forensics

START = """\
[2026-09-01 08:00:00] server_args=ServerArgs(model_path='/models/glm', context_length=1048576, tp_size=2, dp_size=2, kv_cache_dtype='auto', disaggregation_mode='prefill')
[2026-09-01 08:00:10 DP0 TP0] KV Cache is allocated. #tokens: 681280, K size: 10.00 GB, V size: 10.00 GB
[2026-09-01 08:00:10 DP1 TP0] KV Cache is allocated. #tokens: 681280, K size: 10.00 GB, V size: 10.00 GB
[2026-09-01 08:00:11 DP0 TP0] max_total_num_tokens=681280, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=64, context_len=1048576, available_gpu_mem=12.10 GB
[2026-09-01 08:00:11 DP1 TP0] max_total_num_tokens=681280, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=64, context_len=1048576, available_gpu_mem=12.10 GB
[2026-09-01 08:00:30] The server is fired up and ready to roll!
"""

BATCH = ("Prefill batch. #new-seq: 1, #new-token: 63, #cached-token: 1, token usage: 0.00, #running-req: 0, "
         "#queue-req: 0, ")


def test_start_evidence_is_its_first_pool_line(tmp_path: Path) -> None:
    """The pool audit points a responder at the first max_total_num_tokens line of the start."""
    log = tmp_path / "prefill-0.log"
    log.write_text(START, encoding="utf-8")
    case = forensics.open_case(":memory:")
    case.ingest_engine([f"prefill-0={log}"], tz="UTC")
    audit = forensics.pool_audit(case).df()
    assert list(audit.evidence) == ["prefill-0.log:4"]
    assert list(audit.verdict) == ["exposed"] and list(audit.admission_limit) == [681274]


TAGS = ["DP1", "ATTN_CP2", "TP3", "EP4"]
CANONICAL = "DP1 ATTN_CP2 TP3 EP4"  # DP PP ATTN_CP MOE_DP TP EP


def test_rank_tags_in_every_order_are_one_canonical_set(tmp_path: Path) -> None:
    orders = list(itertools.permutations(TAGS))
    lines = [f"[2026-09-01 08:01:{i:02d} {' '.join(o)}] {BATCH}" for i, o in enumerate(orders)]
    lines.append(f"[2026-09-01 08:02:00 PP1 MOE_DP2 DP0] {BATCH}")
    log = tmp_path / "prefill-0.log"
    log.write_text(START + "\n".join(lines) + "\n", encoding="utf-8")
    case = forensics.open_case(":memory:")
    case.ingest_engine([f"prefill-0={log}"], tz="UTC")
    ranks = [r[0] for r in case.con.sql("SELECT ranks FROM engine_batches ORDER BY line_no").fetchall()]
    assert ranks == [CANONICAL] * len(orders) + ["DP0 PP1 MOE_DP2"]


METRICS = (
    '{"request_parameters": "{\\"rid\\": \\"m1\\", \\"bootstrap_host\\": \\"10.0.2.11\\", \\"bootstrap_port\\": 8998, '
    '\\"bootstrap_room\\": 777, \\"stream\\": false}", "id": "m1", "finish_reason": {"type": "length", "length": 0}, '
    '"prompt_tokens": 1, "completion_tokens": 512, "cached_tokens": 0, "e2e_latency": 3.5}\n'
)


@pytest.mark.parametrize(
    ("tz", "utc"),
    [("UTC", dt.datetime(2026, 9, 2, 4)), ("Asia/Singapore", dt.datetime(2026, 9, 1, 20)),
     ("America/New_York", dt.datetime(2026, 9, 2, 8))],
)
def test_metrics_file_hour_is_local_time(tmp_path: Path, tz: str, utc: dt.datetime) -> None:
    """A metrics record without a timestamp is placed at its file's hour, read in the engine's zone."""
    path = tmp_path / "sglang-request-metrics-20260902_04.log"
    path.write_text(METRICS, encoding="utf-8")
    case = forensics.open_case(":memory:")
    case.ingest_engine([f"decode-0={path}"], tz=tz)
    rows = case.con.sql("SELECT ts, ts_inferred FROM engine_requests WHERE kind = 'metrics'").fetchall()
    assert rows == [(utc, True)]


# SGLang's own health check (a 1-token generation it sends itself) as 0.5.x logs its Receive line;
# each row below carries one of its three marks alone, and the last none of them
RECEIVE = (
    '[2026-09-01 08:01:0@I@] Receive: obj=GenerateReqInput(text=None, input_ids=[0], '
    'input_embeds=None, image_data=None, video_data=None, audio_data=None, '
    "sampling_params={'max_new_tokens': 1, 'temperature': 0.0}, rid='@RID@', "
    'return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, '
    'return_text_in_logprobs=True, stream=False, log_metrics=True, return_hidden_states=False, '
    'modalities=[], session_params=None, lora_path=None, lora_id=None, '
    "custom_logit_processor=None, bootstrap_host='@HOST@', bootstrap_port=None, "
    'bootstrap_room=@ROOM@, bootstrap_pair_key=None, data_parallel_rank=None, '
    'background=False, conversation_id=None, priority=None, extra_key=None, no_logs=False, '
    'custom_labels=None, return_bytes=False, return_entropy=False)'
)

HEALTH_MARKS = [
    ("HEALTH_CHECK_1788965640.000000", "10.0.2.11", "5", True),   # the rid alone
    ("r-room0", "10.0.2.11", "0", True),                          # bootstrap room 0 alone
    ("r-fake-host", "2.2.2.2", "6", True),                        # the placeholder host alone
    ("r-ordinary", "10.0.2.11", "7", False),
]


def test_each_health_check_mark_alone_flags_the_record(tmp_path: Path) -> None:
    """The loader is the one place a health check is recognised (the judgement reads its flag):
    the HEALTH_CHECK rid, bootstrap room 0 or host 2.2.2.2, each alone, flags the record."""
    lines = [RECEIVE.replace("@I@", str(i)).replace("@RID@", rid).replace("@HOST@", host).replace("@ROOM@", room)
             for i, (rid, host, room, _) in enumerate(HEALTH_MARKS)]
    log = tmp_path / "prefill-0.log"
    log.write_text(START + "\n".join(lines) + "\n", encoding="utf-8")
    case = forensics.open_case(":memory:")
    case.ingest_engine([f"prefill-0={log}"], tz="UTC")
    got = dict(case.con.sql("SELECT rid, is_health_check FROM engine_requests WHERE kind = 'received'").fetchall())
    assert got == {rid: flag for rid, _, _, flag in HEALTH_MARKS}


def test_duplicates_are_found_within_one_layer_only(tmp_path: Path) -> None:
    """The same request logged identically by two layers is two records, not a delivery retry."""
    src = Path(__file__).parent / "fixtures" / "gateway" / "nginx.ndjson"
    first = src.read_text(encoding="utf-8").splitlines()[0]
    (tmp_path / "edge.ndjson").write_text(first + "\n", encoding="utf-8")
    (tmp_path / "proxy.ndjson").write_text(first.replace("203.0.113.9", "10.1.0.7") + "\n", encoding="utf-8")
    (tmp_path / "retry.ndjson").write_text(first + "\n" + first.replace("203.0.113.9", "10.1.0.8") + "\n",
                                            encoding="utf-8")
    case = forensics.open_case(":memory:")
    case.ingest_gateway(tmp_path / "edge.ndjson", layer="edge")
    case.ingest_gateway(tmp_path / "proxy.ndjson", layer="proxy")
    rows = case.con.sql("SELECT layer, is_duplicate FROM gateway_requests ORDER BY layer").fetchall()
    assert rows == [("edge", False), ("proxy", False)]
    case.ingest_gateway(tmp_path / "retry.ndjson", layer="proxy")  # a re-delivered copy within the proxy layer
    dups = case.con.sql("SELECT layer, count(*) FROM gateway_requests WHERE is_duplicate GROUP BY layer").fetchall()
    assert dups == [("proxy", 2)]
