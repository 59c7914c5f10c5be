"""Line builders for the real log shapes (SGLang engine, smg router, Cloudflare, LiteLLM).

Example:
    >>> engine_prefix(0, "TP0")
    '[1970-01-01 08:00:00 TP0] '
"""

from __future__ import annotations

import json
import time
from typing import Any

from forensics.sample._world import (
    BOOTSTRAP_PORT,
    ENGINE_UTC_OFFSET_S,
    MODEL_PATH,
    SERVED_MODEL,
    Start,
)

_sec_cache: dict[int, str] = {}


def local_str(t_ms: int) -> str:
    """Format UTC ms as the engine's local wall time, second resolution, no zone.

    Example:
        >>> local_str(0)
        '1970-01-01 08:00:00'
    """
    sec = t_ms // 1000
    s = _sec_cache.get(sec)
    if s is None:
        if len(_sec_cache) > 4096:
            _sec_cache.clear()
        s = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec + ENGINE_UTC_OFFSET_S))
        _sec_cache[sec] = s
    return s


def utc_str(t_ms: int) -> str:
    """Format UTC ms as ``YYYY-MM-DD HH:MM:SS`` (router shape).

    Example:
        >>> utc_str(1000)
        '1970-01-01 00:00:01'
    """
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t_ms // 1000))


def iso_z(t_ms: int) -> str:
    """Format UTC ms as ISO 8601 with milliseconds and ``Z``.

    Example:
        >>> iso_z(1234)
        '1970-01-01T00:00:01.234Z'
    """
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_ms // 1000)) + f".{t_ms % 1000:03d}Z"


def pg_ts(t_ms: int) -> str:
    """Format UTC ms the way Postgres prints ``timestamp(3)`` (trailing zeros trimmed).

    Example:
        >>> pg_ts(1500), pg_ts(2000)
        ('1970-01-01 00:00:01.5', '1970-01-01 00:00:02')
    """
    base = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t_ms // 1000))
    frac = t_ms % 1000
    if frac:
        return base + "." + f"{frac:03d}".rstrip("0")
    return base


def engine_prefix(t_ms: int, tag: str = "") -> str:
    """Return the SGLang line prefix ``[local ts[ tags]] ``.

    Example:
        >>> engine_prefix(0)
        '[1970-01-01 08:00:00] '
    """
    if tag:
        return f"[{local_str(t_ms)} {tag}] "
    return f"[{local_str(t_ms)}] "


# ---------------------------------------------------------------- startup


def server_args_line(st: Start, role: str, port: int) -> str:
    """Return the ``server_args=...`` startup line body for a start."""
    args: list[tuple[str, Any]] = [
        ("model_path", MODEL_PATH),
        ("tokenizer_path", MODEL_PATH),
        ("tokenizer_mode", "auto"),
        ("skip_tokenizer_init", False),
        ("load_format", "auto"),
        ("trust_remote_code", True),
        ("context_length", st.context_len),
        ("is_embedding", False),
        ("revision", None),
        ("host", "0.0.0.0"),
        ("port", port),
        ("dtype", "auto"),
        ("kv_cache_dtype", st.kv_dtype),
        ("quantization", "fp8"),
        ("served_model_name", SERVED_MODEL),
        ("mem_fraction_static", st.mem_fraction),
        ("max_running_requests", 64 if role == "prefill" else 256),
        ("max_total_tokens", None),
        ("chunked_prefill_size", 32768),
        ("max_prefill_tokens", 32768),
        ("schedule_policy", "fcfs"),
        ("schedule_conservativeness", 1.0),
        ("page_size", 64),
        ("tp_size", 8),
        ("pp_size", 1),
        ("stream_interval", 1),
        ("random_seed", 1024 + port),
        ("log_level", "info"),
        ("log_level_http", None),
        ("log_requests", True),
        ("log_requests_level", 2),
        ("show_time_cost", False),
        ("enable_metrics", True),
        ("decode_log_interval", 40),
        ("api_key", None),
        ("file_storage_path", "sglang_storage"),
        ("enable_cache_report", False),
        ("reasoning_parser", "glm45"),
        ("tool_call_parser", "glm45"),
        ("dp_size", 1),
        ("load_balance_method", "round_robin"),
        ("dist_init_addr", None),
        ("nnodes", 1),
        ("node_rank", 0),
        ("attention_backend", "fa3"),
        ("disable_radix_cache", False),
        ("disable_cuda_graph", role == "prefill"),
        ("enable_dp_attention", False),
        ("ep_size", 1),
        ("allow_auto_truncate", False),
        ("disaggregation_mode", role),
        ("disaggregation_transfer_backend", "mooncake"),
        ("disaggregation_bootstrap_port", BOOTSTRAP_PORT),
        ("disaggregation_decode_tp", None),
        ("disaggregation_prefill_pp", 1),
        ("disaggregation_ib_device", "mlx5_0"),
        ("num_reserved_decode_tokens", 512),
        ("warmups", None),
    ]
    if st.style == "B":
        body = ", ".join(f"{k!r}: {v!r}" for k, v in args)
        return "server_args={" + body + "}"
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args) + ")"


