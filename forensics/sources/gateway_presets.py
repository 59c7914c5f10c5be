"""Gateway presets and TOML mappings: which source field feeds which canonical column.

A :class:`Spec` says, for one log format, where each canonical ``gateway_requests`` column comes
from. Presets are specs written here; a TOML mapping file is compiled into the same structure, so
both go through one loader (:mod:`forensics.sources.gateway`).

A field is either a top-level key taken literally (``"gen_ai.usage.input_tokens"`` is ONE key) or a
DuckDB JSON path starting with ``$`` (``'$.RequestHeaders."x-request-id"'``).

Example:
    >>> PRESETS["cloudflare-http"].layer
    'edge'
    >>> spec = load_mapping_text('[columns]\\nts_start = "time"\\nrequest_id = "$.req.id"', "m.toml")
    >>> spec.columns["request_id"].fields
    ('$.req.id',)
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.errors import MappingError

#: Canonical columns a preset or mapping may fill (``duration`` is a helper: ts_end = ts_start +
#: duration, or ts_start = ts_end - duration when only the end is logged).
MAPPABLE_COLUMNS: tuple[str, ...] = (
    "request_id",
    "header_request_id",
    "tenant_id",
    "model",
    "ts_start",
    "ts_end",
    "duration",
    "method",
    "path",
    "status",
    "prompt_tokens",
    "completion_tokens",
    "request_bytes",
    "response_bytes",
    "streamed",
    "in_band_error",
    "upstream",
)

#: Kind of each mappable column: how the extracted text is converted.
COLUMN_KIND: dict[str, str] = {
    "request_id": "str",
    "header_request_id": "str",
    "tenant_id": "str",
    "model": "str",
    "ts_start": "ts",
    "ts_end": "ts",
    "duration": "duration",
    "method": "str",
    "path": "str",
    "status": "int",
    "prompt_tokens": "int",
    "completion_tokens": "int",
    "request_bytes": "int",
    "response_bytes": "int",
    "streamed": "bool",
    "in_band_error": "str",
    "upstream": "str",
}

UNITS = ("s", "ms", "us", "ns")
LAYERS = ("edge", "ai-gateway", "proxy", "router", "otel", "lb", "app")
CONTAINERS = ("auto", "ndjson", "csv", "json", "parquet", "text", "otlp")


@dataclass(frozen=True)
class Col:
    """Where one canonical column comes from.

    ``fields`` are tried in order (first non-empty wins); ``regex`` then picks ``group`` out of
    the value; ``values`` maps whole values (e.g. ``success`` -> ``200``); ``default`` fills a
    missing value; ``unit``/``format`` steer timestamp and duration parsing. ``sql`` is a preset-only
    escape hatch: a DuckDB expression over ``{v}`` (the value after the steps above) and
    ``{f:<field>}`` (any other field's text).

    Example:
        >>> Col(fields=("status",), values={"success": "200"}).values["success"]
        '200'
    """

    fields: tuple[str, ...] = ()
    regex: str | None = None
    group: int = 1
    values: dict[str, str] | None = None
    default: str | None = None
    unit: str | None = None
    format: str | None = None
    sql: str | None = None
    extra_fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class Spec:
    """A complete description of one gateway log format.

    Example:
        >>> PRESETS["litellm"].columns["tenant_id"].fields
        ('team_id',)
    """

    name: str
    layer: str
    columns: dict[str, Col]
    description: str = ""
    container: str = "auto"
    #: regex with named groups for text logs; each group becomes a field of that name
    line_regex: str | None = None
    #: rows failing this DuckDB condition (over {f:<field>}) are rejected with ``keep_reason``
    keep_sql: str | None = None
    keep_reason: str = ""
    #: fields of which at least one must exist somewhere in a file (else MissingFieldError)
    required: tuple[str, ...] = ()
    #: key in the preset/mapping to fix when a required field is missing
    fix_key: str = ""
    #: detection: every group must have a key present in a sample record
    signature: tuple[tuple[str, ...], ...] = ()
    #: documentation of the fields read and the derivations (for docs and --help)
    notes: str = ""
    #: tz of zone-less values declared by a mapping (overrides the ingest tz)
    tz: str | None = None
    source: str = "preset"
    options: dict[str, Any] = field(default_factory=dict)

    def all_fields(self) -> list[str]:
        """Every source field the spec reads, in first-use order (no duplicates)."""
        out: list[str] = []
        for col in self.columns.values():
            for f in (*col.fields, *col.extra_fields):
                if f not in out:
                    out.append(f)
        for f in re.findall(r"\{f:([^}]+)\}", self.keep_sql or ""):
            if f not in out:
                out.append(f)
        return out


def json_path(field_name: str) -> str:
    """The DuckDB JSON path of a field: ``$``-paths as given, other names as one quoted key.

    Example:
        >>> json_path("gen_ai.usage.input_tokens")
        '$."gen_ai.usage.input_tokens"'
        >>> json_path('$.RequestHeaders."x-request-id"')
        '$.RequestHeaders."x-request-id"'
    """
    if field_name.startswith("$"):
        return field_name
    return '$."' + field_name.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- presets ------------------------------------------------------------------------------------

TENANT_META_KEYS = ("tenant", "tenant_id", "tenantId", "customer", "customer_id", "account_id",
                     "accountId", "team_id", "user", "user_id", "userId")


def meta_tenant(meta_fields: tuple[str, ...], keys: tuple[str, ...] = TENANT_META_KEYS) -> Col:
    """Tenant from keys inside a metadata field (a JSON-encoded string or an object).

    Example:
        >>> print(meta_tenant(("metadata",), ("team",)).sql)
        coalesce(gw_json_get({v}, '$."team"'))
    """
    # metadata is a JSON-encoded string (REST) or an object (Logpush, unless encrypted): both come
    # out of json_extract_string as JSON text; the first tenant-like key wins.
    paths = ", ".join(f"gw_json_get({{v}}, '{json_path(k)}')" for k in keys)
    return Col(fields=meta_fields, sql=f"coalesce({paths})")


#: SQL snippets over {v}: the path without its query, the rest after a marker, the path segment
#: after a marker. split_part/strpos rather than capturing regexes: measured on a million rows,
#: a regexp_extract costs 3-4 times as much, and this runs on every row of every edge log.
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
        "status": Col(fields=("status",), values={"success": "200"}),
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


# -- TOML mappings ------------------------------------------------------------------------------

_COL_KEYS = {"field", "fields", "regex", "group", "map", "default", "unit", "format"}


def _col_from_toml(name: str, value: Any, where: str) -> Col:
    if isinstance(value, str):
        return Col(fields=(value,))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return Col(fields=tuple(value))
    if not isinstance(value, dict):
        raise MappingError(f"column {name!r} must be a field name, a list of fields or a table",
                           where=where, hint='e.g. request_id = "$.req.id"')
    unknown = set(value) - _COL_KEYS
    if unknown:
        raise MappingError(f"column {name!r} has unknown keys {sorted(unknown)}", where=where,
                           hint=f"allowed: {', '.join(sorted(_COL_KEYS))}")
    fields = value.get("fields", value.get("field"))
    if isinstance(fields, str):
        fields = [fields]
    if not fields or not all(isinstance(f, str) for f in fields):
        raise MappingError(f"column {name!r} needs 'field' (or 'fields')", where=where,
                           hint='e.g. tenant_id = { field = "$.headers.x-tenant" }')
    regex = value.get("regex")
    if regex is not None:
        try:
            compiled = re.compile(regex)
        except re.error as exc:
            raise MappingError(f"column {name!r}: invalid regex {regex!r}: {exc}", where=where) from exc
        if "'" in regex:
            raise MappingError(f"column {name!r}: regex may not contain a single quote", where=where)
    unit = value.get("unit")
    if unit is not None and unit not in UNITS:
        raise MappingError(f"column {name!r}: unit must be one of {', '.join(UNITS)}", where=where)
    mapping = value.get("map")
    if mapping is not None and not isinstance(mapping, dict):
        raise MappingError(f"column {name!r}: map must be a table of value = replacement", where=where)
    group = int(value.get("group", 1 if regex is None or compiled.groups else 0))
    return Col(
        fields=tuple(fields),
        regex=regex,
        group=group,
        values={str(k): str(v) for k, v in mapping.items()} if mapping else None,
        default=None if value.get("default") is None else str(value["default"]),
        unit=unit,
        format=value.get("format"),
    )


def load_mapping_text(text: str, name: str) -> Spec:
    """Compile the text of a TOML mapping file into a :class:`Spec`.

    Example:
        >>> spec = load_mapping_text('''
        ... [gateway]
        ... layer = "proxy"
        ... [columns]
        ... ts_start = { field = "started", unit = "ms" }
        ... tenant_id = { field = "$.consumer.username", regex = "^team-(.*)$" }
        ... ''', "kong.toml")
        >>> spec.layer, spec.columns["tenant_id"].regex
        ('proxy', '^team-(.*)$')
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MappingError(f"not valid TOML: {exc}", where=name, hint="check the mapping file's syntax") from exc
    unknown = set(doc) - {"gateway", "columns"}
    if unknown:
        raise MappingError(f"unknown sections {sorted(unknown)}", where=name,
                           hint="a mapping has a [gateway] table and a [columns] table")
    gw = doc.get("gateway", {})
    cols = doc.get("columns")
    if not isinstance(cols, dict) or not cols:
        raise MappingError("missing [columns] table", where=name,
                           hint='map canonical columns to fields, e.g. ts_start = "time"')
    bad = set(cols) - set(MAPPABLE_COLUMNS)
    if bad:
        raise MappingError(f"unknown canonical columns {sorted(bad)}", where=name,
                           hint=f"allowed: {', '.join(MAPPABLE_COLUMNS)}")
    if "ts_start" not in cols and "ts_end" not in cols:
        raise MappingError("a mapping needs ts_start or ts_end", where=name,
                           hint='add e.g. ts_start = "timestamp"')
    gw_unknown = set(gw) - {"name", "layer", "container", "line_regex", "tz", "required", "description"}
    if gw_unknown:
        raise MappingError(f"unknown [gateway] keys {sorted(gw_unknown)}", where=name,
                           hint="allowed: name, layer, container, line_regex, tz, required, description")
    container = gw.get("container", "auto")
    if container not in CONTAINERS:
        raise MappingError(f"container must be one of {', '.join(CONTAINERS)}", where=name)
    line_regex = gw.get("line_regex")
    if line_regex is not None:
        try:
            groups = re.compile(line_regex).groupindex
        except re.error as exc:
            raise MappingError(f"invalid line_regex: {exc}", where=name) from exc
        if not groups:
            raise MappingError("line_regex needs named groups, e.g. (?P<ts>\\S+)", where=name)
        if "'" in line_regex:
            raise MappingError("line_regex may not contain a single quote", where=name)
        container = "text"
    columns = {k: _col_from_toml(k, v, f"{name} [columns].{k}") for k, v in cols.items()}
    ts_col = columns.get("ts_start") or columns["ts_end"]
    required = tuple(gw.get("required", ("|".join(ts_col.fields),)))
    return Spec(
        name=f"mapping:{Path(name).name}",
        layer=str(gw.get("layer", "edge")),
        columns=columns,
        description=str(gw.get("description", gw.get("name", Path(name).stem))),
        container=container,
        line_regex=line_regex,
        required=required,
        fix_key=f"{Path(name).name} [columns]",
        tz=gw.get("tz"),
        source=str(name),
    )


def load_mapping(path: str | Path) -> Spec:
    """Read and compile a TOML mapping file.

    Example:
        >>> load_mapping("missing.toml")
        Traceback (most recent call last):
        ...
        forensics.errors.MappingError: missing.toml: mapping file not found (check the path)
    """
    p = Path(path)
    if not p.is_file():
        raise MappingError("mapping file not found", where=str(path), hint="check the path")
    return load_mapping_text(p.read_text(encoding="utf-8"), str(path))
