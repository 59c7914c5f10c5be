"""What a gateway format says: which source field feeds which canonical column.

A :class:`Spec` says, for one log format, where each canonical ``gateway_requests`` column comes
from. Presets (:mod:`.presets`) and users' TOML mappings (:mod:`.mapping`) are both compiled into
this structure, so both go through one loader.

A field is either a top-level key taken literally (``"gen_ai.usage.input_tokens"`` is ONE key) or a
DuckDB JSON path starting with ``$`` (``'$.RequestHeaders."x-request-id"'``).

Example:
    >>> Spec("x", "edge", {"ts_start": Col(fields=("time",))}).all_fields()
    ['time']
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
        >>> Spec("m", "proxy", {"tenant_id": Col(fields=("team_id",))}).columns["tenant_id"].fields
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
    #: detection: every group must have a key present in a sample record
    signature: tuple[tuple[str, ...], ...] = ()
    #: tz of zone-less values declared by a mapping (overrides the ingest tz)
    tz: str | None = None
    source: str = "preset"

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