def kv_line(st: Start) -> str:
    """Return the per-rank ``KV Cache is allocated`` message for a start."""
    gb = st.pool * st.kv_bytes_per_token / (1 << 30)
    if st.style == "B":
        dt = "torch.float8_e4m3fn" if st.kv_dtype.startswith("fp8") else "torch.bfloat16"
        return f"KV Cache is allocated. dtype: {dt}, #tokens: {st.pool}, K size: {gb:.2f} GB, V size: {gb:.2f} GB"
    return f"KV Cache is allocated. #tokens: {st.pool}, K size: {gb:.2f} GB, V size: {gb:.2f} GB"


def max_tokens_line(st: Start, role: str, avail: float) -> str:
    """Return the ``max_total_num_tokens=...`` line body."""
    mrr = 64 if role == "prefill" else 256
    return (
        f"max_total_num_tokens={st.pool}, chunked_prefill_size=32768, max_prefill_tokens=32768, "
        f"max_running_requests={mrr}, context_len={st.context_len}, available_gpu_mem={avail:.2f} GB"
    )


# ---------------------------------------------------------------- requests


def _sp_repr(max_new: int, temperature: float) -> str:
    return (
        f"{{'max_new_tokens': {max_new}, 'temperature': {temperature}, 'top_p': 0.95, 'top_k': -1, "
        f"'min_p': 0.0, 'stop': [], 'stop_token_ids': [151329, 151336, 151338], 'skip_special_tokens': True, "
        f"'no_stop_trim': False}}"
    )


def gen_obj_repr(
    style: str,
    rid: str,
    text_repr: str,
    input_ids: str,
    sp: str,
    stream: bool,
    host: str,
    port: int | None,
    room: int,
) -> str:
    """Return a ``GenerateReqInput(...)`` repr in the field order of ``style``."""
    if style == "B":
        return (
            f"GenerateReqInput(rid={rid!r}, http_worker_ipc=None, text={text_repr}, input_ids={input_ids}, "
            f"input_embeds=None, image_data=None, video_data=None, audio_data=None, sampling_params={sp}, "
            f"return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, "
            f"return_text_in_logprobs=True, stream={stream}, log_metrics=True, return_hidden_states=False, "
            f"modalities=[], session_params=None, lora_path=None, lora_id=None, custom_logit_processor=None, "
            f"bootstrap_host={host!r}, bootstrap_port={port}, bootstrap_room={room}, bootstrap_pair_key=None, "
            f"routing_key=None, data_parallel_rank=None, background=False, conversation_id=None, priority=None, "
            f"extra_key=None, no_logs=False, custom_labels=None, return_bytes=False, return_entropy=False)"
        )
    return (
        f"GenerateReqInput(text={text_repr}, input_ids={input_ids}, input_embeds=None, image_data=None, "
        f"video_data=None, audio_data=None, sampling_params={sp}, rid={rid!r}, return_logprob=False, "
        f"logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, return_text_in_logprobs=True, "
        f"stream={stream}, log_metrics=True, return_hidden_states=False, modalities=[], session_params=None, "
        f"lora_path=None, lora_id=None, custom_logit_processor=None, bootstrap_host={host!r}, "
        f"bootstrap_port={port}, bootstrap_room={room}, bootstrap_pair_key=None, data_parallel_rank=None, "
        f"background=False, conversation_id=None, priority=None, extra_key=None, no_logs=False, "
        f"custom_labels=None, return_bytes=False, return_entropy=False)"
    )


