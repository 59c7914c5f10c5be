"""The gateway presets: the formats of the common front doors, compiled into :class:`Spec` objects.

Example:
    >>> PRESETS["cloudflare-http"].layer
    'edge'
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from forensics.errors import ParameterError
from forensics.sources.gateway.mapping import load_mapping
from forensics.sources.gateway.readers import lit
from forensics.sources.gateway.spec import Col, Spec, json_path, meta_tenant

NO_QUERY = "CASE WHEN contains({v}, '?') THEN left({v}, strpos({v}, '?') - 1) ELSE {v} END"
REST_AFTER = "nullif(split_part(split_part({{v}}, '{marker}', 2), '?', 1), '')"
SEGMENT_AFTER = "nullif(split_part(split_part(split_part({{v}}, '{marker}', 2), '/', 1), '?', 1), '')"

PRESETS: dict[str, Spec] = {}


def _after(template: str, marker: str) -> str:
    return template.format(marker=marker)


def _add(spec: Spec) -> None:
    PRESETS[spec.name] = spec


_add(Spec(
    name="cloudflare-http",
    layer="edge",
    description="Cloudflare Logpush http_requests (NDJSON or CSV)",
    columns={
        "request_id": Col(fields=("RayID",)),
        "header_request_id": Col(
            fields=('$.RequestHeaders."x-request-id"',),
            # CSV exports carry the headers object as a JSON-encoded string
            extra_fields=("RequestHeaders",),
            sql="coalesce({v}, gw_json_get({f:RequestHeaders}, '$.\"x-request-id\"'))",
        ),
        # string functions, not regexes: on millions of rows a capturing regex costs seconds
        "tenant_id": Col(fields=("ClientRequestPath", "ClientRequestURI"), sql=_after(SEGMENT_AFTER, "/accounts/")),
        "model": Col(fields=("ClientRequestPath", "ClientRequestURI"), sql=_after(REST_AFTER, "/ai/run/")),
        "ts_start": Col(fields=("EdgeStartTimestamp",)),
        "ts_end": Col(fields=("EdgeEndTimestamp",)),
        "method": Col(fields=("ClientRequestMethod",)),
        "path": Col(fields=("ClientRequestPath", "ClientRequestURI"), sql=NO_QUERY),
        "status": Col(fields=("EdgeResponseStatus",)),
        "request_bytes": Col(fields=("ClientRequestBytes",)),
        "response_bytes": Col(fields=("EdgeResponseBytes",)),
        "streamed": Col(fields=("EdgeResponseContentType",)),
        "upstream": Col(fields=("OriginIP",)),
    },
    required=("RayID", "EdgeStartTimestamp"),
    signature=(("RayID",), ("EdgeStartTimestamp", "EdgeEndTimestamp", "EdgeResponseStatus")),
    notes=(
        "request_id = RayID (not guaranteed unique); header_request_id = RequestHeaders.x-request-id; "
        "tenant = the <id> of /accounts/<id>/ in ClientRequestPath (option tenant_header=NAME reads "
        "RequestHeaders.NAME instead); model = the part after /ai/run/; ts_start/ts_end = "
        "EdgeStartTimestamp/EdgeEndTimestamp (unix s/ms/ns by magnitude, numeric strings, or RFC 3339); "
        "streamed = EdgeResponseContentType is text/event-stream; upstream = OriginIP. No tokens."
    ),
))

_add(Spec(
    name="cloudflare-ai-gateway",
    layer="ai-gateway",
    description="Cloudflare AI Gateway: REST log records (also the {result: [...]} envelope) and Logpush ai_gateway_events",
    columns={
        "request_id": Col(fields=("id",)),
        "tenant_id": meta_tenant(("metadata", "Metadata")),
        "model": Col(fields=("model", "Model")),
        "ts_start": Col(fields=("created_at", "Timestamp")),
        "duration": Col(fields=("duration", "$.Metrics.durationMs"), unit="ms"),
        "path": Col(fields=("path", "Endpoint")),
        "status": Col(fields=("status_code", "StatusCode")),
        "prompt_tokens": Col(fields=("tokens_in",)),
        "completion_tokens": Col(fields=("tokens_out",)),
        "streamed": Col(fields=("response_content_type",)),
        "upstream": Col(fields=("provider", "Provider")),
    },
    required=("created_at|Timestamp",),
    signature=(("created_at", "Timestamp"), ("provider", "Provider"), ("tokens_in", "Gateway", "model_type")),
    notes=(
        "REST: request_id = id; ts_start = created_at; ts_end = created_at + duration (ms); "
        "tokens_in/tokens_out -> prompt/completion tokens (tokens_source 'gateway'); tenant = the "
        "first of tenant/tenant_id/customer/account_id/team_id/user keys inside metadata (a JSON-encoded "
        "string), or option tenant_key=NAME; path = path; status = status_code; streamed = "
        "response_content_type is text/event-stream; upstream = provider. Logpush ai_gateway_events: "
        "ts_start = Timestamp; ts_end = + Metrics.durationMs; model = Model; path = Endpoint; status = "
        "StatusCode; no id and no tokens in the dataset; Metadata/RequestBody/ResponseBody are usually "
        "encrypted objects and are left alone (tenant NULL then)."
    ),
))

_add(Spec(
    name="nginx-json",
    layer="edge",
    description="nginx access log with a JSON log_format (escape=json)",
    columns={
        "request_id": Col(fields=("request_id",)),
        "tenant_id": Col(fields=("http_x_tenant_id", "http_x_account_id", "http_x_customer_id",
                                 "http_x_org_id", "http_x_api_key_id")),
        "model": Col(fields=("http_x_model",)),
        # msec is the write time (end) in epoch seconds.milliseconds; time_iso8601 the same instant
        # with an offset, at second precision; the start is end - request_time.
        "ts_end": Col(fields=("msec", "time_iso8601", "time_local"), unit=None),
        "duration": Col(fields=("request_time",), unit="s"),
        "method": Col(fields=("request_method",)),
        "path": Col(fields=("request_uri", "uri"), sql=NO_QUERY),
        "status": Col(fields=("status",)),
        "request_bytes": Col(fields=("request_length",)),
        "response_bytes": Col(fields=("bytes_sent", "body_bytes_sent")),
        "streamed": Col(fields=("sent_http_content_type", "upstream_http_content_type")),
        # a retried request lists every upstream tried: the last one served the response
        "upstream": Col(fields=("upstream_addr",), sql="nullif(trim(string_split({v}, ',')[-1]), '')"),
    },
    required=("msec|time_iso8601|time_local",),
    signature=(("request_uri", "uri"), ("remote_addr",), ("msec", "time_iso8601", "time_local"), ("status",)),
    notes=(
        "request_id = request_id; ts_end = msec (epoch s.ms) else time_iso8601 (with offset) else "
        "time_local; ts_start = ts_end - request_time (s); status = status (string or number); "
        "request_bytes = request_length; response_bytes = bytes_sent; upstream = the LAST entry of the "
        "comma-separated upstream_addr list (the one that answered); tenant = the first of "
        "http_x_tenant_id/http_x_account_id/http_x_customer_id/http_x_org_id/http_x_api_key_id "
        "(option tenant_field=NAME); '-' is empty. No tokens."
    ),
))

_add(Spec(
    name="envoy",
    layer="edge",
    description="Envoy / Envoy AI Gateway JSON access log",
    columns={
        "request_id": Col(fields=("x-request-id", "request_id", "x_request_id")),
        "tenant_id": Col(fields=("x-tenant-id", "tenant_id", "x-account-id", "x-user-id")),
        "model": Col(fields=("gen_ai.request.model", "genai_model_name", "gen_ai.response.model")),
        "ts_start": Col(fields=("start_time",)),
        "duration": Col(fields=("duration",), unit="ms"),
        "method": Col(fields=("method", ":method")),
        "path": Col(fields=("x-envoy-origin-path", "path", ":path"), sql=NO_QUERY),
        "status": Col(fields=("response_code",)),
        "prompt_tokens": Col(fields=("gen_ai.usage.input_tokens", "genai_tokens_input")),
        "completion_tokens": Col(fields=("gen_ai.usage.output_tokens", "genai_tokens_output")),
        "request_bytes": Col(fields=("bytes_received",)),
        "response_bytes": Col(fields=("bytes_sent",)),
        "upstream": Col(fields=("upstream_host",)),
    },
    required=("start_time",),
    signature=(("start_time",), ("response_code",), ("x-envoy-origin-path", "upstream_host", "bytes_received",
                                                      "response_flags", "upstream_cluster")),
    notes=(
        "request_id = x-request-id; ts_start = start_time (RFC 3339); ts_end = start_time + duration (ms); "
        "status = response_code; model = gen_ai.request.model (new) or genai_model_name (old); tokens = "
        "gen_ai.usage.input_tokens/output_tokens (new) or genai_tokens_input/output (old), numbers, "
        "numeric strings or null; request/response bytes = bytes_received/bytes_sent; upstream = "
        "upstream_host; tenant = x-tenant-id/tenant_id/x-account-id/x-user-id (option tenant_field)."
    ),
))

_add(Spec(
    name="litellm",
    layer="proxy",
    description="LiteLLM proxy LiteLLM_SpendLogs export (CSV or JSON)",
    columns={
        "request_id": Col(fields=("request_id",)),
        "tenant_id": Col(fields=("team_id",)),
        "model": Col(fields=("model_group", "model")),
        "ts_start": Col(fields=("startTime",)),
        "ts_end": Col(fields=("endTime",)),
        "status": Col(fields=("status",), values={"success": "200", "failure": ""}),
        "prompt_tokens": Col(fields=("prompt_tokens",)),
        "completion_tokens": Col(fields=("completion_tokens",)),
        "streamed": Col(
            fields=("completionStartTime",), extra_fields=("endTime",),
            # LiteLLM sets completionStartTime = endTime for non-streamed calls
            sql="CASE WHEN {v} IS NULL THEN NULL ELSE {v} <> coalesce(gw_str({f:endTime}), '') END",
        ),
        "upstream": Col(fields=("api_base",)),
        "path": Col(fields=("call_type",)),
    },
    required=("request_id", "startTime"),
    signature=(("request_id",), ("startTime",), ("spend", "call_type", "api_key", "model_group")),
    notes=(
        "request_id = request_id; tenant = team_id (option tenant_field=end_user|user|organization_id|"
        "api_key); model = model_group else model; ts_start/ts_end = startTime/endTime (zone-less: read in "
        "--gateway-tz); status = 200 for 'success', NULL for 'failure' (errors are in LiteLLM_ErrorLogs); "
        "prompt/completion tokens as logged (tokens_source 'gateway'); streamed = completionStartTime "
        "set and different from endTime; upstream = api_base (the engine); path = call_type."
    ),
))

_add(Spec(
    name="otel",
    layer="otel",
    container="otlp",
    description="OpenTelemetry OTLP JSON spans with GenAI attributes",
    columns={
        "request_id": Col(fields=('$.attributes."gen_ai.response.id"', "spanId")),
        "header_request_id": Col(fields=('$.attributes."http.request.header.x-request-id"',
                                         '$.attributes."x-request-id"', "traceId")),
        "tenant_id": Col(fields=('$.attributes."tenant.id"', '$.resource."tenant.id"',
                                 '$.attributes."user.id"', '$.resource."user.id"')),
        "model": Col(fields=('$.attributes."gen_ai.request.model"', '$.attributes."gen_ai.response.model"')),
        "ts_start": Col(fields=("startTimeUnixNano",), unit="ns"),
        "ts_end": Col(fields=("endTimeUnixNano",), unit="ns"),
        "method": Col(fields=('$.attributes."http.request.method"', '$.attributes."http.method"')),
        "path": Col(fields=('$.attributes."url.path"', '$.attributes."http.target"')),
        "status": Col(fields=('$.attributes."http.response.status_code"', '$.attributes."http.status_code"')),
        "prompt_tokens": Col(fields=('$.attributes."gen_ai.usage.input_tokens"',
                                     '$.attributes."gen_ai.usage.prompt_tokens"')),
        "completion_tokens": Col(fields=('$.attributes."gen_ai.usage.output_tokens"',
                                         '$.attributes."gen_ai.usage.completion_tokens"')),
        "in_band_error": Col(fields=('$.attributes."error.type"',)),
        "upstream": Col(fields=('$.attributes."server.address"',)),
    },
    keep_sql="{f:$.genai} = 'true'",
    keep_reason="not a GenAI span (no gen_ai.* attribute)",
    required=("startTimeUnixNano",),
    signature=(("resourceSpans",),),
    notes=(
        "Spans from resourceSpans[].scopeSpans[].spans[]; attributes flattened to key -> value. "
        "request_id = gen_ai.response.id else spanId; header_request_id = x-request-id attribute else "
        "traceId; tenant = attribute or resource attribute tenant.id, else user.id (option "
        "tenant_attribute=NAME); model = gen_ai.request.model; ts = startTimeUnixNano/endTimeUnixNano "
        "(number or string, ns); status = http.response.status_code; tokens = gen_ai.usage.input_tokens/"
        "output_tokens; in_band_error = error.type; upstream = server.address. Spans without any gen_ai.* "
        "attribute are counted as rejected ('not a GenAI span')."
    ),
))

SMG_LINE_REGEX = (
    r"^(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?Z?)\s+(?P<level>[A-Z]+)\s+"
    r"http_request\{(?P<span>.*)\}: (?P<target>[\w:]+): (?:(?P<src>\S+:\d+): )?(?P<message>.*)$"
)

_add(Spec(
    name="smg-router",
    layer="router",
    container="text",
    line_regex=SMG_LINE_REGEX,
    description="SGLang model gateway (smg) / sgl-router text logs: http_request span lines",
    columns={
        "request_id": Col(fields=("span",), regex=r'request_id="?([^"\s]+)"?'),
        # the line is written when the request finishes: ts_end; start = end - latency (microseconds)
        "ts_end": Col(fields=("ts",)),
        "duration": Col(fields=("span",), regex=r"latency=(\d+)", unit="us"),
        "method": Col(fields=("span",), regex=r"method=(\S+)"),
        "path": Col(fields=("span",), regex=r"uri=(\S+)"),
        "status": Col(fields=("span",), regex=r"status_code=(\d+)"),
    },
    required=("ts",),
    fix_key="line_regex",
    notes=(
        "Only http_request{...} lines are requests; other lines (startup, PD errors) are counted as "
        "rejected ('not a router request line'); the engine loader reads them in full. ts_end = the line "
        "time (routers log UTC); ts_start = ts_end - latency (microseconds); request_id, method, uri, "
        "status_code from the span fields. No tenant, no tokens."
    ),
))




def resolve_spec(format: str) -> Spec | None:
    """The preset or mapping named by ``format`` (None for 'auto').

    Example:
        >>> resolve_spec("litellm").layer
        'proxy'
        >>> resolve_spec("nope")
        Traceback (most recent call last):
        ...
        forensics.errors.ParameterError: unknown gateway format 'nope' (use auto, cloudflare-http, cloudflare-ai-gateway, nginx-json, envoy, litellm, otel, smg-router, or a mapping .toml file)
    """
    if format == "auto":
        return None
    if format in PRESETS:
        return PRESETS[format]
    if format.endswith(".toml") or Path(format).is_file():
        return load_mapping(format)
    raise ParameterError(
        f"unknown gateway format {format!r}",
        hint=f"use auto, {', '.join(PRESETS)}, or a mapping .toml file",
    )


def apply_options(spec: Spec, options: dict[str, Any]) -> Spec:
    """Return ``spec`` with the tenant/layer options applied.

    Example:
        >>> apply_options(PRESETS["litellm"], {"tenant_field": "end_user"}).columns["tenant_id"].fields
        ('end_user',)
    """
    cols = dict(spec.columns)
    if options.get("tenant_field"):
        cols["tenant_id"] = Col(fields=(str(options["tenant_field"]),))
    if options.get("tenant_header"):
        name = str(options["tenant_header"])
        cols["tenant_id"] = Col(fields=(f"$.RequestHeaders.{json_path(name)[2:]}",),
                                extra_fields=("RequestHeaders",),
                                sql=f"coalesce({{v}}, gw_json_get({{f:RequestHeaders}}, {lit(json_path(name))}))")
    if options.get("tenant_key"):
        cols["tenant_id"] = meta_tenant(spec.columns.get("tenant_id", Col()).fields or ("metadata",),
                                        (str(options["tenant_key"]),))
    if options.get("tenant_attribute"):
        a = json_path(str(options["tenant_attribute"]))[2:]
        cols["tenant_id"] = Col(fields=(f"$.attributes.{a}", f"$.resource.{a}"))
    layer = str(options["layer"]) if options.get("layer") else spec.layer
    return replace(spec, columns=cols, layer=layer)