def out_repr(rid: str, text: str, finish: str, prompt: int, completion: int, cached: int, e2e: float) -> str:
    """Return the ``out={...}`` part of a ``Finish:`` line."""
    return (
        f"{{'text': {text!r}, 'meta_info': {{'id': {rid!r}, 'finish_reason': {finish}, "
        f"'prompt_tokens': {prompt}, 'weight_version': 'default', 'completion_tokens': {completion}, "
        f"'cached_tokens': {cached}, 'e2e_latency': {e2e:.4f}}}}}"
    )


def access_line(t_ms: int, port: int, method: str, path: str, status: int) -> str:
    """Return a uvicorn access line (no request id) with the engine prefix."""
    phrase = {200: "OK", 400: "Bad Request", 500: "Internal Server Error", 503: "Service Unavailable"}[status]
    return f'{engine_prefix(t_ms)}INFO:     10.0.3.7:{port} - "{method} {path} HTTP/1.1" {status} {phrase}'


def prefill_batch(style: str, new_tok: int, cached: int, usage: float, queue: int, inflight: int, thr: float) -> str:
    """Return a prefill batch line body in the header style of ``style``."""
    if style == "B":
        return (
            f"Prefill batch, #new-seq: 1, #new-token: {new_tok}, #cached-token: {cached}, token usage: {usage:.2f}, "
            f"#running-req: 0, #queue-req: {queue}, #pending-token: 0, #prealloc-req: 0, #inflight-req: {inflight}, "
            f"cuda graph: False, input throughput (token/s): {thr:.2f}"
        )
    return (
        f"Prefill batch. #new-seq: 1, #new-token: {new_tok}, #cached-token: {cached}, token usage: {usage:.2f}, "
        f"#unbootstrapped-req: 0, #queue-req: {queue}, #transferring-req: {inflight}, "
        f"input throughput (token/s): {thr:.2f}, "
    )


def decode_batch(running: int, tokens: int, usage: float, prealloc: float, thr: float) -> str:
    """Return a decode batch line body (incident-era shape, trailing separator)."""
    return (
        f"Decode batch. #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
        f"pre-allocated usage: {prealloc:.2f}, #retracted-req: 0, cuda graph: True, "
        f"gen throughput (token/s): {thr:.2f}, #queue-req: 0, "
    )


# ---------------------------------------------------------------- router

_MW = "/home/runner/work/sglang/sglang/src/middleware.rs"
_PD = "/home/runner/work/sglang/sglang/src/routers/http/pd_router.rs:590"


def router_span(rid: str, status: int | None = None, latency_us: int | None = None) -> str:
    """Return the ``http_request{...}`` span of an smg router line."""
    extra = "" if status is None else f" status_code={status} latency={latency_us}"
    return (
        f'http_request{{method=POST uri=/v1/chat/completions version=HTTP/1.1 module="smg" '
        f'request_id="{rid}"{extra}}}'
    )


def router_started(t_ms: int, rid: str) -> str:
    """Return the smg ``started processing request`` line."""
    return f"{utc_str(t_ms)}  INFO {router_span(rid)}: smg::request: {_MW}:310: started processing request"


def router_finished(t_ms: int, rid: str, status: int, latency_us: int) -> str:
    """Return the smg response line (INFO 2xx, WARN 4xx, ERROR 5xx)."""
    span = router_span(rid, status, latency_us)
    if status >= 500:
        return f"{utc_str(t_ms)} ERROR {span}: smg::response: {_MW}:349: request failed with server error"
    if status >= 400:
        return f"{utc_str(t_ms)}  WARN {span}: smg::response: {_MW}:354: request failed with client error"
    return f"{utc_str(t_ms)}  INFO {span}: smg::response: {_MW}:359: finished processing request"


def router_decode_error(t_ms: int, rid: str, decode_url: str, status: int) -> str:
    """Return the smg PD router ``Decode server returned error status`` line."""
    phrase = {400: "Bad Request", 500: "Internal Server Error"}[status]
    return (
        f"{utc_str(t_ms)} ERROR {router_span(rid)}: smg::routers::http::pd_router: {_PD}: "
        f"Decode server returned error status decode_url={decode_url} status={status} {phrase}"
    )


def router_startup(t_ms: int, prefill_urls: list[str], decode_urls: list[str]) -> list[str]:
    """Return the smg startup lines."""
    p = ", ".join(f'("{u}", Some({BOOTSTRAP_PORT}))' for u in prefill_urls)
    d = ", ".join(f'"{u}"' for u in decode_urls)
    ts = utc_str(t_ms)
    src = "/home/runner/work/sglang/sglang/src"
    return [
        f"{ts}  INFO smg::server: {src}/server.rs:794: Starting router on 0.0.0.0:8000 | mode: PrefillDecode "
        f"{{ prefill_urls: [{p}], decode_urls: [{d}], prefill_policy: None, decode_policy: None }} | "
        f"policy: CacheAware {{ cache_threshold: 0.3, balance_abs_threshold: 64, balance_rel_threshold: 1.5, "
        f"eviction_interval_secs: 60, max_tree_size: 67108864 }} | max_payload: 256MB",
        f"{ts}  INFO smg::server: {src}/server.rs:907: Rate limiting is disabled (max_concurrent_requests = -1)",
        f"{ts}  INFO smg::server: {src}/server.rs:985: Router ready | workers: []",
        f"{ts}  INFO smg::server: {src}/server.rs:1018: Starting server on 0.0.0.0:8000",
    ]


# ---------------------------------------------------------------- LiteLLM

LITELLM_COLUMNS = [
    "request_id", "call_type", "api_key", "spend", "total_tokens", "prompt_tokens", "completion_tokens",
    "startTime", "endTime", "completionStartTime", "model", "model_id", "model_group", "custom_llm_provider",
    "api_base", "user", "metadata", "cache_hit", "cache_key", "request_tags", "team_id", "end_user",
    "requester_ip_address", "messages", "response", "session_id", "status", "organization_id",
    "mcp_namespaced_tool_name", "proxy_server_request", "request_duration_ms", "agent_id",
]  # fmt: skip


def jsonb(obj: Any) -> str:
    """Serialise like Postgres ``jsonb`` output (keys by length then bytes, ``", "``/``": "``).

    Example:
        >>> jsonb({"bb": 1, "a": [1, 2]})
        '{"a": [1, 2], "bb": 1}'
    """
    if isinstance(obj, dict):
        items = sorted(obj.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
        return "{" + ", ".join(f"{json.dumps(k)}: {jsonb(v)}" for k, v in items) + "}"
    if isinstance(obj, list):
        return "[" + ", ".join(jsonb(v) for v in obj) + "]"
    return json.dumps(obj)


def pg_csv_field(v: Any) -> str:
    """Quote one value the way Postgres ``COPY ... CSV`` does (NULL = empty, '' = "")."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, (int, float)):
        return repr(v)
    s = str(v)
    if s == "" or any(c in s for c in ',"\n\r'):
        return '"' + s.replace('"', '""') + '"'
    return s


def pg_csv_row(values: list[Any]) -> str:
    """Return one CSV line (no terminator)."""
    return ",".join(pg_csv_field(v) for v in values)
